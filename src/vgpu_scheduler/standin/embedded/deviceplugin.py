"""Simulated HAMi device plugins + kubelet, reacting to a bound pod (§4.3, §6.2).

What the real ones do once kube-scheduler has created the Binding, and what this does the same way
on the wire, for every registered vendor with a to-allocate annotation:

* kubelet calls `Allocate` once per container asking for the vendor's count resource, init
  containers first; the plugin pops the **first non-empty** container entry of the vendor's
  to-allocate annotation (NVIDIA: `hami.io/vgpu-devices-to-allocate`), which must hold exactly as
  many devices as kubelet asked for (else "device number not matched");
* the rewritten to-allocate values (consumed entries emptied, e.g. `;`) and `hami.io/bind-phase:
  success` (or `failed`) are merge-patched onto the pod;
* the node lock `hami.io/mutex.lock` is deleted if it names this pod (`NodeLocker.release`, the same
  code the scheduler uses; first as one guarded write of the value the pod's bind-time says the
  scheduler wrote, `probable_lock`); a vendor's own lock without holder
  (`NodeLockSpec.names_holder` false, e.g. Cambricon's) is deleted whatever it holds once that
  vendor's allocation was consumed without error, as that vendor's plugin does after Allocate (on
  a failed Allocate it stays until it expires);
* kubelet then runs the pod: phase `Running`, or `Failed` when the allocation failed (kubelet's
  UnexpectedAdmissionError); a pod with a run time (`DURATION_ANNOTATION`) later goes `Succeeded`.

`SimDevicePlugin.admit` is called directly by the simulation loop (in simulated time, no watch);
`attach_device_plugin(cluster)` runs the same code from a pod watch for the server's embedded
cluster (`vgpu-scheduler --cluster-snapshot`), with run times in wall-clock seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.cluster.nodelock import NodeLocker, probable_lock
from vgpu_scheduler.cluster.reflector import Reflector
from vgpu_scheduler.cluster.stamplock import StampLocker
from vgpu_scheduler.devices.protocol import Vendor, Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.standin.embedded.runtime import InvalidDurationError, duration_seconds
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire import keys, objects

if TYPE_CHECKING:
    from vgpu_scheduler.standin.memory import MemoryCluster

log = logging.getLogger(__name__)

Obj = dict[str, Any]

DEVICE_NUMBER_NOT_MATCHED = "device number not matched"
VENDOR_KEYS = tuple(keys.ALLOCATION_KEYS)
"""Vendor key strings whose presence in a to-allocate value means something is left to allocate."""


class AllocateError(ValueError):
    """kubelet's Allocate for one container failed; the pod gets `bind-phase: failed`."""


def requested_counts(pod: Mapping[str, Any], vendor: Vendor) -> list[int]:
    """Devices of `vendor` kubelet asks for, per container (init first), 0 for containers without."""
    # Positions as engine.requests.pod_requests counts them: only container objects take one.
    counts: list[int] = []
    for c in (*objects.init_containers(pod), *objects.containers(pod)):
        req = vendor.request(c)
        counts.append(req.nums if req is not None and req.nums > 0 else 0)
    return counts


def _device_count(entry: str) -> int:
    return sum(1 for part in entry.split(":") if "," in part)


def consume(to_allocate: str, counts: Sequence[int]) -> str:
    """The to-allocate value after kubelet's Allocate calls for `counts` (one per container asking
    for devices, in order): each call empties the first non-empty entry, which must hold exactly
    that many devices. Raises AllocateError on a mismatch or when nothing is left to pop."""
    entries = to_allocate.split(";")
    for n in counts:
        if n <= 0:
            continue
        i = next((j for j, e in enumerate(entries) if _device_count(e) > 0), None)
        if i is None:
            raise AllocateError(f"{DEVICE_NUMBER_NOT_MATCHED}: no allocation left for a {n}-device request")
        if _device_count(entries[i]) != n:
            raise AllocateError(
                f"{DEVICE_NUMBER_NOT_MATCHED}: asked {n}, allocation holds {_device_count(entries[i])}"
            )
        entries[i] = ""
    return ";".join(entries)


def fully_consumed(to_allocate: str, vendor_keys: Sequence[str] = VENDOR_KEYS) -> bool:
    return not any(v in to_allocate for v in vendor_keys)


@dataclass(slots=True, frozen=True)
class Admission:
    """What happened to a pod on its node: the phase it got and, on failure, why."""

    phase: str
    error: str = ""


class SimDevicePlugin:
    """The device plugins and kubelets of every node of one cluster, driven per pod."""

    def __init__(self, client: KubeClient, vendors: Vendors | None = None) -> None:
        self.client = client
        self.vendors = vendors if vendors is not None else build()
        # The plugin is another process than the scheduler: its own locker (only release is used).
        self.locker = NodeLocker(client)

    async def admit(self, pod: Mapping[str, Any]) -> Admission:
        """Allocate the bound `pod`'s devices and start it (Running), or fail it (Failed)."""
        namespace, name = objects.namespace(pod) or "default", objects.name(pod)
        node = objects.node_name(pod)
        annotations = objects.annotations(pod)
        error = ""
        written: dict[str, str] = {}
        consumed: list[Vendor] = []
        vendor_keys = self.vendors.keys
        for vendor in self.vendors:
            to_allocate = vendor.allocation_keys[0]
            if not to_allocate or to_allocate not in annotations or error:
                continue
            value = str(annotations[to_allocate])
            try:
                value = consume(value, requested_counts(pod, vendor))
                if not fully_consumed(value, vendor_keys):
                    raise AllocateError(f"{DEVICE_NUMBER_NOT_MATCHED}: allocation left unconsumed: {value!r}")
            except AllocateError as exc:
                error = str(exc)
            else:
                consumed.append(vendor)
            written[to_allocate] = value
        if written:
            phase = keys.BIND_PHASE_FAILED if error else keys.BIND_PHASE_SUCCESS
            patch = {"metadata": {"annotations": {**written, keys.BIND_PHASE: phase}}}
            await self.client.patch_pod(namespace, name, patch, answer=False)
            if node:
                # The value the scheduler most likely wrote is deleted without reading the node
                # first (HAMi's plugin reads it: the same outcome, one request fewer).
                await self.locker.release(node, namespace, name, expected=probable_lock(pod))
                if not error:
                    await self._release_vendor_locks(node, consumed)
        result = Admission("Failed", error) if error else Admission("Running")
        await self.set_phase(namespace, name, result.phase, error)
        return result

    async def _release_vendor_locks(self, node: str, vendors: Sequence[Vendor]) -> None:
        specs = {lock.key: lock for lock in (v.node_lock for v in vendors) if lock and not lock.names_holder}
        for key in sorted(specs):
            await StampLocker(self.client, specs[key]).release(node, None)

    async def set_phase(self, namespace: str, name: str, phase: str, message: str = "") -> None:
        status: Obj = {"phase": phase}
        if message:
            status.update(reason="UnexpectedAdmissionError", message=message)
        patch = {"status": status}
        await self.client.patch("pods", name, patch, namespace, subresource="status", answer=False)

    async def finish(self, namespace: str, name: str) -> None:
        """The pod's containers exited 0."""
        await self.set_phase(namespace, name, "Succeeded")


# -- background mode for the server's embedded cluster -----------------------------------------------


def _wants_admission(pod: Mapping[str, Any]) -> bool:
    return (
        bool(objects.node_name(pod))
        and (objects.phase(pod) or "Pending") == "Pending"
        and objects.annotation(pod, keys.BIND_PHASE) == keys.BIND_PHASE_ALLOCATING
    )


class _Handler:
    def __init__(self, runner: BackgroundDevicePlugin) -> None:
        self._runner = runner

    def on_add(self, obj: Obj) -> None:
        self._runner.offer(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._runner.offer(new)

    def on_delete(self, obj: Obj) -> None:
        pass


class BackgroundDevicePlugin:
    """Watches pods and admits each bound, allocating pod once; run times in wall-clock seconds."""

    def __init__(self, client: KubeClient, vendors: Vendors | None = None) -> None:
        self.plugin = SimDevicePlugin(client, vendors)
        self.reflector = Reflector(client, "pods", handler=_Handler(self))
        self._seen: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self.reflector.start()

    def offer(self, pod: Obj) -> None:
        uid = objects.uid(pod)
        if not uid or uid in self._seen or not _wants_admission(pod):
            return
        self._seen.add(uid)
        task = asyncio.get_running_loop().create_task(self._admit(pod))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _admit(self, pod: Obj) -> None:
        namespace, name = objects.namespace(pod) or "default", objects.name(pod)
        try:
            result = await self.plugin.admit(pod)
            duration = duration_seconds(pod)
            if result.phase == "Running" and duration is not None:
                await asyncio.sleep(duration)
                await self.plugin.finish(namespace, name)
        except (ApiError, InvalidDurationError) as exc:
            log.warning("device plugin: pod %s/%s: %s", namespace, name, exc)

    async def stop(self) -> None:
        await self.reflector.stop()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def attach_device_plugin(cluster: MemoryCluster, vendors: Vendors | None = None) -> BackgroundDevicePlugin:
    """Start a background device plugin on `cluster` (call from a running event loop); `.stop()` it.
    `vendors`: the scheduler's (default: the default device configuration's)."""
    runner = BackgroundDevicePlugin(KubeClient(MemoryTransport(cluster)), vendors)
    runner.start()
    return runner
