"""Invariants of a mixed-vendor fleet under random event sequences (hypothesis state machine).

Nodes carry devices of several vendors (some nodes two vendors at once); pods ask one or two
vendors per container. Whatever the order of decisions, reservations, annotation arrivals,
deletions and re-registrations:

* no device of any vendor is ever over-committed (slots, memory, cores);
* the incremental ledger equals one rebuilt from scratch from the same pods;
* every chosen allocation puts each vendor's devices on devices of that vendor, under that vendor's
  own annotation keys, and reads back the same from the pod (§4.4, §4.5).

The vendors are the chart's registered ones whose devices are plain inventories: NVIDIA, Cambricon,
Hygon, Mthreads, Metax GPU, Kunlun, Enflame GCU, AMD, Iluvatar BI-V150 and Biren.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from typing import Any

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.builders import container, device, pod
from tests.engine.ledger_invariants import assert_incremental_equals_rebuilt, assert_never_overcommitted
from vgpu_scheduler.configfile import default_device_config
from vgpu_scheduler.devices.protocol import VendorFlags
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoRequest, decide
from vgpu_scheduler.engine.podinfo import PodAllocation, pod_allocation_from_pod
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import DeviceInfo

VENDORS = build(default_device_config(), VendorFlags(enable_iluvatar=True, enable_ascend=True))
PLAIN = ("NVIDIA", "MLU", "DCU", "Mthreads", "Metax-GPU", "kunlun", "GCU", "AMD", "BI-V150", "Biren")
GENERIC = [key for key in PLAIN if key in VENDORS]
"""Vendors whose request reads count (+ memory + cores) resources and whose devices are plain
`DeviceInfo`s typed by their key (annotation and capacity inventories alike)."""
NS = "team"

DEVICE_TYPE = {"NVIDIA": "NVIDIA-A100", "DCU": "DCU-Z100", "AMD": "AMD-MI300", "BI-V150": "BI-V150",
               "Biren": "Biren-106", "MLU": "MLU", "Mthreads": "Mthreads-S4000", "Metax-GPU": "Metax-GPU",
               "kunlun": "kunlun", "GCU": "GCU"}


def _devices(node: str, vendor: str, n: int, *, devmem: int, count: int) -> list[DeviceInfo]:
    out = []
    for i in range(n):
        dev = device(f"{node}-{vendor}-{i}", index=i, count=count, devmem=devmem, type=DEVICE_TYPE[vendor])
        dev.device_vendor = vendor
        out.append(dev)
    return out


def _inventory() -> dict[str, list[DeviceInfo]]:
    """One node per vendor, then nodes mixing two vendors."""
    out: dict[str, list[DeviceInfo]] = {}
    for i, vendor in enumerate(GENERIC):
        out[f"n{i}"] = _devices(f"n{i}", vendor, 2, devmem=8000 + 4000 * i, count=3)
    for i, (a, b) in enumerate(itertools.pairwise(GENERIC)):
        node = f"m{i}"
        out[node] = _devices(node, a, 1, devmem=12000, count=2) + _devices(node, b, 2, devmem=6000, count=2)
    return out


INVENTORY = _inventory()
NODES = sorted(INVENTORY)
PODS = [f"p{i}" for i in range(6)]

ask = st.fixed_dictionaries(
    {
        "vendor": st.sampled_from(GENERIC),
        "nums": st.sampled_from([1, 1, 2]),
        "mem": st.one_of(st.none(), st.integers(500, 7000)),
        "cores": st.sampled_from([None, 0, 20, 50, 100]),
    }
)
container_spec = st.lists(ask, min_size=0, max_size=2, unique_by=lambda a: a["vendor"])
pod_spec = st.fixed_dictionaries(
    {
        "app": st.lists(container_spec, min_size=1, max_size=2),
        "node_policy": st.sampled_from(["binpack", "spread"]),
        "gpu_policy": st.sampled_from(["spread", "binpack"]),
    }
)


def _limits(asks: list[dict[str, Any]]) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    for a in asks:
        names = VENDORS[a["vendor"]].names
        limits[names.count] = a["nums"]
        if a["mem"] is not None and names.memory:
            limits[names.memory] = a["mem"]
        if a["cores"] is not None and names.cores:
            limits[names.cores] = a["cores"]
    return limits


def _pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return pod(
        name,
        namespace=NS,
        uid=f"uid-{name}",
        annotations={"hami.io/node-scheduler-policy": spec["node_policy"],
                     "hami.io/gpu-scheduler-policy": spec["gpu_policy"]},
        containers=[container(f"c{i}", limits=_limits(asks)) for i, asks in enumerate(spec["app"])],
        phase="Pending",
    )


@dataclass
class _PodModel:
    obj: dict[str, Any]
    decision: Chosen
    confirmed: bool = False


class MixedFleetMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = SchedulerState(VENDORS)
        self.registered: dict[str, list[DeviceInfo]] = {}
        self.pods: dict[str, _PodModel] = {}
        self.expected: dict[str, PodAllocation] = {}
        self.now = 1000

    @initialize()
    def register_all(self) -> None:
        for node in NODES:
            self.register(node, reverse=False)

    @rule(node=st.sampled_from(NODES), reverse=st.booleans())
    def register(self, node: str, reverse: bool) -> None:
        devices = copy.deepcopy(INVENTORY[node])
        if reverse:
            devices.reverse()
        self.state.set_node_devices(node, devices)
        self.registered[node] = devices

    @rule(node=st.sampled_from(NODES))
    def unregister(self, node: str) -> None:
        self.state.remove_node(node)
        self.registered.pop(node, None)

    @rule(name=st.sampled_from(PODS), spec=pod_spec)
    def filter_and_reserve(self, name: str, spec: dict[str, Any]) -> None:
        self.now += 1
        obj = _pod(name, spec)
        got = decide(obj, NODES, self.state, default_node_policy="binpack", default_gpu_policy="spread",
                     now=self.now)
        event(f"decision: {type(got).__name__}")
        if isinstance(got, NoRequest):
            return
        uid = f"uid-{name}"
        self.expected.pop(uid, None)
        self.pods.pop(name, None)
        if isinstance(got, Chosen):
            self._check_vendors_apart(obj, got)
            self.expected[uid] = self.state.reserve(obj, got)
            self.pods[name] = _PodModel(obj, got)

    def _check_vendors_apart(self, obj: dict[str, Any], chosen: Chosen) -> None:
        by_id = {d.id: d for d in self.registered[chosen.node]}
        wanted = {key for per_container in pod_requests(obj, VENDORS) for key in per_container}
        assert set(chosen.devices) == wanted, "one allocation per vendor asked"
        for vendor, per_container in chosen.devices.items():
            for entries in per_container:
                for entry in entries:
                    assert entry.type in (vendor, by_id[entry.uuid].type)  # AMD writes the model
                    assert by_id[entry.uuid].device_vendor == vendor, "a device of another vendor"
            to_allocate, allocated = VENDORS[vendor].allocation_keys
            assert allocated in chosen.annotations
            if to_allocate in chosen.annotations:  # (Mthreads registers the key but never writes it)
                assert chosen.annotations[to_allocate] == chosen.annotations[allocated]
        if len(wanted) > 1:
            event("multi-vendor pod placed")

    @precondition(lambda self: any(not m.confirmed for m in self.pods.values()))
    @rule(data=st.data())
    def annotations_arrive(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(n for n, m in self.pods.items() if not m.confirmed)))
        model = self.pods[name]
        model.obj["metadata"]["annotations"].update(model.decision.annotations)
        model.obj["metadata"]["labels"] = dict(model.decision.labels)
        model.confirmed = True
        self.state.on_pod(model.obj)
        read_back = pod_allocation_from_pod(model.obj, allocation_keys=VENDORS.allocation_keys)
        assert read_back == self.expected[f"uid-{name}"]

    @precondition(lambda self: bool(self.pods))
    @rule(data=st.data(), how=st.sampled_from(["delete", "succeeded", "release"]))
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
            obj["status"]["phase"] = "Succeeded"
            self.state.on_pod(obj)
        self.expected.pop(uid, None)

    @invariant()
    def never_overcommitted(self) -> None:
        assert_never_overcommitted(self.state, self.registered)

    @invariant()
    def incremental_equals_rebuilt(self) -> None:
        registered = {node: (devices, frozenset[str]()) for node, devices in self.registered.items()}
        assert_incremental_equals_rebuilt(self.state, registered, self.expected)


MixedFleetMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
TestMixedFleet = MixedFleetMachine.TestCase


def test_the_fleet_mixes_at_least_two_vendors() -> None:
    assert len(GENERIC) >= 2
    assert any(len({d.device_vendor for d in devs}) == 2 for devs in INVENTORY.values())
