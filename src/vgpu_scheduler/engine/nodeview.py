"""What a fit sees of one node: its registered devices and their current usage.

The ledger owns the live NodeViews; a filter works on copies (usage is the only mutable part, so
`copy()` duplicates only that).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from vgpu_scheduler.model import DeviceInfo
from vgpu_scheduler.model import DeviceUsage as DeviceUsage


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
    _positions: dict[str, list[int]] = field(default_factory=dict, repr=False, compare=False)

    def copy(self) -> NodeView:
        return NodeView(
            self.name, self.devices, [u.copy() for u in self.usage], self.cordoned, self.annotations,
            self._positions,
        )

    def positions(self, vendor: str) -> list[int]:
        """Positions of the devices a request of `vendor` may use (HAMi `getNodeResources`: the
        device type contains the vendor key, case-insensitively); cached, the devices never change."""
        found = self._positions.get(vendor)
        if found is None:
            found = self._positions[vendor] = vendor_positions(self.devices, vendor)
        return found


def vendor_positions(devices: list[DeviceInfo], vendor: str) -> list[int]:
    """Positions of the devices whose type contains `vendor` (case-insensitive), in inventory order."""
    needle = vendor.lower()
    # Registered types usually start with the key ("NVIDIA A100"), so the case-sensitive test decides.
    return [i for i, d in enumerate(devices) if vendor in d.type or needle in d.type.lower()]


def has_vendor(types: Iterable[str], vendor: str) -> bool:
    """Some device of these types is one `positions(vendor)` lists."""
    needle = vendor.lower()
    return any(vendor in t or needle in t.lower() for t in types)
