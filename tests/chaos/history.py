"""What happened during a chaos run, as plain records the checker reads (checker.py).

The `Recorder` is a Reflector handler of the harness' own client, connected to kube-apiserver
directly (never through the fault proxy): it turns every pod, node and Lease it sees into a
`PodSeen` / `NodeSeen` / `LeaderSeen` stamped with the harness' monotonic clock. The proxy adds one
`WriteSeen` per request a replica of our server sent (faultproxy.py) and the nemesis one
`FaultRecord` per fault it injected (nemesis.py). A kube-apiserver restart cuts this watch too: the
recorder then relists, and only the states it saw are checked.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.allocation import AllocationError, decode_container_list
from vgpu_scheduler.wire.inventory import InventoryError, decode_node_devices

Obj = dict[str, Any]
ALLOCATED_SUFFIX = "-devices-allocated"  # every vendor's `hami.io/<vendor>-devices-allocated`
REGISTER_KEYS = (keys.NODE_NVIDIA_REGISTER, "hami.io/node-dcu-register")


@dataclass(frozen=True, slots=True)
class DeviceUse:
    uuid: str
    mem: int
    cores: int


@dataclass(frozen=True, slots=True)
class Device:
    uuid: str
    count: int
    mem: int
    cores: int


@dataclass(frozen=True, slots=True)
class PodSeen:
    t: float
    pod: str  # <namespace>/<name>
    node: str = ""  # spec.nodeName ("" while pending)
    vgpu_node: str = ""
    devices: tuple[DeviceUse, ...] = ()
    phase: str = ""  # hami.io/bind-phase
    deleted: bool = False
    bad: str = ""  # an allocation annotation that does not decode
    done: bool = False  # status.phase Failed or Succeeded: its devices are free again


@dataclass(frozen=True, slots=True)
class NodeSeen:
    t: float
    node: str
    devices: tuple[Device, ...] = ()
    lock: str = ""  # hami.io/mutex.lock, "" when free
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class LeaderSeen:
    t: float
    replica: str  # the replica whose kube-scheduler holds the Lease, "" when none


@dataclass(frozen=True, slots=True)
class WriteSeen:
    t: float
    replica: str
    method: str
    path: str
    status: int  # what the replica got back (0: the connection was cut)


@dataclass(slots=True)
class FaultRecord:
    kind: str
    start: float
    end: float = 0.0  # healed (0.0 while active)
    target: str = ""


@dataclass
class History:
    pods: list[PodSeen] = field(default_factory=list)
    nodes: list[NodeSeen] = field(default_factory=list)
    leaders: list[LeaderSeen] = field(default_factory=list)
    writes: list[WriteSeen] = field(default_factory=list)
    faults: list[FaultRecord] = field(default_factory=list)


def pod_record(t: float, pod: Obj, *, deleted: bool = False) -> PodSeen:
    meta = pod.get("metadata") or {}
    ann: Mapping[str, str] = meta.get("annotations") or {}
    uses: list[DeviceUse] = []
    bad = ""
    for key, value in ann.items():
        if not key.endswith(ALLOCATED_SUFFIX) or not value:
            continue
        try:
            containers = decode_container_list(value)
        except AllocationError as exc:
            bad = f"{key}: {exc}"
            continue
        uses.extend(DeviceUse(d.uuid, d.usedmem, d.usedcores) for c in containers for d in c)
    return PodSeen(
        t, f"{meta.get('namespace')}/{meta.get('name')}", str((pod.get("spec") or {}).get("nodeName") or ""),
        ann.get(keys.VGPU_NODE, ""), tuple(uses), ann.get(keys.BIND_PHASE, ""), deleted, bad,
        (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded"),
    )


def node_record(t: float, node: Obj, *, deleted: bool = False) -> NodeSeen:
    meta = node.get("metadata") or {}
    ann: Mapping[str, str] = meta.get("annotations") or {}
    devices: list[Device] = []
    for key in REGISTER_KEYS:
        if ann.get(key):
            # An inventory our server cannot read either registers nothing.
            with contextlib.suppress(InventoryError):
                devices.extend(Device(d.id, d.count, d.devmem, d.devcore)
                               for d in decode_node_devices(ann[key]))
    return NodeSeen(t, str(meta.get("name")), tuple(devices), ann.get(keys.NODE_LOCK, ""), deleted)


class Recorder:
    """Reflector handler for pods, nodes and the kube-scheduler Lease; appends to `history` only
    what changed what the checker reads. `replica_of` maps a Lease holder identity to a replica."""

    def __init__(self, history: History, *, replica_of: Callable[[str], str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.history = history
        self.replica_of = replica_of
        self.clock = clock
        self._pods: dict[str, PodSeen] = {}
        self._nodes: dict[str, NodeSeen] = {}
        self.pods = _Kind(self._pod)
        self.nodes = _Kind(self._node)
        self.lease = _Kind(self._lease)

    def _pod(self, obj: Obj, deleted: bool) -> None:
        rec = pod_record(self.clock(), obj, deleted=deleted)
        last = self._pods.get(rec.pod)
        if last is not None and _same(last, rec):
            return
        self._pods[rec.pod] = rec
        self.history.pods.append(rec)

    def _node(self, obj: Obj, deleted: bool) -> None:
        rec = node_record(self.clock(), obj, deleted=deleted)
        last = self._nodes.get(rec.node)
        if last is not None and _same(last, rec):
            return
        self._nodes[rec.node] = rec
        self.history.nodes.append(rec)

    def _lease(self, obj: Obj, deleted: bool) -> None:
        holder = "" if deleted else str((obj.get("spec") or {}).get("holderIdentity") or "")
        replica = self.replica_of(holder) if holder else ""
        leaders = self.history.leaders
        if not leaders or leaders[-1].replica != replica:
            leaders.append(LeaderSeen(self.clock(), replica))


def _same(a: PodSeen | NodeSeen, b: PodSeen | NodeSeen) -> bool:
    return a.__class__ is b.__class__ and all(
        getattr(a, f) == getattr(b, f) for f in a.__slots__ if f != "t"
    )


class _Kind:
    """Reflector handler forwarding to one recorder method."""

    def __init__(self, see: Callable[[Obj, bool], None]) -> None:
        self.see = see

    def on_add(self, obj: Obj) -> None:
        self.see(obj, False)

    def on_update(self, old: Obj, new: Obj) -> None:
        self.see(new, False)

    def on_delete(self, obj: Obj) -> None:
        self.see(obj, True)
