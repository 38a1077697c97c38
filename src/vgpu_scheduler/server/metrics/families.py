"""The metric families of §8.4 (and the pre-2.8 names of --legacy-metrics) built from a snapshot's
rows: each series carries the constant label `zone="vGPU"`, duplicated series are emitted once."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

from vgpu_scheduler.server.metrics.snapshot import ContainerRow, DeviceRow, MetricsSnapshot, MigRow, QuotaRow

ZONE = "vGPU"
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Spec:
    name: str
    help: str
    labels: tuple[str, ...]
    """Declared order (§8.4); the text output sorts them by name, as client_golang does."""


_DEV = ("node", "device_uuid", "device_index", "device_type")
_LEGACY_DEV = ("nodeid", "deviceuuid", "deviceidx", "devicetype")
_CTR = ("namespace", "node", "pod", "container_index", "device_uuid")
_LEGACY_CTR = ("podnamespace", "nodename", "podname", "containeridx", "deviceuuid")

MEMORY_LIMIT = _Spec("hami_gpu_memory_limit_bytes", "Device memory limit for a certain GPU", _DEV)
CORE_LIMIT = _Spec("hami_gpu_core_limit_ratio", "Device core limit for a certain GPU", _DEV)
MEMORY_ALLOCATED = _Spec(
    "hami_gpu_memory_allocated_bytes",
    "Device memory allocated for a certain GPU",
    ("node", "device_uuid", "device_index", "device_cores", "device_type"),
)
SHARED_COUNT = _Spec("hami_gpu_shared_count", "Number of containers sharing this GPU", _DEV)
CORE_ALLOCATED = _Spec("hami_gpu_core_allocated_ratio", "Device core allocated for a certain GPU", _DEV)
OVERVIEW = _Spec(
    "hami_node_gpu_overview",
    "GPU overview on a certain node",
    ("node", "device_uuid", "device_index", "device_cores", "device_memory_limit", "device_type"),
)
MEMORY_RATIO = _Spec(
    "hami_node_gpu_memory_allocated_ratio", "GPU memory allocated ratio on a certain GPU (0-1)", _DEV
)
MIG_INSTANCE = _Spec(
    "hami_node_gpu_mig_instance_info",
    "Realized MIG instance identity and scheduler placement",
    (
        "node",
        "device_uuid",
        "device_index",
        "mig_uuid",
        "profile",
        "gpu_instance_id",
        "compute_instance_id",
        "placement_start",
        "placement_size",
    ),
)
QUOTA_USED = _Spec(
    "hami_resource_quota_used",
    "resourcequota usage for a certain device",
    ("namespace", "quota_name", "limit"),
)
QUOTA_LIMIT = _Spec(
    "hami_resource_quota_limit", "resourcequota limit for a certain device", ("namespace", "quota_name")
)
VGPU_MEMORY = _Spec("hami_vgpu_memory_allocated_bytes", "vGPU memory allocated from a container", _CTR)
VGPU_CORE = _Spec("hami_vgpu_core_allocated_ratio", "vGPU core allocated from a container", _CTR)

LEGACY_MEMORY_LIMIT = _Spec("GPUDeviceMemoryLimit", "Device memory limit for a certain GPU", _LEGACY_DEV)
LEGACY_CORE_LIMIT = _Spec("GPUDeviceCoreLimit", "Device memory core limit for a certain GPU", _LEGACY_DEV)
LEGACY_MEMORY_ALLOCATED = _Spec(
    "GPUDeviceMemoryAllocated",
    "Device memory allocated for a certain GPU",
    ("nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype"),
)
LEGACY_SHARED = _Spec("GPUDeviceSharedNum", "Number of containers sharing this GPU", _LEGACY_DEV)
LEGACY_CORE_ALLOCATED = _Spec(
    "GPUDeviceCoreAllocated", "Device core allocated for a certain GPU", _LEGACY_DEV
)
LEGACY_OVERVIEW = _Spec(
    "nodeGPUOverview",
    "GPU overview on a certain node",
    ("nodeid", "deviceuuid", "deviceidx", "devicecores", "devicememorylimit", "devicetype"),
)
LEGACY_MEMORY_PERCENTAGE = _Spec(
    "nodeGPUMemoryPercentage",
    "GPU Memory Allocated Percentage on a certain GPU",
    ("nodeid", "deviceuuid", "deviceidx"),
)
LEGACY_MIG = _Spec(
    "nodeGPUMigInstance",
    "GPU Sharing mode. 0 for hami-core, 1 for mig, 2 for mps",
    ("nodeid", "deviceuuid", "deviceidx", "migname"),
)
LEGACY_QUOTA_USED = _Spec(
    "QuotaUsed", "resourcequota usage for a certain device", ("quotanamespace", "quotaName", "limit")
)
LEGACY_VGPU_MEMORY = _Spec("vGPUMemoryAllocated", "vGPU memory allocated from a container", _LEGACY_CTR)
LEGACY_VGPU_CORE = _Spec("vGPUCoreAllocated", "vGPU core allocated from a container", _LEGACY_CTR)

BUILD_INFO = "hami_build_info"
BUILD_INFO_HELP = "hami build metadata exposed as labels with a constant value of 1."


def normalized_cores(allocated: int, total: int) -> float:
    """AMD core ratio: allocated cores as a ceil'ed percentage of the device's core capacity."""
    if total <= 0:
        return 0.0
    return float(math.ceil(allocated / total * 100))


class _Family:
    """Samples of one family, deduplicated and sorted on output."""

    def __init__(self, spec: _Spec, zone: bool) -> None:
        self.spec = spec
        self.zone = zone
        self.rows: dict[tuple[str, ...], float] = {}

    def add(self, values: Sequence[str], value: float) -> None:
        self.rows.setdefault(tuple(values), value)  # first wins, like a linear search would

    def metric(self) -> Metric:
        labels = [*self.spec.labels, "zone"] if self.zone else list(self.spec.labels)
        family = GaugeMetricFamily(self.spec.name, self.spec.help, labels=labels)
        # client_golang orders a family's series by their label values, labels taken by name.
        by_name = operator.itemgetter(*sorted(range(len(self.spec.labels)), key=self.spec.labels.__getitem__))
        name, samples = self.spec.name, family.samples
        for values in sorted(self.rows, key=by_name):  # "zone" is constant: it cannot reorder
            label_map = dict(zip(labels, (*values, ZONE) if self.zone else values, strict=True))
            samples.append(Sample(name, label_map, self.rows[values]))
        return family


def families(snapshot: MetricsSnapshot, legacy: bool = False) -> list[Metric]:
    """Every §8.4 family for `snapshot` (legacy names too when asked), sorted by name."""
    fams: dict[str, _Family] = {}

    def fam(spec: _Spec) -> _Family:
        f = fams.get(spec.name)
        if f is None:
            f = fams[spec.name] = _Family(spec, zone=True)
        return f

    for d in snapshot.devices:
        _device_series(fam, d, legacy)
    for m in snapshot.migs:
        _mig_series(fam, m, legacy)
    for q in snapshot.quotas:
        _quota_series(fam, q, legacy)
    for c in snapshot.containers:
        _container_series(fam, c, legacy)
    return [fams[name].metric() for name in sorted(fams)]


_FamilyOf = Callable[[_Spec], _Family]
"""The family of a spec, created on first use."""


def _device_series(fam: _FamilyOf, d: DeviceRow, legacy: bool) -> None:
    idx, cores, memlimit = str(d.index), str(d.devcore), str(d.devmem)
    dev = (d.node, d.uuid, idx, d.type)
    fam(MEMORY_LIMIT).add(dev, float(d.devmem * MIB))
    amd_cores = d.amd and d.devcore > 0  # HAMi normalizes AMD only with a known capacity
    fam(CORE_LIMIT).add(dev, 100.0 if amd_cores else float(d.devcore))
    fam(MEMORY_ALLOCATED).add((d.node, d.uuid, idx, cores, d.type), float(d.usedmem * MIB))
    fam(SHARED_COUNT).add(dev, float(d.used))
    fam(CORE_ALLOCATED).add(
        dev, normalized_cores(d.usedcores, d.devcore) if amd_cores else float(d.usedcores)
    )
    fam(OVERVIEW).add((d.node, d.uuid, idx, cores, memlimit, d.type), float(d.usedmem * MIB))
    if d.devmem > 0:
        fam(MEMORY_RATIO).add(dev, d.usedmem / d.devmem)
    if legacy:
        fam(LEGACY_MEMORY_LIMIT).add(dev, float(d.devmem * MIB))
        fam(LEGACY_CORE_LIMIT).add(dev, float(d.devcore))
        fam(LEGACY_MEMORY_ALLOCATED).add((d.node, d.uuid, idx, cores, d.type), float(d.usedmem * MIB))
        fam(LEGACY_SHARED).add(dev, float(d.used))
        fam(LEGACY_CORE_ALLOCATED).add(dev, float(d.usedcores))
        fam(LEGACY_OVERVIEW).add((d.node, d.uuid, idx, cores, memlimit, d.type), float(d.usedmem * MIB))
        if d.devmem > 0:
            fam(LEGACY_MEMORY_PERCENTAGE).add((d.node, d.uuid, idx), d.usedmem / d.devmem)


def _mig_series(fam: _FamilyOf, m: MigRow, legacy: bool) -> None:
    fam(MIG_INSTANCE).add(
        (
            m.node,
            m.uuid,
            str(m.index),
            m.mig_uuid,
            m.profile,
            str(m.gpu_instance_id),
            str(m.compute_instance_id),
            str(m.placement_start),
            str(m.placement_size),
        ),
        1.0,
    )
    if legacy:
        fam(LEGACY_MIG).add((m.node, m.uuid, str(m.index), f"{m.profile}-{m.gpu_instance_id}"), 1.0)


def _quota_series(fam: _FamilyOf, q: QuotaRow, legacy: bool) -> None:
    limit = q.limit if q.limit is not None else 0
    fam(QUOTA_USED).add((q.namespace, q.resource, str(limit)), float(q.used))
    if q.limit is not None:
        fam(QUOTA_LIMIT).add((q.namespace, q.resource), float(q.limit))
    if legacy:
        fam(LEGACY_QUOTA_USED).add((q.namespace, q.resource, str(limit)), float(q.used))


def _container_series(fam: _FamilyOf, c: ContainerRow, legacy: bool) -> None:
    ctr = (c.namespace, c.node, c.pod, str(c.container_index), c.uuid)
    fam(VGPU_MEMORY).add(ctr, float(c.usedmem * MIB))
    amd_cores = c.amd and c.devcore > 0
    fam(VGPU_CORE).add(ctr, normalized_cores(c.usedcores, c.devcore) if amd_cores else float(c.usedcores))
    if legacy:
        fam(LEGACY_VGPU_MEMORY).add(ctr, float(c.usedmem * MIB))
        fam(LEGACY_VGPU_CORE).add(ctr, float(c.usedcores))
