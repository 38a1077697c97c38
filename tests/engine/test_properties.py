"""Invariants of the scheduling state under random event sequences (hypothesis state machine).

Whatever the order of filter decisions, reservations, annotation arrivals, init-container
completion, deletions, terminal phases, released reservations and node (re-)registrations:

* no device is ever over-committed (used <= count, usedmem <= devmem, usedcores <= devcore);
* the incrementally maintained ledger equals one rebuilt from scratch from the same pods, and the
  counted allocations are exactly what the pods' objects/reservations say;
* namespace quota usage equals the sum over the counted pods;
* the early-stopping decision equals the evaluate-every-node decision.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.builders import container, device, gpu_limits, gpu_quota, pod
from tests.engine.ledger_invariants import assert_incremental_equals_rebuilt, assert_never_overcommitted
from vgpu_scheduler.config import NvidiaConfig
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoRequest, decide
from vgpu_scheduler.engine.podinfo import PodAllocation, pod_allocation, pod_allocation_from_pod
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import DeviceInfo, MigPlacement, MigProfile
from vgpu_scheduler.wire import keys

CFG = NvidiaConfig()
VENDORS = build()
NS = "team"


def _a100_mig(uuid: str) -> DeviceInfo:
    profiles = (
        MigProfile("1g.10gb", 9856, 14, 1, tuple(MigPlacement(i, 1) for i in range(7))),
        MigProfile("2g.20gb", 19968, 28, 2, (MigPlacement(0, 2), MigPlacement(2, 2), MigPlacement(4, 2))),
        MigProfile("3g.40gb", 40192, 42, 3, (MigPlacement(0, 4), MigPlacement(4, 4))),
        MigProfile("7g.80gb", 80000, 100, 7, (MigPlacement(0, 8),)),
    )
    return device(uuid, count=7, devmem=81920, mode="mig", mig_profiles=profiles)


INVENTORY: dict[str, list[DeviceInfo]] = {
    "n0": [
        device("GPU-00", index=0, count=4, devmem=8000),
        device("GPU-01", index=1, count=4, devmem=8000, numa=1),
    ],
    "n1": [device("GPU-10", index=0, count=2, devmem=16000)],
    "n2": [
        device("GPU-20", index=0, count=3, devmem=4000),
        device("GPU-21", index=1, count=3, devmem=4000, health=False),
        device("GPU-22", index=2, count=3, devmem=6000),
        device("GPU-23", index=3, count=3, devmem=4000),
    ],
    "n3": [_a100_mig("GPU-30")],
}
NODES = sorted(INVENTORY)
PODS = [f"p{i}" for i in range(6)]

container_spec = st.fixed_dictionaries(
    {
        "gpus": st.sampled_from([0, 1, 1, 1, 1, 2]),
        "mem": st.one_of(st.none(), st.integers(100, 6000)),
        "pct": st.sampled_from([None, 25, 50, 100]),
        "cores": st.sampled_from([None, 0, 10, 30, 60, 100]),
    }
)
pod_spec = st.fixed_dictionaries(
    {
        "init": st.lists(container_spec, max_size=1),
        "app": st.lists(container_spec, min_size=1, max_size=2),
        "node_policy": st.sampled_from(["binpack", "spread"]),
        "gpu_policy": st.sampled_from(["spread", "binpack", "mutex"]),
    }
)


def _container(i: int, c: dict[str, Any]) -> dict[str, Any]:
    limits = gpu_limits(c["gpus"], mem=c["mem"], pct=c["pct"], cores=c["cores"]) if c["gpus"] else {}
    return container(f"c{i}", limits=limits)


def _pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return pod(
        name,
        namespace=NS,
        uid=f"uid-{name}",
        annotations={keys.NODE_SCHEDULER_POLICY: spec["node_policy"],
                     keys.GPU_SCHEDULER_POLICY: spec["gpu_policy"]},
        init_containers=[_container(i, c) for i, c in enumerate(spec["init"])],
        containers=[_container(i, c) for i, c in enumerate(spec["app"])],
        phase="Pending",
    )


@dataclass
class _PodModel:
    obj: dict[str, Any]
    decision: Chosen
    confirmed: bool = False
    shrunk: bool = False


class SchedulingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = SchedulerState(VENDORS)
        self.state.on_quota(gpu_quota(mem=120000, namespace=NS))
        self.registered: dict[str, tuple[list[DeviceInfo], frozenset[str]]] = {}
        self.pods: dict[str, _PodModel] = {}
        self.expected: dict[str, PodAllocation] = {}
        self.now = 1000

    # -- nodes -----------------------------------------------------------------------------------

    @initialize()
    def register_all(self) -> None:
        for node in NODES:
            self.register(node, reverse=False, cordon=False)

    @rule(node=st.sampled_from(NODES), reverse=st.booleans(), cordon=st.booleans())
    def register(self, node: str, reverse: bool, cordon: bool) -> None:
        devices = copy.deepcopy(INVENTORY[node])
        if reverse:
            devices.reverse()
        cordoned = frozenset({devices[0].id}) if cordon else frozenset()
        self.state.set_node_devices(node, devices, cordoned)
        self.registered[node] = (devices, cordoned)

    @rule(node=st.sampled_from(NODES))
    def unregister(self, node: str) -> None:
        self.state.remove_node(node)
        self.registered.pop(node, None)

    # -- pods ------------------------------------------------------------------------------------

    @rule(batch=st.lists(st.tuples(st.sampled_from(PODS), pod_spec), min_size=1, max_size=3))
    def filter_and_reserve(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        for name, spec in batch:
            self._filter(name, spec)

    def _filter(self, name: str, spec: dict[str, Any]) -> None:
        self.now += 1
        pod = _pod(name, spec)
        reference = copy.deepcopy(self.state)
        got = decide(
            pod,
            NODES,
            self.state,
            default_node_policy="binpack",
            default_gpu_policy="spread",
            now=self.now,
        )
        want = decide(
            pod,
            NODES,
            reference,
            default_node_policy="binpack",
            default_gpu_policy="spread",
            now=self.now,
            evaluate_all=True,
        )
        uid = f"uid-{name}"
        event(f"decision: {type(got).__name__}")
        if isinstance(got, NoRequest):
            assert want == got
            return  # nothing requested: no side effect at all
        self.expected.pop(uid, None)  # filtered again: never counted twice
        self.pods.pop(name, None)
        if isinstance(got, Chosen):
            assert isinstance(want, Chosen)
            assert (got.node, got.devices, got.mig, got.annotations) == (
                want.node, want.devices, want.mig, want.annotations)
            self.expected[uid] = self.state.reserve(pod, got)
            self.pods[name] = _PodModel(pod, got)
        else:
            assert got == want

    @precondition(lambda self: any(not m.confirmed for m in self.pods.values()))
    @rule(data=st.data())
    def annotations_arrive(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(n for n, m in self.pods.items() if not m.confirmed)))
        model = self.pods[name]
        model.obj["metadata"]["annotations"].update(model.decision.annotations)
        model.obj["metadata"]["labels"] = dict(model.decision.labels)
        model.confirmed = True
        self.state.on_pod(model.obj)
        decoded = pod_allocation_from_pod(model.obj)
        assert decoded == self.expected[f"uid-{name}"]  # what we wrote reads back the same

    @precondition(lambda self: bool(self.pods))
    @rule(data=st.data())
    def unrelated_update(self, data: st.DataObject) -> None:
        """A status-only update: before the patch it must not drop the reservation."""
        name = data.draw(st.sampled_from(sorted(self.pods)))
        self.state.on_pod(self.pods[name].obj)

    def _with_init(self) -> list[str]:
        return sorted(n for n, m in self.pods.items() if m.confirmed and m.obj["spec"]["initContainers"])

    @precondition(lambda self: bool(self._with_init()))
    @rule(data=st.data())
    def init_containers_finish(self, data: st.DataObject) -> None:
        model = self.pods[data.draw(st.sampled_from(self._with_init()))]
        obj = model.obj
        done = {"terminated": {"exitCode": 0}}
        statuses = [{"name": c["name"], "state": done} for c in obj["spec"]["initContainers"]]
        obj["status"] = {"phase": "Running", "initContainerStatuses": statuses}
        self.state.on_pod(obj)
        model.shrunk = True
        alloc = pod_allocation_from_pod(obj)
        assert alloc is not None
        self.expected[alloc.uid] = alloc

    @precondition(lambda self: bool(self.pods))
    @rule(data=st.data(), how=st.sampled_from(["delete", "succeeded", "failed", "release"]))
    def pod_goes_away(self, data: st.DataObject, how: str) -> None:
        name = data.draw(st.sampled_from(sorted(self.pods)))
        model = self.pods.pop(name)
        uid = f"uid-{name}"
        if how == "delete":
            self.state.on_pod_deleted(model.obj)
        elif how == "release":
            self.state.release(uid)
        else:
            obj = copy.deepcopy(model.obj)
            obj["status"]["phase"] = "Succeeded" if how == "succeeded" else "Failed"
            self.state.on_pod(obj)
        self.expected.pop(uid, None)

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def never_overcommitted(self) -> None:
        assert_never_overcommitted(self.state, self.registered)

    @invariant()
    def incremental_equals_rebuilt(self) -> None:
        assert_incremental_equals_rebuilt(self.state, self.registered, self.expected)
        assert sorted(self.state.ledger.node_names()) == sorted(self.registered)

    @invariant()
    def quota_usage_is_the_sum_of_pods(self) -> None:
        devices = [d for a in self.expected.values() for c in a.devices.get("NVIDIA", []) for d in c]
        mem = sum(d.usedmem for d in devices)
        cores = sum(d.usedcores for d in devices)
        assert self.state.quota.used(NS, CFG.resource_memory_name) == mem
        assert self.state.quota.used(NS, CFG.resource_core_name) == cores


SchedulingMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
TestScheduling = SchedulingMachine.TestCase


def test_reservation_collapse_matches_decoded_annotations() -> None:
    """pod_allocation on a decision equals decoding the annotations it produces (init + app)."""
    spec = {"init": [{"gpus": 1, "mem": 3000, "pct": None, "cores": 10}],
            "app": [{"gpus": 1, "mem": 1000, "pct": None, "cores": 20}] * 2,
            "node_policy": "binpack", "gpu_policy": "binpack"}
    state = SchedulerState(VENDORS)
    state.set_node_devices("n1", copy.deepcopy(INVENTORY["n1"]))
    pod = _pod("p", spec)
    d = decide(pod, ["n1"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert isinstance(d, Chosen)
    reserved = pod_allocation(pod, d.node, d.devices, d.mig)
    pod["metadata"]["annotations"].update(d.annotations)
    assert pod_allocation_from_pod(pod) == reserved
    assert [(x.usedmem, x.usedcores, x.slots) for x in reserved.devices["NVIDIA"][0]] == [(3000, 40, 2)]
