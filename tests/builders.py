"""Shared builders for test objects: pods, nodes, devices, inventories, allocations, quotas.

Every builder takes keyword arguments with plain defaults and leaves out what it is not given,
so a test that needs an exact shape (no `annotations` key, no `status`) still gets it.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vgpu_scheduler.model import NVIDIA, ContainerDevice, DeviceInfo
from vgpu_scheduler.wire.allocation import encode_container_list, encode_pod_devices
from vgpu_scheduler.wire.inventory import encode_node_devices_json

Obj = dict[str, Any]


def pod(
    name: str = "p",
    *,
    namespace: str | None = "default",
    uid: str | None = None,
    resource_version: str | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    containers: Sequence[Obj] | None = None,
    init_containers: Sequence[Obj] | None = None,
    spec: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
    typed: bool = False,
) -> Obj:
    """A Pod dict. `containers`/`init_containers` go into `spec` (merged over `spec`), `typed`
    adds apiVersion/kind; fields left as None are absent."""
    meta: Obj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if uid is not None:
        meta["uid"] = uid
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    body: Obj = dict(spec or {})
    if containers is not None:
        body["containers"] = list(containers)
    if init_containers is not None:
        body["initContainers"] = list(init_containers)
    out: Obj = {"apiVersion": "v1", "kind": "Pod"} if typed else {}
    out["metadata"] = meta
    out["spec"] = body
    if status is not None:
        out["status"] = dict(status)
    return out


def container(name: str = "c", *, limits: Mapping[str, Any] | None = None, **fields: Any) -> Obj:
    """A container dict; `limits` goes into `resources.limits`."""
    out: Obj = {"name": name, **fields}
    if limits is not None:
        out["resources"] = {"limits": dict(limits)}
    return out


def node(
    name: str = "n",
    *,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
    allocatable: Mapping[str, str] | None = None,
    typed: bool = False,
) -> Obj:
    """A Node dict; fields left as None are absent."""
    meta: Obj = {"name": name}
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    out: Obj = {"apiVersion": "v1", "kind": "Node"} if typed else {}
    out["metadata"] = meta
    if spec is not None:
        out["spec"] = dict(spec)
    if allocatable is not None:
        out["status"] = {"allocatable": dict(allocatable)}
    return out


def quota(hard: Mapping[str, Any], *, name: str = "q", namespace: str = "team") -> Obj:
    """A ResourceQuota dict with `spec.hard`."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": dict(hard)},
    }


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
) -> DeviceInfo:
    """One advertised device (healthy, 10 slots, 24 GiB, 100 cores unless told otherwise)."""
    return DeviceInfo(
        id=uuid, index=index, count=count, devmem=devmem, devcore=devcore, type=type, numa=numa, health=health
    )


def inventory(devices: Iterable[DeviceInfo]) -> str:
    """The `hami.io/node-nvidia-register` JSON for `devices`."""
    return encode_node_devices_json(devices)


def grant(uuid: str, *, usedmem: int = 1000, usedcores: int = 10, type: str = "NVIDIA") -> ContainerDevice:
    """One device granted to one container."""
    return ContainerDevice(uuid, type, usedmem, usedcores)


def allocation(*containers: Sequence[ContainerDevice]) -> str:
    """The encoded `hami.io/vgpu-devices-allocated` value: one entry per container, in order."""
    return encode_container_list([list(c) for c in containers])


def allocation_annotations(*containers: Sequence[ContainerDevice], vendor: str = NVIDIA) -> dict[str, str]:
    """Both `-to-allocate` and `-allocated` annotations for `containers` of one vendor."""
    return encode_pod_devices({vendor: [list(c) for c in containers]})
