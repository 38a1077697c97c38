"""The NVIDIA backend; `NvidiaVendor` is what the registry builds from the `nvidia` section."""

from collections.abc import Sequence

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices.nvidia.vendor import NvidiaVendor as NvidiaVendor
from vgpu_scheduler.devices.protocol import Vendor, VendorFlags
from vgpu_scheduler.devices.spec import Each, VendorSpec


def vendors(config: DeviceConfig, flags: VendorFlags) -> Sequence[Vendor]:
    """The `nvidia` section's vendor (registered even without the section, §2)."""
    return [NvidiaVendor(config.nvidia)]


NVIDIA_KEYS: tuple[str, ...] = (
    "resourceCountName", "resourceMemoryName", "resourceMemoryPercentageName", "resourceCoreName",
    "resourcePriorityName", "overwriteEnv", "defaultMemory", "defaultCores", "defaultGPUNum",
    "memoryFactor", "disableCoreLimit", "gpuCorePolicy", "runtimeClassName", "migProfileAllowlist",
    "deviceSplitCount", "deviceMemoryScaling", "deviceCoreScaling", "preConfiguredDeviceMemory",
    "libCudaLogLevel", "enableNumaTopology",
)
"""The keys of the `nvidia` section (typed by `configfile` into `config.NvidiaConfig`)."""

SPEC = VendorSpec(
    "nvidia",
    __name__,
    chart_switch="",  # the chart always writes the section
    keys={
        **dict.fromkeys(NVIDIA_KEYS),
        "migProfileAllowlist": Each(dict.fromkeys(("models", "profiles"))),
    },
)
