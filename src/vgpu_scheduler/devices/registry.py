"""The registry: every vendor's declaration (`devices.spec.VendorSpec`), in HAMi's registration
order (§2).

HAMi registers every backend except Ascend and Iluvatar whatever the configuration says (a
missing section leaves empty resource names, so the vendor never matches a container); Ascend
and Iluvatar declare a gate (`--enable-ascend` / `--enable-iluvatar`). Each line loads the `SPEC`
of one module under `vgpu_scheduler.devices`; that module's `vendors(config, flags)` builds the
section's vendors (several for sections such as `iluvatars`). Adding a vendor adds one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices.protocol import Vendor, VendorConfigError, VendorFlags, Vendors
from vgpu_scheduler.devices.spec import Factory, VendorSpec

Entry = VendorSpec
"""A registry line (`Entry(section, module, gate=...)`), kept under its former name."""


def _module_path(module: str) -> str:
    return module if "." in module else f"vgpu_scheduler.devices.{module}"


def declared(module: str) -> VendorSpec:
    """The `SPEC` a vendor module declares (its registry line)."""
    spec: VendorSpec = importlib.import_module(_module_path(module)).SPEC
    return spec


# HAMi's order. The blank lines between entries let vendors written side by side merge without
# conflicts.
REGISTRY: tuple[VendorSpec, ...] = (
    declared("nvidia"),

    declared("cambricon"),

    declared("hygon"),

    declared("enflame"),

    declared("mthreads"),

    declared("metax"),

    declared("kunlun"),

    declared("awsneuron"),

    declared("amd"),

    declared("vastai"),

    declared("biren"),

    declared("ascend"),

    declared("iluvatar"),

)


def factory(entry: VendorSpec) -> Factory:
    if entry.factory is not None:
        return entry.factory
    module = importlib.import_module(_module_path(entry.module))
    built: Factory = module.vendors
    return built


def build(
    config: DeviceConfig | None = None,
    flags: VendorFlags | None = None,
    *,
    registry: Sequence[VendorSpec] = REGISTRY,
) -> Vendors:
    """The registered vendors for a device configuration (default: the chart's `nvidia` defaults).
    Raises VendorConfigError, its key starting with the section."""
    config = config if config is not None else DeviceConfig()
    flags = flags if flags is not None else VendorFlags()
    out: list[Vendor] = []
    for entry in registry:
        if not flags.enabled(entry.gate):
            continue
        try:
            out.extend(factory(entry)(config, flags))
        except VendorConfigError as exc:
            key = f"{entry.section}.{exc.key}" if exc.key else entry.section
            raise VendorConfigError(exc.problem, key) from None
    return Vendors(out)


def chart_sections(registry: Sequence[VendorSpec] = REGISTRY) -> str:
    """The Helm chart's section list (`vgpu-scheduler.sections` in charts/vgpu-scheduler/templates/
    _helpers.tpl), from the registry: each section in registration order with the `devices.<vendor>`
    switch that enables it ("" = always on). `scripts/chart-sections` writes it into the chart."""
    lines = []
    for spec in registry:
        switch = spec.chart_vendor or '""'
        lines.append(f"- {{section: {spec.section}, vendor: {switch}}}\n")
    return "".join(lines)
