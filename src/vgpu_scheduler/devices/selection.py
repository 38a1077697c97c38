"""A pod's device selection annotations for one vendor (HAMi's CheckType / CheckUUID inputs):
use/nouse type and uuid lists, parsed once per pod (`Vendor.pod_filters`) and applied per device.
"""

from __future__ import annotations

from dataclasses import dataclass

from vgpu_scheduler.model import DeviceInfo


def type_list(value: str | None) -> tuple[str, ...] | None:
    """use/nouse type members upper-cased, empties dropped; None = no constraint (absent or blank)."""
    if value is None or not value.strip():
        return None
    return tuple(m.strip().upper() for m in value.split(",") if m.strip())


def uuid_set(value: str | None) -> frozenset[str] | None:
    """use/nouse uuid members trimmed; None = no constraint (absent or blank)."""
    if value is None or not value.strip():
        return None
    return frozenset(m.strip() for m in value.split(","))


@dataclass(slots=True, frozen=True)
class SelectionFilters:
    """A pod's device selection annotations for one vendor; None fields constrain nothing."""

    use_types: tuple[str, ...] | None = None
    nouse_types: tuple[str, ...] | None = None
    use_uuids: frozenset[str] | None = None
    nouse_uuids: frozenset[str] | None = None
    mode: str | None = None
    """A device passes only if its `mode` is a substring of this (NVIDIA `nvidia.com/vgpu-mode`)."""

    @property
    def types_active(self) -> bool:
        return self.use_types is not None or self.nouse_types is not None or self.mode is not None

    @property
    def uuids_active(self) -> bool:
        return self.use_uuids is not None or self.nouse_uuids is not None

    def type_ok(self, dev: DeviceInfo) -> bool:
        """Type filters (case-insensitive substring) and the mode filter (substring)."""
        if self.use_types is not None or self.nouse_types is not None:
            model = dev.type.upper()
            if self.use_types is not None and not any(t in model for t in self.use_types):
                return False
            if self.nouse_types is not None and any(t in model for t in self.nouse_types):
                return False
        return self.mode is None or dev.mode in self.mode

    def uuid_ok(self, uuid: str) -> bool:
        if self.use_uuids is not None and uuid not in self.use_uuids:
            return False
        return self.nouse_uuids is None or uuid not in self.nouse_uuids


NO_FILTERS = SelectionFilters()
