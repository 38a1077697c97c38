"""The data DRS adds to the shared shapes (HAMi keeps it in `CustomInfo` maps).

Subclasses of the model's dataclasses, so the engine carries them through untouched: a DRS device
knows its minor, index text and the node's profiles; a DRS request knows its container's name
(HAMi reads it from the pod in PatchAnnotations); a DRS allocation entry knows the chosen profile.
Entries decoded back from pod annotations are plain `ContainerDevice`s, as in HAMi where the
encoding drops `CustomInfo`.
"""

from __future__ import annotations

from dataclasses import dataclass

from vgpu_scheduler.model import ContainerDevice, ContainerDeviceRequest, DeviceInfo


@dataclass(slots=True, eq=True)
class DrsDevice(DeviceInfo):
    """One GCU of `enflame.com/gcu-drs-capacity`: `count` is its slice capacity."""

    minor: str = ""
    index_text: str = ""
    """The index as written in CustomInfo (`strconv.Itoa` of the parsed index)."""
    profiles: tuple[tuple[str, str], ...] = ()
    """(profile name, profile id), as the annotation lists them (every device has the node's)."""
    max_slice: int = 0
    """The largest slice size among the node's profile names."""


@dataclass(slots=True, frozen=True)
class DrsRequest(ContainerDeviceRequest):
    container: str = ""
    """Name of the requesting container (the key of `assigned-containers`)."""


@dataclass(slots=True, frozen=True)
class DrsEntry(ContainerDevice):
    """An allocation entry with the chosen DRS profile."""

    container: str = ""
    profile_name: str = ""
    profile_id: str = ""
    minor: str = ""
    index_text: str = ""
    drs_slice: int = 0
    request_memory_gb: int = 0
    request_core_percent: int = 0
