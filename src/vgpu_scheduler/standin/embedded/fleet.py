"""Deterministic GPU fleets: Node objects shaped like what the API server returns for a node whose
HAMi device plugin has registered (§3.1/§3.2), with no randomness and no wall clock.

`demo_fleet()` is the built-in 16-node demo (8 × A100-80GB nodes, 8 × V100-32GB nodes, 8 GPUs each);
`fleet(n, g)` scales the same shape for benchmarks (e.g. 1,000 × 8).
"""

from __future__ import annotations

import datetime as _dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.model import DeviceInfo
from vgpu_scheduler.standin.embedded.runtime import DEFAULT_EPOCH
from vgpu_scheduler.wire.inventory import encode_node_devices_json
from vgpu_scheduler.wire.keys import NODE_HANDSHAKE, NODE_NVIDIA_REGISTER
from vgpu_scheduler.wire.quantity import quantity_units

# Fixed namespace so node/GPU UUIDs are the same on every run and every machine.
_UUID_NAMESPACE = uuid.UUID("7d2f8a1e-3c4b-5d6e-9f10-a1b2c3d4e5f6")

KUBELET_VERSION = "v1.36.2"


@dataclass(slots=True, frozen=True)
class GpuModel:
    """One node flavour: the GPU model its device plugin reports and the host it sits in."""

    type: str
    """Model as the HAMi device plugin writes it (always starting with `NVIDIA`)."""
    devmem: int
    """MiB per GPU."""
    product_label: str
    """Value of the GPU-feature-discovery label `nvidia.com/gpu.product`."""
    cpu: str = "96"
    memory: str = "768Gi"


A100_80GB = GpuModel("NVIDIA A100-SXM4-80GB", 81920, "NVIDIA-A100-SXM4-80GB", cpu="128", memory="1Ti")
V100_32GB = GpuModel("NVIDIA-Tesla V100-PCIE-32GB", 32768, "Tesla-V100-PCIE-32GB", cpu="64", memory="512Gi")
DEMO_MODELS: tuple[GpuModel, ...] = (A100_80GB, V100_32GB)

# What kubelet keeps back from capacity (system-reserved + eviction threshold), so allocatable looks real.
_RESERVED_CPU_MILLI = 500
_RESERVED_MEMORY_KI = 8 * 1024 * 1024


def gpu_uuid(node_name: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node_name}/gpu/{index}')}"


def node_uid(node_name: str) -> str:
    return str(uuid.uuid5(_UUID_NAMESPACE, f"node/{node_name}"))


def node_name(prefix: str, index: int, n_nodes: int) -> str:
    width = max(2, len(str(max(n_nodes - 1, 0))))
    return f"{prefix}-{index:0{width}d}"


def node_devices(
    name: str, gpus_per_node: int, model: GpuModel, *, split_count: int = 10, devcore: int = 100
) -> list[DeviceInfo]:
    """The inventory of one node: GPUs 0..g/2-1 on NUMA node 0, the rest on NUMA node 1."""
    return [
        DeviceInfo(
            id=gpu_uuid(name, i),
            index=i,
            count=split_count,
            devmem=model.devmem,
            devcore=devcore,
            type=model.type,
            numa=(i * 2) // gpus_per_node,
            mode="hami-core",
            health=True,
        )
        for i in range(gpus_per_node)
    ]


def _node(
    index: int,
    name: str,
    *,
    model: GpuModel,
    devices: list[DeviceInfo],
    split_count: int,
    epoch: int,
) -> dict[str, Any]:
    created = _dt.datetime.fromtimestamp(epoch, tz=_dt.UTC)
    rfc3339 = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    capacity, allocatable = _resources(model, gpu_slots=split_count * len(devices))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "annotations": {
                NODE_HANDSHAKE: f"Requesting_{created.strftime('%Y-%m-%d %H:%M:%S')}",
                NODE_NVIDIA_REGISTER: encode_node_devices_json(devices),
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "creationTimestamp": rfc3339,
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "gpu": "on",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "nvidia.com/gpu.count": str(len(devices)),
                "nvidia.com/gpu.product": model.product_label,
            },
            "name": name,
            "resourceVersion": str(1000 + index),
            "uid": node_uid(name),
        },
        "spec": {"podCIDR": f"10.244.{index % 256}.0/24", "podCIDRs": [f"10.244.{index % 256}.0/24"]},
        "status": {
            "addresses": [
                {"address": f"10.0.{index // 250}.{index % 250 + 1}", "type": "InternalIP"},
                {"address": name, "type": "Hostname"},
            ],
            "allocatable": allocatable,
            "capacity": capacity,
            "conditions": _conditions(rfc3339),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": _node_info(name),
        },
    }


def _resources(model: GpuModel, *, gpu_slots: int) -> tuple[dict[str, str], dict[str, str]]:
    """(capacity, allocatable) as a kubelet reports them, with the device plugin's GPU slots."""
    memory_ki = quantity_units("memory", model.memory) // 1024
    capacity = {
        "cpu": model.cpu,
        "ephemeral-storage": "1000Gi",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{memory_ki}Ki",
        "nvidia.com/gpu": str(gpu_slots),
        "pods": "110",
    }
    allocatable = dict(capacity)
    allocatable["cpu"] = f"{quantity_units('cpu', model.cpu) - _RESERVED_CPU_MILLI}m"
    allocatable["ephemeral-storage"] = "900Gi"
    allocatable["memory"] = f"{memory_ki - _RESERVED_MEMORY_KI}Ki"
    return capacity, allocatable


def _conditions(rfc3339: str) -> list[dict[str, str]]:
    """A healthy kubelet's four node conditions, all stamped `rfc3339`."""
    condition = {"lastHeartbeatTime": rfc3339, "lastTransitionTime": rfc3339, "status": "True"}
    return [
        {**condition, "message": "kubelet has sufficient memory available",
         "reason": "KubeletHasSufficientMemory", "status": "False", "type": "MemoryPressure"},
        {**condition, "message": "kubelet has no disk pressure",
         "reason": "KubeletHasNoDiskPressure", "status": "False", "type": "DiskPressure"},
        {**condition, "message": "kubelet has sufficient PID available",
         "reason": "KubeletHasSufficientPID", "status": "False", "type": "PIDPressure"},
        {**condition, "message": "kubelet is posting ready status",
         "reason": "KubeletReady", "type": "Ready"},
    ]


def _node_info(name: str) -> dict[str, str]:
    """nodeInfo with ids derived from the node's name (stable across runs)."""
    machine = uuid.uuid5(_UUID_NAMESPACE, f"machine/{name}")
    return {
        "architecture": "amd64",
        "bootID": str(uuid.uuid5(_UUID_NAMESPACE, f"boot/{name}")),
        "containerRuntimeVersion": "containerd://2.1.4",
        "kernelVersion": "6.8.0-60-generic",
        "kubeProxyVersion": "",
        "kubeletVersion": KUBELET_VERSION,
        "machineID": machine.hex,
        "operatingSystem": "linux",
        "osImage": "Ubuntu 24.04.2 LTS",
        "systemUUID": str(machine),
    }


def fleet(
    n_nodes: int,
    gpus_per_node: int = 8,
    *,
    models: Sequence[GpuModel] = DEMO_MODELS,
    split_count: int = 10,
    devcore: int = 100,
    name_prefix: str = "gpu-node",
    epoch: int = DEFAULT_EPOCH,
) -> list[dict[str, Any]]:
    """`n_nodes` Node objects; models are assigned in contiguous blocks (first half A100, second half
    V100 with the default models), names `<prefix>-00`, `<prefix>-01`, ... sort in index order."""
    if n_nodes < 0:
        raise ValueError(f"n_nodes must be >= 0, got {n_nodes}")
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be >= 1, got {gpus_per_node}")
    if not models:
        raise ValueError("models must not be empty")
    if split_count < 1 or devcore < 1:
        raise ValueError(f"split_count and devcore must be >= 1, got {split_count} and {devcore}")
    nodes = []
    for i in range(n_nodes):
        model = models[i * len(models) // n_nodes]
        name = node_name(name_prefix, i, n_nodes)
        devices = node_devices(name, gpus_per_node, model, split_count=split_count, devcore=devcore)
        nodes.append(_node(i, name, model=model, devices=devices, split_count=split_count, epoch=epoch))
    return nodes


DEMO_NODES = 16
DEMO_GPUS_PER_NODE = 8


def demo_fleet() -> list[dict[str, Any]]:
    """16 nodes × 8 GPUs: `gpu-node-00`..`07` A100-SXM4-80GB, `gpu-node-08`..`15` V100-PCIE-32GB."""
    return fleet(DEMO_NODES, DEMO_GPUS_PER_NODE)


def demo_gpu_uuids() -> list[str]:
    """Every GPU UUID of the demo fleet, node by node (used by the demo workload's uuid filters)."""
    return [
        gpu_uuid(node_name("gpu-node", n, DEMO_NODES), i)
        for n in range(DEMO_NODES)
        for i in range(DEMO_GPUS_PER_NODE)
    ]
