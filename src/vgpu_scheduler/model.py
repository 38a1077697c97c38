"""Plain data shared by the codecs, the engine and the cluster layer.

Field names follow HAMi's Go structs (lower-cased) so docs/compatibility.md reads directly onto
the code. Memory is MiB, cores are percent of one device.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NVIDIA = "NVIDIA"
"""Vendor key of the NVIDIA backend; also the TYPE field of allocation entries."""

PERCENTAGE_UNSET = 101
"""Sentinel for "no memory percentage requested" (§5.1)."""

MIG_MODE = "mig"
"""Device mode of a GPU split into MIG instances: one container may take several instances of one
device, placements are tracked per device (§5.3 "MIG devices")."""


@dataclass(slots=True, frozen=True)
class MigPlacement:
    start: int
    size: int

    def overlaps(self, other: MigPlacement) -> bool:
        return self.start < other.start + other.size and other.start < self.start + self.size


@dataclass(slots=True, frozen=True)
class MigProfile:
    name: str
    memory_mb: int
    core: int
    slice_count: int
    placements: tuple[MigPlacement, ...] = ()


@dataclass(slots=True)
class DeviceInfo:
    """One physical device as advertised by a device plugin's register annotation (§3.2)."""

    id: str
    index: int = 0
    count: int = 0
    devmem: int = 0
    devcore: int = 0
    type: str = ""
    numa: int = 0
    mode: str = "hami-core"
    health: bool = False
    mig_profiles: tuple[MigProfile, ...] = ()
    device_vendor: str = ""
    # Pair scores from hami.io/node-nvidia-score: other device id -> link score (higher is better).
    pair_scores: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class DeviceUsage:
    """What is taken of one device (§5.2); the engine keeps one per device, aligned with the
    node's inventory, and a fit works on copies."""

    used: int = 0
    usedmem: int = 0
    usedcores: int = 0
    # MIG placements already taken on this device, as (profile name, placement).
    mig_taken: list[tuple[str, MigPlacement]] = field(default_factory=list)
    # Set when a MIG allocation names a hami-core device (or a MIG device is used without a
    # reservation): HAMi then treats the device as unhealthy (§5.2).
    mig_conflict: bool = False
    # Annotations of the pods counted on this device, one per pod (HAMi `DeviceUsage.PodInfos`);
    # read by vendors whose fit depends on who else runs there (Metax sGPU app classes).
    pod_infos: tuple[Mapping[str, str], ...] = ()
    # A vendor's per-filter device state (HAMi `DeviceUsage.CustomInfo`, e.g. a QoS policy that
    # AddResourceUsage changes for the pod's next containers); None = nothing changed yet.
    custom: dict[str, Any] | None = None

    def copy(self) -> DeviceUsage:
        return DeviceUsage(
            self.used, self.usedmem, self.usedcores, list(self.mig_taken), self.mig_conflict, self.pod_infos,
            None if self.custom is None else dict(self.custom),
        )


@dataclass(slots=True, frozen=True)
class ContainerDevice:
    """One device granted to one container (an entry of the §4.5 allocation list)."""

    uuid: str
    type: str
    usedmem: int
    usedcores: int
    idx: int = 0
    # How many vGPU slots this entry occupies after init/app collapse (§5.2); 0 is counted as 1.
    slots: int = 0


ContainerDevices = list[ContainerDevice]
PodSingleDevice = list[ContainerDevices]
"""Per container (init containers first, then app containers), the devices of one vendor."""
PodDevices = dict[str, PodSingleDevice]
"""Vendor key -> per-container devices."""


@dataclass(slots=True, frozen=True)
class ContainerDeviceRequest:
    """What one container asks of one vendor (§5.1)."""

    nums: int
    type: str
    memreq: int
    mem_percentage_req: int = PERCENTAGE_UNSET
    coresreq: int = 0


ContainerRequests = dict[str, ContainerDeviceRequest]
"""Vendor key -> request, for one container."""


@dataclass(slots=True, frozen=True)
class MigAllocation:
    """One element of hami.io/vgpu-mig-allocations (§4.6)."""

    container_index: int
    device_index: int
    gpu_uuid: str
    profile: str
    placement: MigPlacement
    mig_uuid: str = ""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
