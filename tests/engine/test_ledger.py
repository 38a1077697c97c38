"""Pod collapse (§5.2) and the incremental device ledger."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import container, device, grant, init_statuses, pod, pod_allocation, pod_devices
from vgpu_scheduler.engine.ledger import DeviceLedger
from vgpu_scheduler.engine.ledger_node import LedgerNode, NodeSummary
from vgpu_scheduler.engine.nodeview import DeviceUsage, NodeView
from vgpu_scheduler.engine.podinfo import (
    PodAllocation,
    collapse_pod_devices,
    pod_allocation_from_pod,
)
from vgpu_scheduler.engine.scores import node_default_score
from vgpu_scheduler.model import MIG_MODE, DeviceInfo, MigAllocation, MigPlacement, MigProfile
from vgpu_scheduler.wire import keys

# A small card: 8000 MiB, so the score arithmetic below stays readable.
gpu = partial(device, devmem=8000)


def make_pod(
    name: str,
    allocated: str | None = None,
    node: str | None = "n1",
    n_init: int = 0,
    phase: str = "Pending",
    init_exit: list[int | None] | None = None,
    annotations: dict[str, str] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    """A pod of namespace `ns` with one app container `app`, `n_init` init containers and, when
    given, the vgpu-node and `-allocated` annotations and the init containers' exit codes."""
    ann: dict[str, str] = dict(annotations or {})
    if node is not None:
        ann[keys.VGPU_NODE] = node
    if allocated is not None:
        ann[keys.VGPU_ALLOCATED] = allocated
    return pod(
        name,
        namespace="ns",
        uid=f"uid-{name}",
        annotations=ann,
        meta={"deletionTimestamp": "2026-11-29T10:00:00Z"} if deleting else None,
        containers=[container("app")],
        init_containers=[container(f"init{i}") for i in range(n_init)] if n_init else None,
        phase=phase,
        status=None if init_exit is None else {"initContainerStatuses": init_statuses(*init_exit)},
    )


def entries(alloc: PodAllocation | None) -> list[tuple[str, int, int, int]]:
    assert alloc is not None
    return [(d.uuid, d.usedmem, d.usedcores, d.slots) for c in alloc.devices.get("NVIDIA", []) for d in c]


# --- collapse -----------------------------------------------------------------------------------

COLLAPSE_CASES = [
    # (id, allocated annotation, number of init containers, expected (uuid, mem, cores, slots))
    ("one container one gpu", "GPU-0,NVIDIA,3000,0:;", 0, [("GPU-0", 3000, 0, 1)]),
    ("two app containers share a gpu: sums, two slots",
     "GPU-x,NVIDIA,3000,10:;GPU-x,NVIDIA,5000,20:;", 0, [("GPU-x", 8000, 30, 2)]),
    ("one container two gpus, sorted by uuid",
     "GPU-b,NVIDIA,1000,30:GPU-a,NVIDIA,1000,30:;", 0, [("GPU-a", 1000, 30, 1), ("GPU-b", 1000, 30, 1)]),
    ("init peak larger than app sum", "GPU-0,NVIDIA,6000,50:;GPU-0,NVIDIA,1000,30:;", 1,
     [("GPU-0", 6000, 50, 1)]),
    ("per dimension max of init peak and app sum",
     "GPU-0,NVIDIA,6000,10:;GPU-0,NVIDIA,1000,30:;GPU-0,NVIDIA,1000,30:;", 1, [("GPU-0", 6000, 60, 2)]),
    ("init peak is the max over init containers, not the sum",
     "GPU-0,NVIDIA,2000,10:;GPU-0,NVIDIA,3000,5:;GPU-0,NVIDIA,500,0:;", 2, [("GPU-0", 3000, 10, 1)]),
    ("init-only device keeps one slot", "GPU-i,NVIDIA,2000,0:;GPU-a,NVIDIA,1000,0:;", 1,
     [("GPU-a", 1000, 0, 1), ("GPU-i", 2000, 0, 1)]),
    ("empty leading container is padding", ";GPU-0,NVIDIA,1000,30:;;", 0, [("GPU-0", 1000, 30, 1)]),
    ("nothing allocated", ";", 0, []),
]


@pytest.mark.parametrize(("allocated", "n_init", "expected"), [c[1:] for c in COLLAPSE_CASES],
                         ids=[c[0] for c in COLLAPSE_CASES])
def test_collapse(allocated: str, n_init: int, expected: list[tuple[str, int, int, int]]) -> None:
    alloc = pod_allocation_from_pod(make_pod("p", allocated, n_init=n_init))
    assert entries(alloc) == expected


def test_collapse_is_one_container_per_vendor() -> None:
    devices = pod_devices([grant("GPU-1", usedmem=1, usedcores=1)], [grant("GPU-0", usedmem=2, usedcores=2)])
    out = collapse_pod_devices(devices, 0)
    assert len(out["NVIDIA"]) == 1
    assert [d.uuid for d in out["NVIDIA"][0]] == ["GPU-0", "GPU-1"]


INIT_SHRINK = "GPU-i,NVIDIA,2000,0:GPU-0,NVIDIA,6000,50:;GPU-0,NVIDIA,1000,30:;GPU-0,NVIDIA,500,5:;"


@pytest.mark.parametrize(
    ("init_exit", "previously_shrunk", "expected", "shrunk"),
    [
        ([0], False, [("GPU-0", 1500, 35, 2)], True),
        ([1], False, [("GPU-0", 6000, 50, 2), ("GPU-i", 2000, 0, 1)], False),
        ([None], False, [("GPU-0", 6000, 50, 2), ("GPU-i", 2000, 0, 1)], False),
        (None, False, [("GPU-0", 6000, 50, 2), ("GPU-i", 2000, 0, 1)], False),
        # Once shrunk, a later version of the pod stays shrunk even if its statuses no longer say so.
        ([None], True, [("GPU-0", 1500, 35, 2)], True),
    ],
    ids=["all init exited 0", "init failed", "init running", "no statuses yet", "stays shrunk"],
)
def test_init_containers_finished_shrinks_to_app_sums(
    init_exit: list[int | None] | None,
    previously_shrunk: bool,
    expected: list[tuple[str, int, int, int]],
    shrunk: bool,
) -> None:
    pod = make_pod("p", INIT_SHRINK, n_init=1, init_exit=init_exit, phase="Running")
    alloc = pod_allocation_from_pod(pod, previously_shrunk=previously_shrunk)
    assert entries(alloc) == expected
    assert alloc is not None and alloc.init_shrunk is shrunk


def test_init_shrink_needs_every_init_container() -> None:
    pod = make_pod("p", INIT_SHRINK, n_init=2, init_exit=[0], phase="Pending")
    alloc = pod_allocation_from_pod(pod)
    assert alloc is not None and not alloc.init_shrunk


@pytest.mark.parametrize(
    ("pod", "counted"),
    [
        (make_pod("p", "GPU-0,NVIDIA,1000,0:;", phase="Running"), True),
        (make_pod("p", "GPU-0,NVIDIA,1000,0:;", phase="Pending"), True),
        (make_pod("p", "GPU-0,NVIDIA,1000,0:;", phase="Running", deleting=True), True),
        (make_pod("p", "GPU-0,NVIDIA,1000,0:;", phase="Succeeded"), False),
        (make_pod("p", "GPU-0,NVIDIA,1000,0:;", phase="Failed"), False),
        (make_pod("p", "GPU-0,NVIDIA,1000,0:;", node=None), False),
        (make_pod("p", "GPU-0,NVIDIA,1000,0:;", node=""), False),
    ],
    ids=["running", "pending", "terminating keeps usage", "succeeded", "failed", "no vgpu-node",
         "empty vgpu-node"],
)
def test_which_pods_count(pod: dict[str, Any], counted: bool) -> None:
    assert (pod_allocation_from_pod(pod) is not None) is counted


def test_pod_without_allocated_key_counts_nothing() -> None:
    alloc = pod_allocation_from_pod(make_pod("p", None))
    assert alloc is not None and alloc.devices == {}


def test_decode_error_ignores_the_pod_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        alloc = pod_allocation_from_pod(make_pod("broken", "GPU-0,NVIDIA,lots,0:;"))
    assert alloc is None
    assert "ns/broken" in caplog.text


def test_bad_mig_annotation_reads_as_no_placements(caplog: pytest.LogCaptureFixture) -> None:
    pod = make_pod("p", "GPU-0,NVIDIA,1000,0:;", annotations={keys.VGPU_MIG_ALLOCATIONS: "{not json"})
    with caplog.at_level(logging.WARNING):
        alloc = pod_allocation_from_pod(pod)
    assert alloc is not None and alloc.mig == ()
    assert keys.VGPU_MIG_ALLOCATIONS in caplog.text


def test_garbage_shapes_do_not_crash() -> None:
    assert pod_allocation_from_pod({}) is None
    assert pod_allocation_from_pod({"metadata": None, "status": "x"}) is None
    weird = make_pod("p", "GPU-0,NVIDIA,1000,0:;")
    weird["spec"] = {"initContainers": "nope"}
    weird["status"] = {"initContainerStatuses": [None, 3]}
    assert entries(pod_allocation_from_pod(weird)) == [("GPU-0", 1000, 0, 1)]


# --- ledger -------------------------------------------------------------------------------------


def alloc(uid: str, node: str, *devs: tuple[str, int, int, int], mig: tuple[MigAllocation, ...] = (),
          ns: str = "ns") -> PodAllocation:
    """One container's grants as (uuid, mem, cores, slots) tuples."""
    grants = [grant(u, usedmem=m, usedcores=c, slots=s) for u, m, c, s in devs]
    return pod_allocation(uid, node, grants, namespace=ns, mig=mig)


def usage(ledger: DeviceLedger, node: str) -> list[tuple[int, int, int]]:
    view = ledger.view(node)
    assert view is not None
    return [(u.used, u.usedmem, u.usedcores) for u in view.usage]


def two_gpu_ledger() -> DeviceLedger:
    ledger = DeviceLedger()
    ledger.set_node_devices("n1", [gpu("GPU-0"), gpu("GPU-1", index=1)])
    return ledger


def test_all_registered() -> None:
    ledger = two_gpu_ledger()
    ledger.set_node_devices("n2", [gpu("GPU-2")])
    assert ledger.all_registered(["n1", "n2", "n1"]) and ledger.all_registered([])
    assert not ledger.all_registered(["n1", "gone"])
    ledger.remove_node("n2")
    assert not ledger.all_registered(["n2"])


def test_add_update_remove_is_exact() -> None:
    ledger = two_gpu_ledger()
    ledger.upsert_pod(alloc("a", "n1", ("GPU-0", 1000, 10, 2)))
    ledger.upsert_pod(alloc("b", "n1", ("GPU-0", 500, 5, 1), ("GPU-1", 700, 0, 0)))
    assert usage(ledger, "n1") == [(3, 1500, 15), (1, 700, 0)]  # slots 0 count as 1
    # An update replaces the old contribution instead of adding to it.
    ledger.upsert_pod(alloc("a", "n1", ("GPU-1", 100, 1, 1)))
    assert usage(ledger, "n1") == [(1, 500, 5), (2, 800, 1)]
    ledger.remove_pod("a")
    ledger.remove_pod("b")
    ledger.remove_pod("b")  # unknown uid: no-op
    assert usage(ledger, "n1") == [(0, 0, 0), (0, 0, 0)]


def test_unknown_uuid_is_ignored() -> None:
    ledger = two_gpu_ledger()
    ledger.upsert_pod(alloc("a", "n1", ("GPU-9", 1000, 10, 1), ("GPU-1", 10, 1, 1)))
    assert usage(ledger, "n1") == [(0, 0, 0), (1, 10, 1)]


def test_pod_on_unregistered_node_counts_when_inventory_arrives() -> None:
    ledger = DeviceLedger()
    ledger.upsert_pod(alloc("a", "late", ("GPU-0", 1000, 10, 1)))
    assert ledger.view("late") is None
    ledger.set_node_devices("late", [gpu("GPU-0")])
    assert usage(ledger, "late") == [(1, 1000, 10)]
    ledger.remove_node("late")
    assert ledger.view("late") is None and "late" not in ledger
    ledger.set_node_devices("late", [gpu("GPU-0")])
    assert usage(ledger, "late") == [(1, 1000, 10)]


def test_reregistration_recounts_only_on_change() -> None:
    ledger = two_gpu_ledger()
    ledger.upsert_pod(alloc("a", "n1", ("GPU-1", 1000, 10, 1)))
    before = ledger.view("n1")
    ledger.set_node_devices("n1", [gpu("GPU-0"), gpu("GPU-1", index=1)], frozenset({"GPU-0"}))
    view = ledger.view("n1")
    assert view is before and view is not None and view.cordoned == {"GPU-0"}
    # Reordered inventory: usage follows the device, not the position.
    ledger.set_node_devices("n1", [gpu("GPU-1", index=1), gpu("GPU-0")])
    assert usage(ledger, "n1") == [(1, 1000, 10), (0, 0, 0)]


def test_usage_never_negative_when_inventory_shrinks_under_a_pod() -> None:
    ledger = two_gpu_ledger()
    ledger.upsert_pod(alloc("a", "n1", ("GPU-1", 1000, 10, 1)))
    ledger.set_node_devices("n1", [gpu("GPU-0")])
    ledger.remove_pod("a")
    ledger.set_node_devices("n1", [gpu("GPU-0"), gpu("GPU-1", index=1)])
    assert usage(ledger, "n1") == [(0, 0, 0), (0, 0, 0)]


def test_negative_amounts_in_an_annotation_do_not_push_usage_below_zero() -> None:
    ledger = two_gpu_ledger()
    ledger.upsert_pod(alloc("a", "n1", ("GPU-0", -1000, -10, 1)))
    assert usage(ledger, "n1")[0] == (1, 0, 0)


def mig_gpu(uuid: str) -> DeviceInfo:
    profile = MigProfile("1g.10gb", 9856, 14, 1, (MigPlacement(0, 1), MigPlacement(1, 1)))
    return device(uuid, count=7, devmem=80000, mode="mig", mig_profiles=(profile,))


def mig_alloc(gpu_uuid: str, start: int) -> MigAllocation:
    return MigAllocation(0, 0, gpu_uuid, "1g.10gb", MigPlacement(start, 1))


def test_mig_placements_are_attached_and_released() -> None:
    ledger = DeviceLedger()
    ledger.set_node_devices("n1", [mig_gpu("GPU-m")])
    ledger.upsert_pod(alloc("a", "n1", ("GPU-m", 9856, 14, 1), mig=(mig_alloc("GPU-m", 1),)))
    view = ledger.view("n1")
    assert view is not None
    assert view.usage[0].mig_taken == [("1g.10gb", MigPlacement(1, 1))]
    assert not view.usage[0].mig_conflict
    ledger.remove_pod("a")
    assert view.usage[0].mig_taken == []


@pytest.mark.parametrize(
    ("devices", "pod"),
    [
        ([gpu("GPU-0")], alloc("a", "n1", ("GPU-0", 100, 0, 1), mig=(mig_alloc("GPU-0", 0),))),
        ([mig_gpu("GPU-0")], alloc("a", "n1", ("GPU-0", 9856, 14, 1))),
        ([gpu("GPU-0")], alloc("a", "n1", mig=(mig_alloc("GPU-0", 0),))),
    ],
    ids=["MIG placement on a hami-core device", "MIG device used without placement",
         "placement without device entry"],
)
def test_mig_conflict_fails_closed_and_clears(devices: list[DeviceInfo], pod: PodAllocation) -> None:
    ledger = DeviceLedger()
    ledger.set_node_devices("n1", devices)
    ledger.upsert_pod(pod)
    ledger.upsert_pod(PodAllocation("b", "ns", "b", "n1", pod.devices, pod.mig))
    view = ledger.view("n1")
    assert view is not None and view.usage[0].mig_conflict
    assert ledger.summary("n1").slot_free_devices == 0
    ledger.remove_pod("a")
    assert view.usage[0].mig_conflict  # still held by the second pod
    ledger.remove_pod("b")
    assert not view.usage[0].mig_conflict


def test_node_score_follows_usage() -> None:
    ledger = two_gpu_ledger()  # 2 × (count 10, mem 8000, core 100)
    assert ledger.score("n1") == 0.0
    ledger.upsert_pod(alloc("a", "n1", ("GPU-0", 4000, 50, 2)))
    ledger.upsert_pod(alloc("b", "n1", ("GPU-1", 333, 7, 1)))
    assert ledger.score("n1") == pytest.approx(10 * (3 / 20 + 57 / 200 + 4333 / 16000), rel=1e-6)
    view = ledger.view("n1")
    assert view is not None
    assert ledger.score("n1") == node_default_score(view.devices, view.usage)  # same float32 value
    ledger.remove_pod("b")
    ledger.remove_pod("a")
    assert ledger.score("n1") == 0.0
    ledger.set_node_devices("zero", [gpu("GPU-z", devcore=0)])
    ledger.upsert_pod(alloc("z", "zero", ("GPU-z", 4000, 0, 1)))
    assert ledger.score("zero") == 0.0  # a zero denominator gives 0


def test_by_score_orders_with_name_tie_break() -> None:
    ledger = DeviceLedger()
    for name in ["c", "a", "b", "d"]:
        ledger.set_node_devices(name, [gpu(f"GPU-{name}")])
    ledger.upsert_pod(alloc("p1", "b", ("GPU-b", 4000, 0, 1)))
    ledger.upsert_pod(alloc("p2", "d", ("GPU-d", 4000, 0, 1)))
    assert [n for _, n in ledger.by_score(descending=True)] == ["b", "d", "a", "c"]
    assert [n for _, n in ledger.by_score(descending=False)] == ["a", "c", "b", "d"]
    ledger.remove_node("b")
    assert [n for _, n in ledger.by_score(descending=True)] == ["d", "a", "c"]


Dev = tuple[bool, bool, bool, bool, int, int, int, int, int]
"""(healthy, cordoned, MIG mode, MIG conflict, count, used, devmem, usedmem, usedcores)."""


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(
    st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.integers(0, 3), st.integers(0, 4),
    st.integers(0, 20000), st.integers(0, 20000), st.integers(0, 120),
), max_size=6))
def test_summary_is_the_bounds_over_usable_devices(devs: list[Dev]) -> None:
    """`NodeSummary` against its definition: over the usable devices (healthy, not cordoned, no MIG
    conflict) with a free slot, the most free memory and cores (never below -1, also when there is
    none: overused cores count as none free) and the least memory (0 when there is none); MIG mode
    seen on any usable device."""
    devices = [
        DeviceInfo(id=f"GPU-{i}", count=count, devmem=devmem, devcore=100, health=healthy,
                   mode=MIG_MODE if mig else "hami-core")
        for i, (healthy, _, mig, _, count, _, devmem, _, _) in enumerate(devs)
    ]
    usage = [DeviceUsage(used=used, usedmem=usedmem, usedcores=usedcores, mig_conflict=conflict)
             for (_, _, _, conflict, _, used, _, usedmem, usedcores) in devs]
    cordoned = frozenset(f"GPU-{i}" for i, dev in enumerate(devs) if dev[1])
    summary = LedgerNode(NodeView("n", devices, usage, cordoned, {})).compute_summary()
    usable = [(d, u) for d, u in zip(devices, usage, strict=True)
              if d.health and not u.mig_conflict and d.id not in cordoned]
    free = [(d, u) for d, u in usable if u.used < d.count]
    assert summary == NodeSummary(
        slot_free_devices=len(free),
        max_free_mem=max([-1, *(d.devmem - u.usedmem for d, u in free)]),
        max_free_cores=max([-1, *(d.devcore - u.usedcores for d, u in free)]),
        min_devmem=min((d.devmem for d, _ in free), default=0),
        has_mig=any(d.mode == MIG_MODE for d, _ in usable),
    )


def test_summary_bounds_usable_devices() -> None:
    ledger = DeviceLedger()
    ledger.set_node_devices(
        "n1",
        [gpu("GPU-0", count=2, devmem=8000), gpu("GPU-1", devmem=4000), gpu("GPU-2", health=False),
         gpu("GPU-3", devmem=16000)],
        cordoned=frozenset({"GPU-3"}),
    )
    ledger.upsert_pod(alloc("a", "n1", ("GPU-0", 1000, 20, 2), ("GPU-1", 1000, 70, 1)))
    s = ledger.summary("n1")
    got = (s.slot_free_devices, s.max_free_mem, s.max_free_cores, s.min_devmem, s.has_mig)
    assert got == (1, 3000, 30, 4000, False)
    ledger.remove_pod("a")
    assert ledger.summary("n1").max_free_mem == 8000


def test_rebuild_from_matches_incremental() -> None:
    ledger = two_gpu_ledger()
    ledger.set_node_devices("n2", [mig_gpu("GPU-m")])
    pods = [
        alloc("a", "n1", ("GPU-0", 1000, 10, 2)),
        alloc("b", "n2", ("GPU-m", 9856, 14, 1), mig=(mig_alloc("GPU-m", 0),)),
        alloc("c", "n2", ("GPU-m", 9856, 14, 1)),
        alloc("d", "n3", ("GPU-x", 1, 1, 1)),
    ]
    for p in pods:
        ledger.upsert_pod(p)
    ledger.remove_pod("c")
    incremental = ledger.snapshot()
    fresh = DeviceLedger()
    fresh.set_node_devices("n1", [gpu("GPU-0"), gpu("GPU-1", index=1)])
    fresh.set_node_devices("n2", [mig_gpu("GPU-m")])
    fresh.rebuild_from([p for p in pods if p.uid != "c"])
    assert fresh.snapshot() == incremental
    ledger.rebuild_from(ledger.pods())
    assert ledger.snapshot() == incremental
    assert {p.uid for p in ledger.pods_on("n3")} == {"d"}


def test_bound_classes_follow_registrations() -> None:
    """Nodes are grouped by the class of their annotations: a new node joins its class, an
    annotation change (same devices, usage kept) moves it, a removal or re-registration with
    other devices takes it out of its old class."""
    ledger = DeviceLedger(lambda annotations: annotations.get("model"))
    devices = [DeviceInfo(id="d0", count=1, devmem=100, devcore=100, type="T", health=True)]
    ledger.set_node_devices("a", devices, annotations={"model": "x"})
    ledger.set_node_devices("b", devices, annotations={"model": "x"})
    ledger.set_node_devices("c", devices)
    assert ledger.bound_classes() == {"x": {"a", "b"}, None: {"c"}}
    ledger.set_node_devices("a", devices, annotations={"model": "y"})
    assert ledger.bound_classes() == {"x": {"b"}, "y": {"a"}, None: {"c"}}
    other = [DeviceInfo(id="d1", count=2, devmem=100, devcore=100, type="T", health=True)]
    ledger.set_node_devices("b", other, annotations={"model": "y"})
    ledger.remove_node("c")
    assert ledger.bound_classes() == {"y": {"a", "b"}}
    assert DeviceLedger().bound_classes() == {}


def test_names_by_score_follow_by_score() -> None:
    ledger = DeviceLedger()
    for name in ["c", "a", "b", "d", "e"]:
        ledger.set_node_devices(name, [gpu(f"GPU-{name}")])
    ledger.upsert_pod(alloc("p1", "b", ("GPU-b", 4000, 0, 1)))
    ledger.upsert_pod(alloc("p2", "e", ("GPU-e", 4000, 0, 1)))
    ledger.upsert_pod(alloc("p3", "c", ("GPU-c", 100, 0, 1)))
    ledger.upsert_pod(alloc("p2", "e", ("GPU-e", 100, 0, 1)))  # rescored
    for descending in (True, False):
        assert list(ledger.names_by_score(descending)) == [n for _, n in ledger.by_score(descending)]
    assert list(ledger.names_by_score(True)) == ["b", "c", "e", "a", "d"]
    ledger.remove_node("c")
    assert list(ledger.names_by_score(True)) == ["b", "e", "a", "d"]
    assert list(ledger.names_by_score(False)) == ["a", "d", "e", "b"]


def test_ruled_out_drops_the_nodes_changed_since() -> None:
    """What the caller adds stays until the node changes: the set then holds only nodes whose
    summary is the one they were ruled out on."""
    ledger = DeviceLedger()
    for name in ["a", "b", "c"]:
        ledger.set_node_devices(name, [gpu(f"GPU-{name}0"), gpu(f"GPU-{name}1", index=1)])
    ruled = ledger.ruled_out("key")
    assert ruled == set()
    ruled.update({"a", "b", "c"})
    assert ledger.ruled_out("key") == {"a", "b", "c"}  # nothing changed
    assert ledger.ruled_out("other") == set()  # one set per key
    ledger.upsert_pod(alloc("p", "a", ("GPU-a0", 4000, 0, 1)))
    assert ledger.ruled_out("key") == {"b", "c"}
    ledger.ruled_out("key").add("a")
    ledger.set_node_devices("b", [gpu("GPU-b0"), gpu("GPU-b1", index=1)], cordoned=frozenset({"GPU-b0"}))
    ledger.remove_node("c")
    assert ledger.ruled_out("key") == {"a"}
    ledger.touch("a")
    assert ledger.ruled_out("key") == set()
