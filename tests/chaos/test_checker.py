"""The chaos checker on synthetic histories, with and without violations (default run: no marker).

A checker that misses a violation would let every chaos run pass, so each rule is shown failing on
a history that breaks it and passing on a near-identical one that does not.
"""

from __future__ import annotations

import pytest
from checker import check, final_problems, lock_violations, recovery_times, stale_leader_writes
from history import (
    Device,
    DeviceUse,
    FaultRecord,
    History,
    LeaderSeen,
    NodeSeen,
    PodSeen,
    WriteSeen,
    node_record,
    pod_record,
)

from tests import builders
from vgpu_scheduler.wire import keys

GPU = Device("GPU-1", count=10, mem=81920, cores=100)
GPU2 = Device("GPU-2", count=10, mem=81920, cores=100)
LOCK = "2026-12-06T06:00:00Z,chaos,p1"


def node(t: float, name: str = "n1", devices: tuple[Device, ...] = (GPU,), *, lock: str = "",
         deleted: bool = False) -> NodeSeen:
    return NodeSeen(t, name, devices, lock, deleted)


def bound(t: float, pod: str, node: str = "n1", *uses: DeviceUse, phase: str = "allocating",
          deleted: bool = False, done: bool = False) -> PodSeen:
    return PodSeen(t, f"chaos/{pod}", node, node, uses or (DeviceUse("GPU-1", 40000, 0),), phase,
                   deleted, "", done)


def kinds(history: History, lock_timeout: float = 30.0) -> list[str]:
    return [v.kind for v in check(history, lock_timeout=lock_timeout).violations]


def test_two_pods_within_a_device_pass() -> None:
    h = History(nodes=[node(0)], pods=[bound(1, "p1"), bound(2, "p2")])
    assert kinds(h) == []


def test_memory_over_committed_for_a_moment_is_found() -> None:
    h = History(nodes=[node(0)],
                pods=[bound(1, "p1"), bound(2, "p2", "n1", DeviceUse("GPU-1", 50000, 0)),
                      bound(3, "p1", deleted=True)])
    found = check(h, lock_timeout=30).violations
    assert [v.kind for v in found] == ["overcommit"]
    assert found[0].t == 2


def test_a_pod_placed_after_the_one_it_replaces_is_gone_passes() -> None:
    h = History(nodes=[node(0)],
                pods=[bound(1, "p1"), bound(2, "p1", deleted=True),
                      bound(3, "p2", "n1", DeviceUse("GPU-1", 50000, 0))])
    assert kinds(h) == []


def test_count_and_cores_over_committed_are_found() -> None:
    small = Device("GPU-1", count=1, mem=81920, cores=100)
    h = History(nodes=[node(0, devices=(small,))], pods=[bound(1, "p1"), bound(2, "p2")])
    assert kinds(h) == ["overcommit"]
    cores = History(nodes=[node(0)], pods=[bound(1, "p1", "n1", DeviceUse("GPU-1", 1000, 60)),
                                           bound(2, "p2", "n1", DeviceUse("GPU-1", 1000, 60))])
    assert kinds(cores) == ["overcommit"]


def test_an_exclusive_device_shared_with_a_zero_core_pod_is_found() -> None:
    h = History(nodes=[node(0)], pods=[bound(1, "p1", "n1", DeviceUse("GPU-1", 8000, 100)),
                                       bound(2, "p2", "n1", DeviceUse("GPU-1", 8000, 0))])
    assert kinds(h) == ["exclusive"]


def test_a_device_of_another_node_is_found() -> None:
    h = History(nodes=[node(0), node(0, "n2", (GPU2,))],
                pods=[bound(1, "p1", "n1", DeviceUse("GPU-2", 1000, 0))])
    assert kinds(h) == ["wrong-node"]


def test_vgpu_node_naming_another_node_is_found() -> None:
    pod = PodSeen(1, "chaos/p1", "n1", "n2", (DeviceUse("GPU-1", 1000, 0),), "allocating")
    assert kinds(History(nodes=[node(0)], pods=[pod])) == ["wrong-node"]


def test_an_unbound_proposal_and_an_ended_pod_hold_nothing() -> None:
    proposal = PodSeen(2, "chaos/p2", "", "n1", (DeviceUse("GPU-1", 81920, 0),), "")
    ended = bound(3, "p3", "n1", DeviceUse("GPU-1", 81920, 0), done=True)
    h = History(nodes=[node(0)], pods=[bound(1, "p1"), proposal, ended])
    assert kinds(h) == []


def test_a_node_registered_again_smaller_is_read_against_its_new_inventory() -> None:
    smaller = Device("GPU-1", count=10, mem=40960, cores=100)
    gone = History(nodes=[node(0), node(3, deleted=True), node(5, devices=(smaller,))],
                   pods=[bound(1, "p1", "n1", DeviceUse("GPU-1", 60000, 0)),
                         bound(4, "p1", "n1", DeviceUse("GPU-1", 60000, 0), deleted=True)])
    assert kinds(gone) == []
    kept = History(nodes=[node(0), node(3, deleted=True), node(5, devices=(smaller,))],
                   pods=[bound(1, "p1", "n1", DeviceUse("GPU-1", 60000, 0))])
    assert kinds(kept) == ["overcommit"]


def test_a_lock_past_its_timeout_with_nothing_to_excuse_it_is_found() -> None:
    h = History(nodes=[node(0), node(1, lock=LOCK), node(50)], pods=[bound(2, "p1")])
    assert [v.kind for v in lock_violations(h, lock_timeout=30, grace=5)] == ["stale-lock"]


@pytest.mark.parametrize(
    ("history", "why"),
    [
        (History(nodes=[node(0), node(1, lock=LOCK), node(20)], pods=[bound(2, "p1")]), "released in time"),
        (History(nodes=[node(0), node(1, lock=LOCK), node(50)], pods=[bound(2, "p1")],
                 faults=[FaultRecord("leader-kill", 10, 10)]), "a fault in its life"),
        (History(nodes=[node(0), node(1, lock=LOCK), node(50)],
                 pods=[bound(2, "p1"), bound(3, "p1", deleted=True)]), "its pod deleted"),
        (History(nodes=[node(0), node(1, lock=LOCK), node(50)], pods=[bound(2, "p1", "n2")]),
         "its pod bound elsewhere"),
    ],
    ids=["released-in-time", "fault-in-its-life", "pod-deleted", "pod-bound-elsewhere"],
)
def test_a_lock_excused(history: History, why: str) -> None:
    assert lock_violations(history, lock_timeout=30, grace=5) == [], why


def test_a_woken_replica_writing_before_it_leads_again_is_found() -> None:
    pause = FaultRecord("leader-pause", 10, 20, "a")
    writes = [WriteSeen(21, "a", "PATCH", "/api/v1/nodes/n1", 200),
              WriteSeen(21.5, "a", "POST", "/apis/events.k8s.io/v1/namespaces/chaos/events", 201),
              WriteSeen(22, "b", "PATCH", "/api/v1/nodes/n1", 200),
              WriteSeen(40, "a", "PATCH", "/api/v1/nodes/n1", 200)]
    h = History(faults=[pause], writes=writes,
                leaders=[LeaderSeen(0, "a"), LeaderSeen(17, "b"), LeaderSeen(35, "a")])
    found = stale_leader_writes(h)
    assert [(v.kind, v.t) for v in found] == [("stale-leader-write", 21)]


def test_recovery_counts_only_pods_bound_after_the_fault() -> None:
    h = History(pods=[bound(9, "early"), bound(11, "early", phase="success"),
                      bound(12, "late"), bound(13, "late", phase="success")],
                faults=[FaultRecord("plugin-pause", 5, 10)])
    assert recovery_times(h) == {"plugin-pause": [3.0]}


def test_final_state_rules() -> None:
    def pod(name: str, node: str = "", phase: str = "") -> dict[str, object]:
        ann = {keys.BIND_PHASE: phase} if phase else {}
        return builders.pod(name, namespace="chaos", node_name=node or None, annotations=ann)

    pods = [pod("ok", "n1", "success"), pod("stuck", "n1", "allocating"), pod("waiting"),
            pod("errored"), pod("silent")]
    reasons = {"waiting": "0/3 nodes are available: 3 CardInsufficientMemory.",
               "errored": "Post \"https://127.0.0.1/filter\": connection refused"}
    found = sorted(v.message.split(":")[0] for v in final_problems(pods, reasons))
    assert found == ["errored", "silent", "stuck"]


def test_an_unscheduled_pod_being_deleted_is_settled_a_bound_one_is_not() -> None:
    # Seed 104: a DELETE cut by a kube-apiserver kill left the pod with its deletionTimestamp.
    reason = {"gone": "skip schedule deleting pod: chaos/gone", "bound": ""}
    terminating = builders.pod("gone", namespace="chaos")
    terminating["metadata"]["deletionTimestamp"] = "2026-12-07T12:10:00Z"
    bound = builders.pod("bound", namespace="chaos", node_name="n1",
                         annotations={keys.BIND_PHASE: "allocating"})
    bound["metadata"]["deletionTimestamp"] = "2026-12-07T12:10:00Z"
    assert [v.message.split(":")[0] for v in final_problems([terminating, bound], reason)] == ["bound"]


def test_records_read_api_objects() -> None:
    n = builders.gpu_node("n1", gpus=1, annotations={keys.NODE_LOCK: LOCK})
    rec = node_record(1.0, n)
    assert rec.lock == LOCK and len(rec.devices) == 1 and rec.devices[0].count == 10
    p = builders.pod("p1", namespace="chaos", node_name="n1", annotations={
        keys.VGPU_ALLOCATED: f"{rec.devices[0].uuid},NVIDIA,4000,30:;", keys.VGPU_NODE: "n1",
        keys.BIND_PHASE: "success"}, phase="Failed")
    seen = pod_record(2.0, p)
    assert seen.devices == (DeviceUse(rec.devices[0].uuid, 4000, 30),)
    assert (seen.node, seen.vgpu_node, seen.phase, seen.done) == ("n1", "n1", "success", True)
    broken = pod_record(3.0, builders.pod("p2", annotations={keys.VGPU_ALLOCATED: "GPU-1,NVIDIA,x,0:;"}))
    assert broken.bad


def test_a_woken_replica_the_lease_still_names_may_write() -> None:
    # Nobody took the Lease over during the pause (kube-apiserver was down too): it leads again.
    pause = FaultRecord("leader-pause", 10, 20, "a")
    h = History(faults=[pause], leaders=[LeaderSeen(0, "a")],
                writes=[WriteSeen(21, "a", "PATCH", "/api/v1/nodes/n1", 200)])
    assert stale_leader_writes(h) == []
    h.leaders.append(LeaderSeen(15, "b"))  # ... but once b holds it, a must not write
    assert [v.t for v in stale_leader_writes(h)] == [21]
