"""`vgpu-scheduler simulate` over random hostile clusters (issue 27, item 2), through its command line.

Every run must end within MAX_CYCLES scheduling attempts (counted, not timed), never raise, exit 0
with a report (or 2 with one line, for the inputs it refuses: an unknown policy flag, a malformed
run time), over-commit no device that was not over-committed before the run, and give a pod only
devices of the node it is bound to.

CI runs the default profile's examples; the longer profile runs by hand
(`pytest tests/simulate/test_fuzz.py --hypothesis-profile=simulate-long`, figures in
docs/testing.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings

from tests.simulate.hostile import Scenario, scenarios
from vgpu_scheduler.engine.policy import NODE_POLICIES
from vgpu_scheduler.simulate import loop
from vgpu_scheduler.simulate.cli import main
from vgpu_scheduler.standin.embedded.runtime import InvalidDurationError, duration_seconds
from vgpu_scheduler.wire import keys

MAX_CYCLES = 5_000
"""Scheduling attempts a run may make: far above what ending runs need (a few per pod per event)."""


class RunawayError(AssertionError):
    """The simulation went past MAX_CYCLES attempts: it would not have ended."""


@contextmanager
def bounded_cycles() -> Iterator[None]:
    original = loop.Simulation._schedule_one

    async def counted(self: loop.Simulation, qp: Any) -> None:
        if self.cycles > MAX_CYCLES:
            raise RunawayError(f"more than {MAX_CYCLES} scheduling attempts")
        await original(self, qp)

    with mock.patch.object(loop.Simulation, "_schedule_one", counted):
        yield


def _write_list(path: Path, items: list[dict[str, Any]]) -> str:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def _refused(scenario: Scenario) -> bool:
    """Inputs the command refuses before it runs: an unknown policy flag, a malformed run time."""
    flags = dict(zip(scenario.flags[::2], scenario.flags[1::2], strict=True))
    if flags.get("--node-scheduler-policy", "binpack") not in NODE_POLICIES:
        return True
    if flags.get("--gpu-scheduler-policy") == "pack":
        return True
    for p in scenario.pods:
        try:
            duration_seconds(p)
        except InvalidDurationError:
            return True
    return False


def _run(
    tmp: Path, scenario: Scenario, pods: list[dict[str, Any]], capsys: Any
) -> tuple[int, str, dict[str, Any]]:
    snapshot = _write_list(tmp / "snapshot.json", [*scenario.nodes, *scenario.bound])
    pods_file = _write_list(tmp / "pods.json", pods)
    out = tmp / "report.json"
    out.unlink(missing_ok=True)
    with bounded_cycles():
        code = main(["--snapshot", snapshot, "--pods", pods_file, "--output", str(out), *scenario.flags])
    printed = capsys.readouterr()
    if cycles := re.search(r"\((\d+) scheduling cycles\)", printed.out):
        event(f"scheduling cycles <= {_bucket(int(cycles.group(1)))}")
    return code, printed.err, json.loads(out.read_text()) if out.exists() else {}


def _bucket(n: int) -> int:
    return next(b for b in (10, 30, 100, 300, 1000, MAX_CYCLES, 10**9) if n <= b)


def _devices_by_node(report: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    by_node: dict[str, dict[str, dict[str, Any]]] = {}
    for d in report["devices"]:
        by_node.setdefault(d["node"], {})[d["uuid"]] = d
    return by_node


def _over(d: Mapping[str, Any]) -> bool:
    return d["used"] > d["count"] or d["usedmem"] > d["devmem"] or d["usedcores"] > max(d["devcore"], 100)


def _allocated_uuids(annotations: Mapping[str, str]) -> set[str]:
    """Device ids in every `…devices-allocated` / `…devices-to-allocate` annotation of a pod."""
    uuids = set()
    for key, value in annotations.items():
        if key.endswith(("devices-allocated", "devices-to-allocate")):
            for entry in value.replace(";", ":").split(":"):
                uuid = entry.split(",")[0]
                if uuid:
                    uuids.add(uuid)
    return uuids


def check_run(tmp: Path, scenario: Scenario, capsys: Any) -> None:
    code, err, report = _run(tmp, scenario, scenario.pods, capsys)
    if _refused(scenario):
        event("refused")
        assert code == 2 and not report
        assert err.count("\n") == 1 and err.startswith("vgpu-scheduler simulate: "), err
        return
    assert code == 0, err
    summary = report["summary"]
    assert summary["end"] == "done"
    assert summary["pods"]["total"] == len(scenario.pods)
    event(f"scheduled {summary['pods']['scheduled']}/{summary['pods']['total']}")
    if summary["pods"]["pending_error"]:
        event("some pod pending on an error")
    for entry in report["pods"]:
        if entry["node"] is None:
            assert entry["reasons"] or entry.get("error") or not scenario.nodes
    # Over-commit: a device past its capacity at the end was so before the run, and nothing was added.
    before_code, _, before = _run(tmp, scenario, [], capsys)
    assert before_code == 0
    baseline = _devices_by_node(before)
    after = _devices_by_node(report)
    for node_name, devices in after.items():
        for uuid, d in devices.items():
            if _over(d):
                assert baseline.get(node_name, {}).get(uuid) == d, f"{node_name}/{uuid} over-committed: {d}"
    # Devices of the pod's own node only, and the node the pod is bound to is the one its annotation names.
    for entry in report["pods"]:
        node_name = entry["node"]
        if node_name is None:
            continue
        annotations = entry["annotations"]
        if keys.VGPU_NODE in annotations:
            assert annotations[keys.VGPU_NODE] == node_name
        foreign = _allocated_uuids(annotations) - set(after.get(node_name, {}))
        assert not foreign, f"{entry['name']} on {node_name} holds devices of another node: {foreign}"


@settings(deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture,
])
@given(scenario=scenarios)
def test_simulate_ends_and_stays_sound_on_hostile_clusters(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    with TemporaryDirectory() as tmp:
        check_run(Path(tmp), scenario, capsys)

