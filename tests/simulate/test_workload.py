import json
import re
from collections import Counter
from typing import Any

import pytest

from tests.builders import pod
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoRequest, decide_on_nodes
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.model import NVIDIA, PERCENTAGE_UNSET
from vgpu_scheduler.simulate.predicates import compute_pod_resources
from vgpu_scheduler.simulate.workload import KIND_LABEL, KIND_WEIGHTS, demo_workload
from vgpu_scheduler.standin.embedded.fleet import A100_80GB, demo_fleet, demo_gpu_uuids
from vgpu_scheduler.standin.embedded.runtime import (
    DURATION_ANNOTATION,
    InvalidDurationError,
    duration_seconds,
)
from vgpu_scheduler.wire.keys import (
    GPU_SCHEDULER_POLICY,
    NODE_SCHEDULER_POLICY,
    NOUSE_GPUUUID,
    NUMA_BIND,
    USE_GPUTYPE,
    USE_GPUUUID,
)

VENDORS = build()
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")


def test_same_seed_same_pods_byte_for_byte() -> None:
    assert json.dumps(demo_workload(300, 7)) == json.dumps(demo_workload(300, 7))
    assert demo_workload(300, 7) != demo_workload(300, 8)
    assert demo_workload(10, 7) == demo_workload(300, 7)[:10]  # a prefix does not depend on n


def test_pods_look_like_real_submitted_pods() -> None:
    pods = demo_workload(400, 1)
    names = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods]
    assert len(set(names)) == len(pods)
    assert len({p["metadata"]["uid"] for p in pods}) == len(pods)
    for p in pods:
        assert p["apiVersion"] == "v1" and p["kind"] == "Pod"
        assert DNS_LABEL.match(p["metadata"]["name"])
        assert p["spec"]["schedulerName"] == "hami-scheduler"
        assert p["status"]["phase"] == "Pending"
        assert isinstance(p["spec"]["priority"], int)
        for c in p["spec"]["containers"]:
            assert {"cpu", "memory"} <= set(c["resources"]["requests"])
        res = compute_pod_resources(p)
        assert res.error is None and res.requests["cpu"] > 0
        assert all(isinstance(v, str) for v in p["metadata"].get("annotations", {}).values())


def test_mix_covers_every_kind_and_feature() -> None:
    pods = demo_workload(500, 3)
    kinds = Counter(p["metadata"]["labels"][KIND_LABEL] for p in pods)
    assert set(kinds) == set(KIND_WEIGHTS)
    annotations = Counter(k for p in pods for k in p["metadata"].get("annotations", {}))
    for key in (
        GPU_SCHEDULER_POLICY,
        NODE_SCHEDULER_POLICY,
        USE_GPUTYPE,
        USE_GPUUUID,
        NOUSE_GPUUUID,
        NUMA_BIND,
        DURATION_ANNOTATION,
    ):
        assert annotations[key] > 0, key
    assert any(p["spec"]["priority"] > 0 for p in pods)
    assert any(p["spec"]["priority"] == 0 for p in pods)
    assert any(DURATION_ANNOTATION not in p["metadata"].get("annotations", {}) for p in pods)


def _nvidia(p: dict[str, Any]) -> list[Any]:
    return [r.get(NVIDIA) for r in pod_requests(p, VENDORS)]


def test_each_kind_asks_the_scheduler_for_what_it_says() -> None:
    pool = set(demo_gpu_uuids())
    for p in demo_workload(500, 11):
        kind = p["metadata"]["labels"][KIND_LABEL]
        reqs = _nvidia(p)
        annotations = p["metadata"].get("annotations", {})
        if kind == "cpu":
            assert reqs == [None]
            continue
        app = reqs[-1]
        assert app is not None
        if kind == "whole":
            assert (app.nums, app.mem_percentage_req, app.coresreq) == (1, 100, 100)
        elif kind == "slice":
            assert app.nums == 1 and app.memreq > 0 and 0 < app.coresreq < 100
        elif kind == "percent":
            assert app.memreq == 0 and app.mem_percentage_req in (10, 25, 50)
        elif kind == "multi":
            assert app.nums in (2, 4)
        elif kind == "init":
            assert len(reqs) == 2 and reqs[0] is not None and reqs[0].nums == 1
            assert p["spec"]["initContainers"][0]["name"] == "warmup"
        elif kind == "typed":
            assert annotations[USE_GPUTYPE] == "A100" and app.memreq > 32768  # only fits an A100
        elif kind == "uuid":
            listed = annotations.get(USE_GPUUUID) or annotations[NOUSE_GPUUUID]
            assert set(listed.split(",")) <= pool
        if kind != "percent":
            assert app.mem_percentage_req in (PERCENTAGE_UNSET, 100)


def test_uuid_pool_can_be_given() -> None:
    pods = demo_workload(300, 5, uuid_pool=["GPU-only-one"])
    listed = {
        v
        for p in pods
        for k, v in p["metadata"].get("annotations", {}).items()
        if k in (USE_GPUUUID, NOUSE_GPUUUID)
    }
    assert listed == {"GPU-only-one"}
    with pytest.raises(ValueError, match="uuid_pool"):
        demo_workload(1, 1, uuid_pool=[])
    with pytest.raises(ValueError, match="n must be"):
        demo_workload(-1, 1)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({}, None, id="no annotation"),
        pytest.param({DURATION_ANNOTATION: "90"}, 90.0, id="90 seconds"),
        pytest.param({DURATION_ANNOTATION: " 1.5 "}, 1.5, id="spaces trimmed"),
        pytest.param({DURATION_ANNOTATION: "0"}, 0.0, id="zero"),
    ],
)
def test_duration_seconds(annotations: dict[str, str], expected: float | None) -> None:
    assert duration_seconds(pod(annotations=annotations)) == expected


@pytest.mark.parametrize("raw", ["soon", "-5", "nan", "inf", ""])
def test_malformed_duration_is_a_clear_error(raw: str) -> None:
    with pytest.raises(InvalidDurationError, match=DURATION_ANNOTATION):
        duration_seconds(pod(annotations={DURATION_ANNOTATION: raw}))


def test_demo_workload_fits_the_empty_demo_fleet_through_the_engine() -> None:
    """Interop: the engine's side-effect-free decision places every GPU pod on the empty demo fleet,
    A100-only pods on A100 nodes and use-gpuuuid pods on one of the listed GPUs."""
    nodes = demo_fleet()
    a100_nodes = {
        n["metadata"]["name"]
        for n in nodes
        if A100_80GB.type in n["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    }
    checked: Counter[str] = Counter()
    for p in demo_workload(200, 2):
        decision = decide_on_nodes(
            p, nodes, VENDORS, default_node_policy="binpack", default_gpu_policy="spread", now=0
        )
        annotations = p["metadata"].get("annotations", {})
        if p["metadata"]["labels"][KIND_LABEL] == "cpu":
            assert isinstance(decision, NoRequest)
            continue
        assert isinstance(decision, Chosen), (p["metadata"]["name"], decision)
        if USE_GPUTYPE in annotations:
            assert decision.node in a100_nodes
            checked["type"] += 1
        if USE_GPUUUID in annotations:
            used = {d.uuid for container in decision.devices[NVIDIA] for d in container}
            assert used <= set(annotations[USE_GPUUUID].split(","))
            checked["uuid"] += 1
    assert checked["type"] > 0 and checked["uuid"] > 0
