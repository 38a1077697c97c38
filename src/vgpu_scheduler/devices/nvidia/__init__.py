"""The NVIDIA backend; `NvidiaVendor` is what the registry builds from the `nvidia` section."""

from collections.abc import Sequence

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices.nvidia.vendor import NvidiaVendor as NvidiaVendor
from vgpu_scheduler.devices.protocol import Vendor, VendorFlags


def vendors(config: DeviceConfig, flags: VendorFlags) -> Sequence[Vendor]:
    """The `nvidia` section's vendor (registered even without the section, §2)."""
    return [NvidiaVendor(config.nvidia)]
