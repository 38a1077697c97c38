"""What a fit sees of one node: its registered devices and their current usage.

The ledger owns the live NodeViews; a filter works on copies (usage is the only mutable part, so
`copy()` duplicates only that).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from vgpu_scheduler.model import DeviceInfo, MigPlacement


@dataclass(slots=True)
class DeviceUsage:
    used: int = 0
    usedmem: int = 0
    usedcores: int = 0
    # MIG placements already taken on this device, as (profile name, placement).
    mig_taken: list[tuple[str, MigPlacement]] = field(default_factory=list)
    # Set when a MIG allocation names a hami-core device (or a MIG device is used without a
    # reservation): HAMi then treats the device as unhealthy (§5.2).
    mig_conflict: bool = False

    def copy(self) -> DeviceUsage:
        return DeviceUsage(self.used, self.usedmem, self.usedcores, list(self.mig_taken), self.mig_conflict)


@dataclass(slots=True)
class NodeView:
    name: str
    devices: list[DeviceInfo]
    """Devices of every registered vendor, in inventory (annotation) order."""
    usage: list[DeviceUsage]
    """Aligned with `devices`."""
    cordoned: frozenset[str] = frozenset()
    """UUIDs from hami.io/device-cordon."""
    annotations: Mapping[str, str] = field(default_factory=dict)

    def copy(self) -> NodeView:
        return NodeView(
            self.name, self.devices, [u.copy() for u in self.usage], self.cordoned, self.annotations
        )


class QuotaCheck(Protocol):
    """ResourceQuota test used inside fit (§5.8 FitQuota)."""

    def fits(self, namespace: str, vendor: str, memory: int, cores: int) -> bool: ...
