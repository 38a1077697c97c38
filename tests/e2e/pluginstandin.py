"""What the missing nodes would do, over the real API: GPU nodes registered the way HAMi's NVIDIA
device plugin registers them (hami-spec §3.1, §3.4), GPU pods, and a device-plugin stand-in that
confirms each allocation (§6.2).

Shared by tests/e2e and bench/burst.py. Everything goes through `vgpu_scheduler.cluster.client`
over HTTPS (`make_client(<admin kubeconfig>)`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from tests import builders
from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.cluster.reflector import Reflector
from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.standin.embedded.deviceplugin import SimDevicePlugin
from vgpu_scheduler.wire import keys

log = logging.getLogger(__name__)

Obj = dict[str, Any]
GPU_MEM = 81920  # MiB per GPU
GPU_COUNT = 10  # pods per GPU (the device plugin's --device-split-count)


def gpu_node(name: str, gpus: int = 8, count: int = GPU_COUNT, devmem: int = GPU_MEM) -> tuple[Obj, Obj]:
    """The Node as the device plugin leaves it (register annotation, handshake) and the status
    patch a kubelet would report; kube-scheduler needs allocatable cpu/memory/pods to place pods."""
    handshake = "Requesting_" + datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    node = builders.gpu_node(
        name,
        gpus=gpus,
        count=count,
        devmem=devmem,
        type="NVIDIA-A100",
        labels={"kubernetes.io/os": "linux", "gpu": "on"},
        annotations={keys.NODE_HANDSHAKE: handshake},
    )
    del node["status"]  # created without it: a kubelet reports it, as the patch below
    node["spec"] = {}
    resources = {"cpu": "64", "memory": "512Gi", "pods": "250", "nvidia.com/gpu": str(gpus * count)}
    status = {"status": {"capacity": resources, "allocatable": resources}}
    return node, status


async def create_node(client: KubeClient, node: Obj, status: Obj) -> None:
    name = node["metadata"]["name"]
    await client.create(api.NODES, node)
    await client.patch(api.NODES, name, status, subresource="status")


def gpu_pod(
    name: str,
    namespace: str = "default",
    *,
    gpus: int = 1,
    gpumem: int | None = 4000,
    gpucores: int | None = None,
    cpu: str = "100m",
    scheduler_name: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Obj:
    ctr = builders.gpu_container("main", gpus=gpus, mem=gpumem, cores=gpucores,
                                 image="registry.invalid/cuda:none", requests={"cpu": cpu})
    spec: Obj = {"terminationGracePeriodSeconds": 0}
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    return builders.pod(name, namespace=namespace, labels=labels or {}, typed=True, containers=[ctr],
                        spec=spec)


def cpu_pod(name: str, namespace: str, cpu: str = "100m", labels: Mapping[str, str] | None = None) -> Obj:
    ctr = builders.container("main", image="registry.invalid/app:none", requests={"cpu": cpu})
    return builders.pod(name, namespace=namespace, labels=labels or {}, typed=True, containers=[ctr],
                        spec={"terminationGracePeriodSeconds": 0})


def _wants_admission(pod: Mapping[str, Any]) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return bool((pod.get("spec") or {}).get("nodeName")) and (
        annotations.get(keys.BIND_PHASE) == keys.BIND_PHASE_ALLOCATING
    )


class DevicePluginStandIn:
    """Watches pods; `delay` seconds after a bound pod shows `bind-phase: allocating`, does what the
    NVIDIA device plugin does on Allocate: patches `bind-phase: success` (and the consumed
    to-allocate value) and deletes the node's `hami.io/mutex.lock` if it names that pod. The work
    itself is `SimDevicePlugin.admit`, the simulator's plugin, here over the HTTP client."""

    def __init__(
        self, client: KubeClient, delay: float = 0.0, namespace: str | None = None,
        nodes: Collection[str] | None = None, *, vendors: Vendors | None = None,
    ) -> None:
        """nodes: the nodes whose device plugin works (default all); a pod bound anywhere else is
        never confirmed and its node lock never released, as with a dead plugin there.
        vendors: the scheduler's vendors, whose to-allocate annotations are consumed (default: the
        default device configuration's)."""
        self.delay = delay
        self.nodes = None if nodes is None else frozenset(nodes)
        self.plugin = SimDevicePlugin(client, vendors)
        self.reflector = Reflector(client, api.PODS, namespace=namespace, handler=self)
        self.confirmed: dict[str, float] = {}  # "<ns>/<name>" -> loop time of the success patch
        self.errors: list[str] = []
        self._seen: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> DevicePluginStandIn:
        self.reflector.start()
        await self.reflector.wait_synced(timeout=60)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # Reflector handler
    def on_add(self, obj: Obj) -> None:
        self._offer(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._offer(new)

    def on_delete(self, obj: Obj) -> None:
        pass

    def _offer(self, pod: Obj) -> None:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if not uid or uid in self._seen or not _wants_admission(pod):
            return
        if self.nodes is not None and (pod.get("spec") or {}).get("nodeName") not in self.nodes:
            return
        self._seen.add(uid)
        task = asyncio.get_running_loop().create_task(self._admit(pod))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _admit(self, pod: Obj) -> None:
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if self.delay > 0:
            await asyncio.sleep(self.delay)
        try:
            result = await self.plugin.admit(pod)
        except ApiError as exc:
            self.errors.append(f"{key}: {exc}")
            log.warning("device plugin stand-in: %s: %s", key, exc)
            return
        if result.error:
            self.errors.append(f"{key}: {result.error}")
        self.confirmed[key] = asyncio.get_running_loop().time()

    async def drain(self, timeout: float) -> None:
        """Wait (at most `timeout` seconds) for the admissions in flight: a pod confirmed whose
        lock release is still on its way must not be cut there by `stop`."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)

    async def stop(self) -> None:
        await self.reflector.stop()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


GROUP_LABEL = "vgpu-scheduler.e2e/group"
"""Nodes of one test carry GROUP_LABEL=<group>; its pods select them, so tests never share nodes."""


def group_selector(group: str) -> str:
    return f"{GROUP_LABEL}={group}"


async def create_group(
    client: KubeClient, group: str, count: int, *, gpus: int = 2, per_gpu: int = GPU_COUNT,
    devmem: int = GPU_MEM,
) -> list[str]:
    """`count` GPU nodes named `<group>-<i>` labelled for the group (already there: kept)."""
    names = [f"{group}-{i:03d}" for i in range(count)]

    async def one(name: str) -> None:
        node, status = gpu_node(name, gpus=gpus, count=per_gpu, devmem=devmem)
        node["metadata"]["labels"][GROUP_LABEL] = group
        try:
            await create_node(client, node, status)
        except ApiError as exc:
            if exc.status != 409:
                raise

    await asyncio.gather(*(one(n) for n in names))
    return names


def group_pod(name: str, namespace: str, group: str, **kwargs: Any) -> Obj:
    """A GPU pod (see gpu_pod) that may only land on the group's nodes."""
    pod = gpu_pod(name, namespace, **kwargs)
    pod["spec"]["nodeSelector"] = {GROUP_LABEL: group}
    return pod


async def delete_group(client: KubeClient, group: str, namespace: str) -> None:
    """Remove what a test left: its pods (no kubelet: deleted at once) and its nodes, so later tests
    of the session see neither (binpack would prefer the used nodes)."""
    pods = await client.list_pods(namespace)
    nodes, _ = await client.list_all(api.NODES, label_selector=group_selector(group))

    async def gone(coro: Any) -> None:
        with contextlib.suppress(ApiError):
            await coro

    # Nodes first: pending pods must not be placed on the room the deleted pods leave.
    await asyncio.gather(*(gone(client.delete(api.NODES, n["metadata"]["name"])) for n in nodes))
    await asyncio.gather(*(gone(client.delete(api.PODS, p["metadata"]["name"], namespace,
                                              grace_period_seconds=0)) for p in pods))
