"""Shared builders for test objects: pods, nodes, containers, devices, inventories, requests,
allocations and quotas.

Every builder takes keyword arguments with plain defaults and leaves out what it is not given,
so a test that needs an exact shape (no `annotations` key, no `status`) still gets it. A test
module that repeats the same arguments binds them once (`functools.partial` or a two-line
wrapper) instead of building the dict itself.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vgpu_scheduler.engine.podinfo import PodAllocation
from vgpu_scheduler.model import (
    NVIDIA,
    PERCENTAGE_UNSET,
    ContainerDevice,
    ContainerDeviceRequest,
    ContainerRequests,
    DeviceInfo,
    MigAllocation,
    MigProfile,
    PodDevices,
)
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.allocation import encode_container_list, encode_pod_devices
from vgpu_scheduler.wire.inventory import encode_node_devices_json

Obj = dict[str, Any]
Quantity = int | str  # a resource quantity: a number, or a string such as "1k" or "16Gi"

# The resource names of the default NVIDIA configuration.
GPU = "nvidia.com/gpu"
GPU_MEM = "nvidia.com/gpumem"
GPU_MEM_PCT = "nvidia.com/gpumem-percentage"
GPU_CORES = "nvidia.com/gpucores"

GIB = 1024  # MiB, the unit of devmem and gpumem


# --- pods ----------------------------------------------------------------------------------------


def pod(
    name: str = "p",
    *,
    namespace: str | None = "default",
    uid: str | None = None,
    resource_version: str | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    meta: Mapping[str, Any] | None = None,
    containers: Sequence[Obj] | None = None,
    init_containers: Sequence[Obj] | None = None,
    node_name: str | None = None,
    spec: Mapping[str, Any] | None = None,
    phase: str | None = None,
    status: Mapping[str, Any] | None = None,
    typed: bool = False,
) -> Obj:
    """A Pod dict; fields left as None are absent.

    `meta` adds further metadata fields (`deletionTimestamp`, `generateName`, ...);
    `init_containers`, `containers` and `node_name` go into `spec` and win over the same fields
    of `spec`, `phase` into `status` likewise; `typed` adds apiVersion/kind. Keys come in the
    API server's order (initContainers, containers, other spec fields; phase first), which
    matters to whatever serialises or diffs the pod.
    """
    metadata: Obj = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if uid is not None:
        metadata["uid"] = uid
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    if labels is not None:
        metadata["labels"] = dict(labels)
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    metadata.update(meta or {})
    body: Obj = {}
    if init_containers is not None:
        body["initContainers"] = list(init_containers)
    if containers is not None:
        body["containers"] = list(containers)
    for key, value in (spec or {}).items():
        body.setdefault(key, value)
    if node_name is not None:
        body["nodeName"] = node_name
    out: Obj = {"apiVersion": "v1", "kind": "Pod"} if typed else {}
    out["metadata"] = metadata
    out["spec"] = body
    if status is not None or phase is not None:
        out["status"] = {} if phase is None else {"phase": phase}
        for key, value in (status or {}).items():
            out["status"].setdefault(key, value)
    return out


def api_pod(name: str = "p", **fields: Any) -> Obj:
    """A typed Pod the API server accepts as is: one container `c` running busybox unless
    `containers` says otherwise; every other keyword as for `pod`."""
    fields.setdefault("containers", [container("c", image="busybox")])
    return pod(name, typed=True, **fields)


def gpu_pod(
    name: str = "p",
    *,
    gpus: Quantity = 1,
    mem: Quantity | None = None,
    pct: Quantity | None = None,
    cores: Quantity | None = None,
    container_name: str = "cuda",
    image: str = "cuda",
    scheduler_name: str | None = "hami-scheduler",
    **fields: Any,
) -> Obj:
    """A typed Pod with one GPU container (`gpu_limits`), for the HAMi scheduler unless
    `scheduler_name` says otherwise (None: no schedulerName); other keywords as for `pod`."""
    spec = dict(fields.pop("spec", {}))
    if scheduler_name is not None:
        spec = {"schedulerName": scheduler_name, **spec}
    ctr = container(container_name, image=image, limits=gpu_limits(gpus, mem=mem, pct=pct, cores=cores))
    return pod(name, typed=True, spec=spec, containers=[ctr], **fields)


def placed_pod(name: str, node: str, allocated: str, *, time: str = "1795000000", **fields: Any) -> Obj:
    """A running `gpu_pod` that an earlier scheduler bound to `node` and the device plugin
    admitted, labelled and annotated as HAMi leaves it; other keywords as for `gpu_pod`."""
    annotations = assigned_annotations(
        node,
        allocated,
        time=time,
        **{keys.VGPU_TO_ALLOCATE: ";", keys.BIND_PHASE: keys.BIND_PHASE_SUCCESS, keys.BIND_TIME: time},
    )
    labels = {keys.VGPU_NODE: node}
    return gpu_pod(name, labels=labels, annotations=annotations, node_name=node, phase="Running", **fields)


def assigned_annotations(node: str, allocated: str, *, time: str = "1", **more: str) -> dict[str, str]:
    """What the filter leaves on a pod it placed: vgpu-node, vgpu-time and the `-allocated` list
    (`more` adds further annotations)."""
    return {keys.VGPU_NODE: node, keys.VGPU_TIME: time, keys.VGPU_ALLOCATED: allocated, **more}


def init_statuses(*exit_codes: int | None) -> list[Obj]:
    """`status.initContainerStatuses`: one entry per init container, `terminated` with the exit
    code, or `running` for None."""
    return [
        {"name": f"init{i}", "state": {"running": {}} if code is None else {"terminated": {"exitCode": code}}}
        for i, code in enumerate(exit_codes)
    ]


# --- containers ----------------------------------------------------------------------------------


def container(
    name: str = "c",
    *,
    limits: Mapping[str, Any] | None = None,
    requests: Mapping[str, Any] | None = None,
    **fields: Any,
) -> Obj:
    """A container dict; `limits` and `requests` go into `resources` (absent when both are None)."""
    out: Obj = {"name": name, **fields}
    resources: Obj = {}
    if limits is not None:
        resources["limits"] = dict(limits)
    if requests is not None:
        resources["requests"] = dict(requests)
    if limits is not None or requests is not None:
        out["resources"] = resources
    return out


def gpu_limits(
    gpus: Quantity | None = 1,
    *,
    mem: Quantity | None = None,
    pct: Quantity | None = None,
    cores: Quantity | None = None,
) -> dict[str, str]:
    """NVIDIA resource limits as the API server returns them (strings: 2 -> "2", "1k" kept);
    None leaves a name out."""
    values = {GPU: gpus, GPU_MEM: mem, GPU_MEM_PCT: pct, GPU_CORES: cores}
    return {name: str(value) for name, value in values.items() if value is not None}


def gpu_container(
    name: str = "c",
    *,
    gpus: Quantity | None = 1,
    mem: Quantity | None = None,
    pct: Quantity | None = None,
    cores: Quantity | None = None,
    **fields: Any,
) -> Obj:
    """A container asking for NVIDIA devices (`gpu_limits`); other keywords as for `container`."""
    return container(name, limits=gpu_limits(gpus, mem=mem, pct=pct, cores=cores), **fields)


# --- nodes ---------------------------------------------------------------------------------------


def node(
    name: str = "n",
    *,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    meta: Mapping[str, Any] | None = None,
    spec: Mapping[str, Any] | None = None,
    capacity: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str] | None = None,
    typed: bool = False,
) -> Obj:
    """A Node dict; fields left as None are absent, `meta` adds further metadata fields,
    `capacity` and `allocatable` go into `status`."""
    metadata: Obj = {"name": name}
    if labels is not None:
        metadata["labels"] = dict(labels)
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    metadata.update(meta or {})
    out: Obj = {"apiVersion": "v1", "kind": "Node"} if typed else {}
    out["metadata"] = metadata
    if spec is not None:
        out["spec"] = dict(spec)
    status: Obj = {}
    if capacity is not None:
        status["capacity"] = dict(capacity)
    if allocatable is not None:
        status["allocatable"] = dict(allocatable)
    if status:
        out["status"] = status
    return out


def gpu_uuid(node: str, index: int) -> str:
    """The UUID `gpu_node` gives device `index` of `node`."""
    return f"GPU-{node}-{index}"


def gpu_node(
    name: str,
    *,
    gpus: int = 2,
    count: int = 10,
    devmem: int = 24 * GIB,
    devcore: int = 100,
    type: str = "NVIDIA-A10",
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str] | None = None,
) -> Obj:
    """A typed Node as a kubelet and HAMi's device plugin leave it: the hostname label (merged
    with `labels`), `gpus` healthy devices (`gpu_uuid`) in the JSON register annotation, no
    handshake; `allocatable` defaults to 16 cpus, 110 pods and `gpus * count` nvidia.com/gpu."""
    devices = [
        device(gpu_uuid(name, i), index=i, count=count, devmem=devmem, devcore=devcore, type=type)
        for i in range(gpus)
    ]
    if allocatable is None:
        allocatable = {"cpu": "16", GPU: str(gpus * count), "pods": "110"}
    return node(
        name,
        typed=True,
        labels={"kubernetes.io/hostname": name, **(labels or {})},
        annotations={keys.NODE_NVIDIA_REGISTER: inventory(devices), **(annotations or {})},
        allocatable=allocatable,
    )


# --- devices and inventories ---------------------------------------------------------------------


def device(
    uuid: str,
    *,
    index: int = 0,
    count: int = 10,
    devmem: int = 24576,
    devcore: int = 100,
    type: str = "NVIDIA-A100",
    numa: int = 0,
    health: bool = True,
    mode: str = "hami-core",
    mig_profiles: Sequence[MigProfile] = (),
    pair_scores: Mapping[str, int] | None = None,
) -> DeviceInfo:
    """One advertised device (healthy hami-core, 10 slots, 24 GiB, 100 cores unless told otherwise);
    `pair_scores` are its link scores to other devices (`hami.io/node-nvidia-score`)."""
    return DeviceInfo(
        id=uuid,
        index=index,
        count=count,
        devmem=devmem,
        devcore=devcore,
        type=type,
        numa=numa,
        health=health,
        mode=mode,
        mig_profiles=tuple(mig_profiles),
        pair_scores=dict(pair_scores or {}),
    )


def inventory(devices: Iterable[DeviceInfo]) -> str:
    """The `hami.io/node-nvidia-register` JSON for `devices`."""
    return encode_node_devices_json(devices)


# --- requests ------------------------------------------------------------------------------------


def device_request(
    nums: int = 1, *, mem: int = 0, pct: int = PERCENTAGE_UNSET, cores: int = 0, type: str = NVIDIA
) -> ContainerDeviceRequest:
    """What one container asks of one vendor (memory in MiB, `pct` unset unless given)."""
    return ContainerDeviceRequest(nums=nums, type=type, memreq=mem, mem_percentage_req=pct, coresreq=cores)


def container_requests(
    nums: int = 1, *, mem: int = 0, pct: int = PERCENTAGE_UNSET, cores: int = 0, type: str = NVIDIA
) -> ContainerRequests:
    """One container's requests: vendor `type` -> `device_request`."""
    return {type: device_request(nums, mem=mem, pct=pct, cores=cores, type=type)}


# --- allocations ---------------------------------------------------------------------------------


def grant(
    uuid: str, *, usedmem: int = 1000, usedcores: int = 10, type: str = "NVIDIA", idx: int = 0, slots: int = 0
) -> ContainerDevice:
    """One device granted to one container (`slots` 0 counts as one slot)."""
    return ContainerDevice(uuid, type, usedmem, usedcores, idx, slots)


def pod_devices(*containers: Sequence[ContainerDevice], vendor: str = NVIDIA) -> PodDevices:
    """The decoded allocation of one vendor: one device list per container, in order."""
    return {vendor: [list(c) for c in containers]}


def pod_allocation(
    uid: str,
    node: str,
    *containers: Sequence[ContainerDevice],
    namespace: str = "ns",
    name: str | None = None,
    mig: Sequence[MigAllocation] = (),
    vendor: str = NVIDIA,
) -> PodAllocation:
    """A pod's usage on one node as the ledger holds it (`name` defaults to the uid)."""
    devices = pod_devices(*containers, vendor=vendor)
    return PodAllocation(uid, namespace, uid if name is None else name, node, devices, tuple(mig))


def allocation(*containers: Sequence[ContainerDevice]) -> str:
    """The encoded `hami.io/vgpu-devices-allocated` value: one entry per container, in order."""
    return encode_container_list([list(c) for c in containers])


def allocation_annotations(*containers: Sequence[ContainerDevice], vendor: str = NVIDIA) -> dict[str, str]:
    """Both `-to-allocate` and `-allocated` annotations for `containers` of one vendor."""
    return encode_pod_devices(pod_devices(*containers, vendor=vendor))


# --- quotas --------------------------------------------------------------------------------------


def quota(hard: Mapping[str, Any], *, name: str = "q", namespace: str = "team") -> Obj:
    """A ResourceQuota dict with `spec.hard`."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": dict(hard)},
    }


def gpu_quota(
    *, mem: int | None = None, cores: int | None = None, name: str = "q", namespace: str = "team"
) -> Obj:
    """A ResourceQuota on the NVIDIA memory and core limits; None leaves a limit out."""
    hard = {f"limits.{GPU_MEM}": mem, f"limits.{GPU_CORES}": cores}
    return quota({k: str(v) for k, v in hard.items() if v is not None}, name=name, namespace=namespace)
