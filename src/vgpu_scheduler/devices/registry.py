"""The registry: device-configuration sections -> vendors, in HAMi's registration order (§2).

HAMi registers every backend except Ascend and Iluvatar whatever the configuration says (a
missing section leaves empty resource names, so the vendor never matches a container); Ascend
and Iluvatar need `--enable-ascend` / `--enable-iluvatar`. Each line names the section and the
module under `vgpu_scheduler.devices` whose `vendors(config, flags)` builds that section's
vendors (several for sections such as `iluvatars`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices.protocol import Vendor, VendorConfigError, VendorFlags, Vendors

Factory = Callable[[DeviceConfig, VendorFlags], Sequence[Vendor]]


@dataclass(slots=True, frozen=True)
class Entry:
    section: str
    """Top-level key of the device configuration file."""
    module: str
    """Module under `vgpu_scheduler.devices` with `vendors(config, flags) -> list[Vendor]`."""
    gate: str = ""
    """`VendorFlags` attribute that must be true for the section to register ("" = always)."""


# HAMi's order. A vendor's line is uncommented when its module exists; the blank lines between
# entries let vendors written side by side merge without conflicts.
REGISTRY: tuple[Entry, ...] = (
    Entry("nvidia", "nvidia"),

    Entry("cambricon", "cambricon"),

    Entry("hygon", "hygon"),

    Entry("enflame", "enflame"),

    Entry("mthreads", "mthreads"),

    Entry("metax", "metax"),

    Entry("kunlun", "kunlun"),

    Entry("awsneuron", "awsneuron"),

    Entry("amd", "amd"),

    Entry("vastai", "vastai"),

    Entry("biren", "biren"),

    Entry("vnpus", "ascend", gate="enable_ascend"),

    Entry("iluvatars", "iluvatar", gate="enable_iluvatar"),

)


def factory(entry: Entry) -> Factory:
    module = importlib.import_module(f"vgpu_scheduler.devices.{entry.module}")
    built: Factory = module.vendors
    return built


def build(
    config: DeviceConfig | None = None,
    flags: VendorFlags | None = None,
    *,
    registry: Sequence[Entry] = REGISTRY,
) -> Vendors:
    """The registered vendors for a device configuration (default: the chart's `nvidia` defaults).
    Raises VendorConfigError, its key starting with the section."""
    config = config if config is not None else DeviceConfig()
    flags = flags if flags is not None else VendorFlags()
    out: list[Vendor] = []
    for entry in registry:
        if entry.gate and not getattr(flags, entry.gate):
            continue
        try:
            out.extend(factory(entry)(config, flags))
        except VendorConfigError as exc:
            key = f"{entry.section}.{exc.key}" if exc.key else entry.section
            raise VendorConfigError(exc.problem, key) from None
    return Vendors(out)
