"""The filter decision (§5.7, §4.1) on the live state and on node objects."""

from __future__ import annotations

import copy
import json
from functools import partial
from typing import Any

import pytest

from tests.builders import assigned_annotations, device, gpu_quota, inventory, pod
from tests.builders import gpu_container as ctr
from tests.builders import node as node_object
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import (
    Chosen,
    Decision,
    Error,
    NoFit,
    NoRequest,
    decide,
    decide_on_nodes,
)
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import DeviceInfo, MigPlacement, MigProfile
from vgpu_scheduler.wire import keys

VENDORS = build()
NOW = 1764400000


gpu = partial(device, devmem=8000)


def make_pod(name: str = "p", *containers: dict[str, Any], init: list[dict[str, Any]] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pending pod of namespace `team` (uid `uid-<name>`); one 1000 MiB GPU container by default."""
    return pod(name, namespace="team", uid=f"uid-{name}", annotations=dict(annotations or {}),
               containers=list(containers) or [ctr(mem=1000)], init_containers=init or [], phase="Pending")


def scheduled(name: str, node: str, allocated: str) -> dict[str, Any]:
    return make_pod(name, annotations=assigned_annotations(node, allocated))


def cluster(*nodes: tuple[str, list[DeviceInfo]]) -> SchedulerState:
    s = SchedulerState(VENDORS)
    for name, devices in nodes:
        s.set_node_devices(name, devices)
    return s


def run(pod: dict[str, Any], s: SchedulerState, names: list[str], policy: str = "binpack",
        gpu_policy: str = "spread") -> Decision:
    """Decide with early stop, check it matches the evaluate-all reference, and return it."""
    reference_state = copy.deepcopy(s)
    got = decide(pod, names, s, default_node_policy=policy, default_gpu_policy=gpu_policy, now=NOW)
    want = decide(
        pod,
        names,
        reference_state,
        default_node_policy=policy,
        default_gpu_policy=gpu_policy,
        now=NOW,
        evaluate_all=True,
    )
    if isinstance(got, Chosen):
        assert isinstance(want, Chosen)
        assert (got.node, got.devices, got.mig, got.annotations) == (want.node, want.devices, want.mig,
                                                                     want.annotations)
    else:
        assert got == want
    return got


def chosen_node(d: Decision) -> str:
    assert isinstance(d, Chosen), d
    return d.node


# --- node choice --------------------------------------------------------------------------------


def three_nodes_with_usage() -> SchedulerState:
    s = cluster(("a", [gpu("GPU-a")]), ("b", [gpu("GPU-b")]), ("c", [gpu("GPU-c")]))
    s.on_pod(scheduled("x", "b", "GPU-b,NVIDIA,4000,0:;"))
    s.on_pod(scheduled("y", "c", "GPU-c,NVIDIA,1000,0:;"))
    return s


@pytest.mark.parametrize(
    ("default_policy", "pod_policy", "expected"),
    [
        ("binpack", None, "b"),
        ("spread", None, "a"),
        ("binpack", "spread", "a"),
        ("spread", "binpack", "b"),
        ("anything-else", None, "b"),  # not spread ⇒ binpack
    ],
)
def test_node_policy_with_existing_usage(default_policy: str, pod_policy: str | None, expected: str) -> None:
    annotations = {keys.NODE_SCHEDULER_POLICY: pod_policy} if pod_policy else {}
    pod = make_pod("p", annotations=annotations)
    assert chosen_node(run(pod, three_nodes_with_usage(), ["a", "b", "c"], default_policy)) == expected


def test_binpack_skips_a_full_node() -> None:
    s = three_nodes_with_usage()
    pod = make_pod("p", ctr(mem=4500))  # b (most used) has only 4000 left
    assert chosen_node(run(pod, s, ["a", "b", "c"])) == "c"


@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_equal_scores_tie_break_by_node_name(policy: str) -> None:
    s = cluster(("n-b", [gpu("GPU-1")]), ("n-c", [gpu("GPU-2")]), ("n-a", [gpu("GPU-3")]))
    assert chosen_node(run(make_pod(), s, ["n-c", "n-b", "n-a"], policy)) == "n-a"


def test_only_candidates_are_considered() -> None:
    s = three_nodes_with_usage()
    assert chosen_node(run(make_pod(), s, ["a", "c"])) == "c"


@pytest.mark.parametrize(("policy", "expected"), [("binpack", "n3"), ("spread", "n1")])
def test_few_candidates_among_many_nodes(policy: str, expected: str) -> None:
    # 2 candidates out of 9 nodes: ordered by sorting the candidates, not by walking the index.
    s = cluster(*((f"n{i}", [gpu(f"GPU-{i}")]) for i in range(9)))
    for i in range(9):
        s.on_pod(scheduled(f"x{i}", f"n{i}", f"GPU-{i},NVIDIA,{100 * (9 - i) if i != 1 else 50},0:;"))
    assert chosen_node(run(make_pod(), s, ["n3", "n1", "ghost"], policy)) == expected


def test_the_pod_itself_is_removed_first() -> None:
    s = cluster(("a", [gpu("GPU-a")]), ("b", [gpu("GPU-b")]))
    s.on_pod(scheduled("p", "b", "GPU-b,NVIDIA,4000,0:;"))  # an earlier placement of this same pod
    d = run(make_pod("p"), s, ["a", "b"], "binpack")
    assert chosen_node(d) == "a"  # b's usage was p's own, so both nodes score 0
    assert s.allocation("uid-p") is None


# --- failures -----------------------------------------------------------------------------------


def test_unregistered_and_not_fitting_nodes() -> None:
    s = cluster(("a", [gpu("GPU-a", devmem=2000)]), ("b", [gpu("GPU-b"), gpu("GPU-c", index=1)]))
    d = run(make_pod("p", ctr(mem=3000)), s, ["a", "ghost", "b", "a"])
    assert isinstance(d, Chosen) and d.node == "b"
    assert d.failed["ghost"] == "node unregistered"
    d = run(make_pod("p", ctr(gpus=3, mem=1000)), s, ["a", "ghost", "b"])
    assert d == NoFit({
        "ghost": "node unregistered",
        "a": "NodeInsufficientDevice",
        "b": "NodeInsufficientDevice",
    })


@pytest.mark.parametrize(
    ("pod", "existing", "reason"),
    [
        (make_pod("p", ctr(mem=9000)), None, "1/1 CardInsufficientMemory"),
        (make_pod("p", ctr(mem=100, cores=60)), "GPU-a,NVIDIA,100,50:;", "1/1 CardInsufficientCore"),
        (make_pod("p", ctr(mem=100)), "GPU-a,NVIDIA,100,0:;" * 10, "1/1 CardTimeSlicingExhausted"),
        (make_pod("p", ctr(mem=100, cores=100)), "GPU-a,NVIDIA,100,0:;",
         "1/1 ExclusiveDeviceAllocateConflict"),
    ],
    ids=["memory", "cores", "slots", "exclusive"],
)
def test_no_fit_reasons_are_exact(pod: dict[str, Any], existing: str | None, reason: str) -> None:
    s = cluster(("a", [gpu("GPU-a")]))
    if existing:
        s.on_pod(scheduled("other", "a", existing))
    assert run(pod, s, ["a"]) == NoFit({"a": reason})


def test_quota_blocks_in_fit() -> None:
    s = cluster(("a", [gpu("GPU-a")]))
    s.on_quota(gpu_quota(mem=500))
    assert run(make_pod("p", ctr(mem=1000)), s, ["a"]) == NoFit({"a": "1/1 ResourceQuotaNotFit"})


def test_no_request_is_an_echo_without_side_effects() -> None:
    s = cluster(("a", [gpu("GPU-a")]))
    s.on_pod(scheduled("p", "a", "GPU-a,NVIDIA,100,0:;"))
    pod = make_pod("p", ctr(gpus=None, name="plain"))
    pod["metadata"]["annotations"][keys.DEVICE_SCORING_WEIGHTS] = "broken"
    assert (
        decide(pod, ["a"], s, default_node_policy="binpack", default_gpu_policy="spread", now=NOW)
        == NoRequest()
    )
    assert s.allocation("uid-p") is not None


def test_invalid_scoring_weights_is_an_error() -> None:
    s = cluster(("a", [gpu("GPU-a")]))
    pod = make_pod("p", annotations={keys.DEVICE_SCORING_WEIGHTS: "slot=1"})
    assert decide(
        pod, ["a"], s, default_node_policy="binpack", default_gpu_policy="spread", now=NOW
    ) == Error(
        'calcScore failed invalid hami.io/device-scoring-weights annotation "slot=1": '
        "expected slot, core, and memory weights for pod p"
    )


def test_no_candidates() -> None:
    assert run(make_pod(), cluster(), []) == NoFit({})


# --- what is written ----------------------------------------------------------------------------


def test_annotations_and_label_are_exact() -> None:
    s = cluster(("n1", [gpu("GPU-0")]))
    pod = make_pod("p", ctr(gpus=None, name="sidecar"), ctr(mem=1000, cores=30, name="app"),
                   init=[ctr(mem=2000, name="setup")])
    d = run(pod, s, ["n1"])
    assert isinstance(d, Chosen)
    allocation = "GPU-0,NVIDIA,2000,0:;;GPU-0,NVIDIA,1000,30:;"
    assert d.annotations == {
        "hami.io/vgpu-node": "n1",
        "hami.io/vgpu-time": str(NOW),
        "hami.io/vgpu-devices-to-allocate": allocation,
        "hami.io/vgpu-devices-allocated": allocation,
    }
    assert d.labels == {"hami.io/vgpu-node": "n1"}
    assert d.mig == ()
    assert d.scores == {"n1": 0.0}


def test_reserve_then_confirm_counts_the_collapsed_allocation_once() -> None:
    s = cluster(("n1", [gpu("GPU-0")]))
    pod = make_pod("p", ctr(mem=1000, cores=30), init=[ctr(mem=2000)])
    d = decide(pod, ["n1"], s, default_node_policy="binpack", default_gpu_policy="spread", now=NOW)
    assert isinstance(d, Chosen)
    s.reserve(pod, d)
    view = s.ledger.view("n1")
    assert view is not None
    assert (view.usage[0].used, view.usage[0].usedmem, view.usage[0].usedcores) == (1, 2000, 30)
    pod["metadata"]["annotations"].update(d.annotations)
    s.on_pod(pod)
    assert (view.usage[0].used, view.usage[0].usedmem, view.usage[0].usedcores) == (1, 2000, 30)
    # Filtered again: the reservation is dropped before the new decision.
    d2 = decide(pod, ["n1"], s, default_node_policy="binpack", default_gpu_policy="spread", now=NOW + 1)
    assert isinstance(d2, Chosen) and (view.usage[0].used, view.usage[0].usedmem) == (0, 0)


def mig_gpu(uuid: str) -> DeviceInfo:
    profiles = (
        MigProfile("1g.10gb", 9856, 14, 1, tuple(MigPlacement(i, 1) for i in range(7))),
        MigProfile("7g.80gb", 80000, 100, 7, (MigPlacement(0, 8),)),
    )
    return device(uuid, count=7, devmem=80000, mode="mig", mig_profiles=profiles)


def test_mig_decision_writes_placements() -> None:
    s = cluster(("m", [mig_gpu("GPU-m")]))
    pod = make_pod("p", ctr(mem=5000))
    d = run(pod, s, ["m"])
    assert isinstance(d, Chosen)
    assert d.annotations[keys.VGPU_ALLOCATED] == "GPU-m,NVIDIA,9856,14:;"
    assert json.loads(d.annotations[keys.VGPU_MIG_ALLOCATIONS]) == [
        {"containerIndex": 0, "deviceIndex": 0, "gpuUUID": "GPU-m", "profile": "1g.10gb",
         "placement": {"start": 6, "size": 1}}
    ]
    s.reserve(pod, d)
    view = s.ledger.view("m")
    assert view is not None and view.usage[0].mig_taken == [("1g.10gb", MigPlacement(6, 1))]
    d2 = run(make_pod("q", ctr(mem=5000)), s, ["m"])
    assert isinstance(d2, Chosen) and d2.mig[0].placement == MigPlacement(5, 1)


# --- simulation path ----------------------------------------------------------------------------


def register(*devices: DeviceInfo) -> dict[str, str]:
    return {keys.NODE_NVIDIA_REGISTER: inventory(devices)}


def test_simulation_path_reads_inventory_from_node_objects() -> None:
    nodes = [
        node_object("t-d", annotations=register(gpu("GPU-d", devmem=500)), typed=True),
        node_object("t-c", annotations={keys.NODE_NVIDIA_REGISTER: "[{broken"}, typed=True),
        node_object("t-b", annotations=register(gpu("GPU-b")), typed=True),
        node_object("t-a", annotations={}, typed=True),
        node_object("t-e", annotations={keys.NODE_NVIDIA_REGISTER: "[]"}, typed=True),
        node_object("t-f", annotations=register(gpu("GPU-f")) | {keys.DEVICE_CORDON: "GPU-f"}, typed=True),
    ]
    pod = make_pod("p", ctr(mem=1000))
    d = decide_on_nodes(
        pod, nodes, VENDORS, default_node_policy="binpack", default_gpu_policy="spread", now=NOW
    )
    assert isinstance(d, Chosen) and d.node == "t-b"
    # All scores are 0 without usage: the tie goes to the first name. Every node is evaluated, so
    # the answer reports every node that does not fit, with its detailed reason (§5.7).
    assert d.failed == {
        "t-a": "node unregistered",
        "t-c": "node unregistered",
        "t-d": "1/1 CardInsufficientMemory",
        "t-e": "node unregistered",
        "t-f": "1/1 CardCordoned",
    }
    assert d.scores == {"t-b": 0.0}
    assert d.annotations[keys.VGPU_ALLOCATED] == "GPU-b,NVIDIA,1000,0:;"
    nofit = decide_on_nodes(
        make_pod("p", ctr(mem=9000)),
        nodes,
        VENDORS,
        default_node_policy="binpack",
        default_gpu_policy="spread",
        now=NOW,
    )
    assert nofit == NoFit({
        "t-a": "node unregistered",
        "t-b": "1/1 CardInsufficientMemory",
        "t-c": "node unregistered",
        "t-d": "1/1 CardInsufficientMemory",
        "t-e": "node unregistered",
        "t-f": "1/1 CardCordoned",
    })


def test_simulation_path_has_no_usage_and_no_request_echo() -> None:
    nodes = [node_object("t", annotations=register(gpu("GPU-t")), typed=True)]
    assert (
        decide_on_nodes(
            make_pod("p", ctr(gpus=None)),
            nodes,
            VENDORS,
            default_node_policy="binpack",
            default_gpu_policy="spread",
            now=NOW,
        )
        == NoRequest()
    )
    for _ in range(3):  # nothing is recorded between calls
        d = decide_on_nodes(
            make_pod("p", ctr(mem=8000)),
            nodes,
            VENDORS,
            default_node_policy="binpack",
            default_gpu_policy="spread",
            now=NOW,
        )
        assert isinstance(d, Chosen)
    bad = make_pod("p", annotations={keys.DEVICE_SCORING_WEIGHTS: "x"})
    assert isinstance(
        decide_on_nodes(
            bad, nodes, VENDORS, default_node_policy="binpack", default_gpu_policy="spread", now=NOW
        ),
        Error,
    )
