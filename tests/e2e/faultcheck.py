"""What must hold after any fault, read back from the API (shared by the fault tests).

* every device in a pod's allocation is a device of the node the pod is bound to, and the pod's
  `hami.io/vgpu-node` names that node;
* no device is over-committed: the pods holding it together use at most its count, memory, cores;
* every pod is bound and confirmed (`bind-phase: success`) or pending with a reason (a
  FailedScheduling event with a note);
* no node keeps a `hami.io/mutex.lock`.

The first two can never heal once broken (a bound pod's allocation is final), so a test may wait
until the last two hold (`wait_settled`) and then require all four.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.allocation import AllocationError, decode_container_list

Obj = dict[str, Any]


@dataclass
class Snapshot:
    pods: list[Obj]
    nodes: list[Obj]
    reasons: dict[str, str] = field(default_factory=dict)
    """pod name -> note of its latest FailedScheduling event."""

    def bound(self) -> dict[str, str]:
        return {_name(p): str(p["spec"]["nodeName"]) for p in self.pods if p["spec"].get("nodeName")}

    def confirmed(self) -> set[str]:
        return {_name(p) for p in self.pods if _ann(p).get(keys.BIND_PHASE) == keys.BIND_PHASE_SUCCESS}

    def locks(self) -> dict[str, str]:
        return {_name(n): _ann(n)[keys.NODE_LOCK] for n in self.nodes if keys.NODE_LOCK in _ann(n)}


class Bindings:
    """Pod informer handler: loop time at which each pod was first seen bound."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}

    def on_add(self, obj: Obj) -> None:
        self._see(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._see(new)

    def on_delete(self, obj: Obj) -> None:
        pass

    def _see(self, pod: Obj) -> None:
        if pod["spec"].get("nodeName"):
            self.at.setdefault(_name(pod), asyncio.get_running_loop().time())


def _name(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def _ann(obj: Obj) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


async def snapshot(client: KubeClient, namespace: str, node_selector: str) -> Snapshot:
    pods = await client.list_pods(namespace)
    nodes, _ = await client.list_all(api.NODES, label_selector=node_selector)
    events, _ = await client.list_all(api.EVENTS_V1, namespace)
    reasons: dict[str, tuple[datetime, str]] = {}
    for ev in events:
        if ev.get("reason") != "FailedScheduling" or not ev.get("note"):
            continue
        pod = str((ev.get("regarding") or {}).get("name") or "")
        seen = _last_seen(ev)
        if pod not in reasons or seen >= reasons[pod][0]:
            reasons[pod] = (seen, str(ev["note"]))
    return Snapshot(pods, nodes, {pod: note for pod, (_, note) in reasons.items()})


def _last_seen(event: Obj) -> datetime:
    """When the event last happened: a repeated event keeps its first eventTime and counts the
    repeats in `series`, whose lastObservedTime is the latest."""
    stamp = ((event.get("series") or {}).get("lastObservedTime") or event.get("eventTime")
             or (event.get("metadata") or {}).get("creationTimestamp"))
    return datetime.fromisoformat(str(stamp)) if stamp else datetime.min.replace(tzinfo=UTC)


def allocation_problems(pods: list[Obj], nodes: list[Obj]) -> list[tuple[str, str]]:
    """(kind, message) for each device on another node than its bound pod (`wrong-node`), each
    over-committed device (`overcommit`) and each allocation that cannot be read (`bad-annotation`).
    Shared by the fault tests and bench/burst.py."""
    out: list[tuple[str, str]] = []
    devices: dict[str, tuple[str, Obj]] = {}  # uuid -> (node, register entry)
    for node in nodes:
        for dev in json.loads(_ann(node).get(keys.NODE_NVIDIA_REGISTER, "[]")):
            devices[dev["id"]] = (_name(node), dev)
    used: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # uuid -> count, mem, cores
    holders: dict[str, list[str]] = defaultdict(list)
    for pod in pods:
        node = pod["spec"].get("nodeName")
        value = _ann(pod).get(keys.VGPU_ALLOCATED)
        if not node or not value:
            continue  # unbound: its annotations may still change (a new filter decides again)
        said = _ann(pod).get(keys.VGPU_NODE)
        if said != node:
            out.append(("wrong-node", f"{_name(pod)}: bound to {node}, vgpu-node says {said}"))
        try:
            containers = decode_container_list(value)
        except AllocationError as exc:
            out.append(("bad-annotation", f"{_name(pod)}: bad allocation annotation: {exc}"))
            continue
        for container in containers:
            for dev in container:
                owner = devices.get(dev.uuid)
                if owner is None or owner[0] != node:
                    where = owner and owner[0]
                    out.append(("wrong-node", f"{_name(pod)}: on {node} with device {dev.uuid} of {where}"))
                u = used[dev.uuid]
                u[0], u[1], u[2] = u[0] + 1, u[1] + dev.usedmem, u[2] + dev.usedcores
                holders[dev.uuid].append(_name(pod))
    for uuid, (count, mem, cores) in sorted(used.items()):
        if uuid not in devices:
            continue
        reg = devices[uuid][1]
        if count > reg["count"] or mem > reg["devmem"] or cores > reg["devcore"]:
            message = f"{uuid} over-committed: {count} pods, {mem} MiB, {cores}% by {sorted(holders[uuid])}"
            out.append(("overcommit", message))
    return out


def allocation_violations(snap: Snapshot) -> list[str]:
    """Devices on another node than the pod, and over-committed devices (never transient)."""
    return [message for _, message in allocation_problems(snap.pods, snap.nodes)]


def settle_violations(
    snap: Snapshot, *, unconfirmed_ok: Collection[str] = (), locks_ok: Collection[str] = ()
) -> list[str]:
    """Pods neither confirmed nor pending with a reason, and node locks left (may be transient).
    `unconfirmed_ok` / `locks_ok`: pods a test left bound without a confirmation on purpose, and
    the nodes whose lock it expects to stay (a device plugin that never confirms)."""
    out: list[str] = []
    confirmed = snap.confirmed()
    for pod in snap.pods:
        name = _name(pod)
        node = pod["spec"].get("nodeName")
        if node and name not in confirmed and name not in unconfirmed_ok:
            out.append(f"{name}: bound to {node}, not confirmed ({_ann(pod).get(keys.BIND_PHASE)})")
        elif not node and name not in snap.reasons:
            out.append(f"{name}: pending without a FailedScheduling reason")
    out.extend(
        f"{node}: lock left: {value}" for node, value in sorted(snap.locks().items()) if node not in locks_ok
    )
    return out


def violations(
    snap: Snapshot, *, unconfirmed_ok: Collection[str] = (), locks_ok: Collection[str] = ()
) -> list[str]:
    return allocation_violations(snap) + settle_violations(
        snap, unconfirmed_ok=unconfirmed_ok, locks_ok=locks_ok
    )


async def wait_settled(
    client: KubeClient,
    namespace: str,
    node_selector: str,
    *,
    timeout: float,
    confirmed: int,
    unconfirmed_ok: Collection[str] = (),
    locks_ok: Collection[str] = (),
    poll: float = 1.0,
) -> Snapshot:
    """Poll until `confirmed` pods are confirmed and nothing transient is left (or `timeout`); the
    caller then asserts `violations`. The count is needed: a pod pending after a failed bind has a
    FailedScheduling reason too while kube-scheduler retries it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        snap = await snapshot(client, namespace, node_selector)
        left = settle_violations(snap, unconfirmed_ok=unconfirmed_ok, locks_ok=locks_ok)
        if (not left and len(snap.confirmed()) >= confirmed) or loop.time() > deadline:
            return snap
        await asyncio.sleep(poll)


def report(test: str, **figures: float | int | str) -> None:
    """Print the measured figures on one line (`pytest -s` shows it) and append them as JSON to
    $VGPU_FAULT_FIGURES when set, for docs/faults.md. Figures are reported, never asserted."""
    shown = " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items())
    print(f"\nfault figures {test}: {shown}")
    path = os.environ.get("VGPU_FAULT_FIGURES")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"test": test, **figures}) + "\n")
