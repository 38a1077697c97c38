"""`explain`: for each node and device, the check that failed and the numbers behind it, through
the engine, the CLI on a snapshot file and the server's GET /explain route. Nothing changes."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import GIB, gpu_node, gpu_pod, gpu_quota, gpu_uuid, node, placed_pod
from vgpu_scheduler.cli import main as root_main
from vgpu_scheduler.cluster.nodelock import format_lock, format_rfc3339
from vgpu_scheduler.configfile import default_device_config
from vgpu_scheduler.engine.explain import ALLOCATED, FITS, NO_REQUEST, PENDING, explain_pod, render_text
from vgpu_scheduler.explain.cli import explain_objects
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire import reasons as R


def _checks(exp: Any, node_name: str) -> dict[str, str]:
    report = next(n for n in exp.nodes if n.node == node_name)
    return {d.uuid: d.checks[0].verdict for d in report.devices}


async def _explain(objects: list[dict[str, Any]], name: str, namespace: str = "default") -> Any:
    return await explain_objects(
        objects, namespace, name, opts=SchedulerOptions(), device_config=default_device_config()
    )


async def test_each_device_names_its_first_failing_check_with_the_numbers() -> None:
    small = gpu_node("small", gpus=1, devmem=4 * GIB)
    busy = gpu_node("busy", gpus=1, count=1)
    other = gpu_node("other", gpus=1, type="NVIDIA-T4")
    holder = placed_pod("holder", "busy", f"{gpu_uuid('busy', 0)},NVIDIA,1000,10:;")
    want = gpu_pod("want", mem=8 * GIB, annotations={"nvidia.com/use-gputype": "A10"})
    exp = await _explain([small, busy, other, holder, want], "want")
    assert exp.status == PENDING and exp.node is None
    assert _checks(exp, "small") == {gpu_uuid("small", 0): R.CARD_INSUFFICIENT_MEMORY}
    assert _checks(exp, "busy") == {gpu_uuid("busy", 0): R.CARD_TIME_SLICING_EXHAUSTED}
    assert _checks(exp, "other") == {gpu_uuid("other", 0): R.CARD_TYPE_MISMATCH}
    small_report = next(n for n in exp.nodes if n.node == "small")
    assert small_report.reason == "1/1 CardInsufficientMemory"  # exactly the filter's FailedNodes text
    assert small_report.devices[0].checks[0].detail == "free 4096 MiB < 8192 MiB asked"
    busy_check = next(n for n in exp.nodes if n.node == "busy").devices[0].checks[0]
    assert busy_check.detail == "1 of 1 shares taken"
    text = render_text(exp)
    assert "Pod default/want: pending; fits on none of 3 nodes" in text
    assert "Node small: does not fit: 1/1 CardInsufficientMemory" in text
    assert "    cuda: CardInsufficientMemory (free 4096 MiB < 8192 MiB asked)" in text


async def test_a_pod_that_fits_says_where_and_why() -> None:
    exp = await _explain([gpu_node("n1"), gpu_node("n2", gpus=1), gpu_pod("p", mem=1024)], "p")
    assert exp.status == PENDING and exp.node in ("n1", "n2")
    assert all(n.fits for n in exp.nodes)
    assert {c.verdict for n in exp.nodes for d in n.devices for c in d.checks} == {FITS}
    assert f"Pod default/p: pending; fits on {exp.node} now (2 of 2 nodes fit)" in render_text(exp)
    assert "(chosen)" in render_text(exp)


async def test_a_broken_inventory_is_named_and_poisons_no_other_node() -> None:
    broken = node("broken", typed=True, annotations={keys.NODE_NVIDIA_REGISTER: "[{not json"})
    exp = await _explain([broken, gpu_node("good"), gpu_pod("p")], "p")
    reports = {n.node: n for n in exp.nodes}
    assert reports["broken"].problem and not reports["broken"].devices
    assert "no usable devices" in render_text(exp)
    assert reports["good"].fits and exp.node == "good"


async def test_a_placed_pod_is_reported_where_it_is_without_deciding_again() -> None:
    placed = placed_pod("p", "n1", f"{gpu_uuid('n1', 0)},NVIDIA,1000,10:;")
    placed["spec"]["nodeName"] = "n1"
    exp = await _explain([gpu_node("n1"), gpu_node("n2"), placed], "p")
    assert (exp.status, exp.node) == (ALLOCATED, "n1")
    assert "Pod default/p: allocated on n1" in render_text(exp)


async def test_quota_and_lock_are_shown() -> None:
    taken = datetime.now(UTC).replace(microsecond=0)  # live: an expired lock is described as such
    lock = format_lock(taken, "x", "y")
    n1 = gpu_node("n1", annotations={keys.NODE_LOCK: lock})
    want = gpu_pod("p", namespace="team", mem=8 * GIB)
    exp = await _explain([n1, gpu_quota(mem=4 * GIB, namespace="team"), want], "p", "team")
    assert [(q.used, q.limit) for q in exp.quota if q.resource == "nvidia.com/gpumem"] == [(0, 4 * GIB)]
    assert {c.verdict for d in exp.nodes[0].devices for c in d.checks} == {R.RESOURCE_QUOTA_NOT_FIT}
    assert exp.nodes[0].lock == f"held by x/y since {format_rfc3339(taken)}"


async def test_a_pod_without_devices_is_left_to_kube_scheduler() -> None:
    plain = gpu_pod("p")
    plain["spec"]["containers"][0]["resources"] = {}
    exp = await _explain([gpu_node("n1"), plain], "p")
    assert exp.status == NO_REQUEST and exp.nodes == []


def test_explain_changes_nothing_in_the_state() -> None:
    from tests.builders import device
    from vgpu_scheduler.devices.registry import build
    from vgpu_scheduler.engine.state import SchedulerState

    state = SchedulerState(build())
    state.set_node_devices("n1", [device("GPU-1")])
    before = copy.deepcopy(state.ledger.snapshot())
    exp = explain_pod(gpu_pod("p", uid="u1"), ["n1"], state, default_node_policy="binpack",
                      default_gpu_policy="spread", now=1)
    assert exp.node == "n1"
    assert state.ledger.snapshot() == before and state.allocation("u1") is None


def _snapshot(tmp_path: Path, objects: list[dict[str, Any]]) -> str:
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


def test_cli_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = _snapshot(tmp_path, [gpu_node("n1", gpus=1, devmem=4 * GIB), gpu_pod("p", mem=8 * GIB)])
    assert root_main(["explain", "default/p", "--snapshot", snap]) == 0
    assert "Node n1: does not fit: 1/1 CardInsufficientMemory" in capsys.readouterr().out
    assert root_main(["explain", "p", "--snapshot", snap, "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "pending" and data["node"] is None
    assert data["nodes"][0]["devices"][0]["checks"][0]["verdict"] == "CardInsufficientMemory"
    assert data["nodes"][0]["devices"][0]["memory"] == [0, 4 * GIB]


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["explain", "default/ghost"], 1, "pod default/ghost not found"),
        (["explain", "a/b/c"], 2, "expected NAMESPACE/POD or POD"),
        (["explain", "p", "-o", "yaml"], 2, "invalid choice"),
    ],
    ids=["unknown pod", "bad reference", "bad output"],
)
def test_cli_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
    snap = _snapshot(tmp_path, [gpu_node("n1"), gpu_pod("p")])
    assert root_main([*argv, "--snapshot", snap]) == code
    assert message in capsys.readouterr().err


def test_cli_missing_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert root_main(["explain", "p", "--snapshot", str(tmp_path / "none.yaml")]) == 2
    assert "none.yaml" in capsys.readouterr().err
