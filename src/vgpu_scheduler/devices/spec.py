"""What a vendor declares about itself besides its backend (docs/vendors.md): the device-config
section it reads and the keys of that section, its command-line flags, and its enable gate.

Each vendor module (or package) holds one `VendorSpec` as `SPEC`; `devices.registry.REGISTRY`
lists them, one line each, in HAMi's registration order. The command line (`flags`), the
options (`scheduler.options`), the device-config reader (`configfile`) and the `simulate` /
`explain` commands iterate the registry, so none of them names a vendor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices.protocol import Vendor, VendorFlags

Factory = Callable[[DeviceConfig, VendorFlags], Sequence[Vendor]]
"""A section's `vendors(config, flags)`."""


@dataclass(frozen=True, slots=True)
class Each:
    """A list whose entries are mappings of `shape` (an `iluvatars` chip, a vNPU template)."""

    shape: ConfigShape


ConfigShape = Mapping[str, "ConfigShape | Each | None"]
"""The keys of a mapping, each with the shape of its value: None for a leaf (or a list of leaves),
a shape for a mapping, `Each` for a list of mappings. These are the yaml tags of HAMi's config
structs: `configfile` warns about any other key (Go's decoder ignores it)."""

RESOURCE_NAME_KEYS: tuple[str, ...] = ("resourceCountName", "resourceMemoryName", "resourceCoreName")
"""The usual keys of a section (`devices.sections.Section.resource_names`)."""


@dataclass(frozen=True, slots=True)
class VendorFlag:
    """One of the vendor's global command-line flags (HAMi's device `flag`s, §1.2), e.g. `--dcu-name`.

    Its value reaches the vendor in `VendorFlags.legacy` under `option` (HAMi overwrites most of
    them with the config file's values, so they matter only where the vendor says so)."""

    name: str
    """The flag as typed, without dashes (`dcu-name`)."""
    default: str | bool
    """The default; its type is the flag's (a bool is a Go bool flag, anything else a string)."""
    help: str
    """The usage text `--help` shows."""
    attr: str = ""
    """The option it sets when not `name` with underscores: an alias names its target's option."""

    @property
    def option(self) -> str:
        """The `SchedulerOptions` field (and `VendorFlags.legacy` key) the flag sets."""
        return self.attr or self.name.replace("-", "_")


@dataclass(frozen=True, slots=True)
class VendorSpec:
    """One registry line: a device-config section and the module that builds its vendors.

    `module` holds `vendors(config, flags) -> Sequence[Vendor]`; a name without a dot is a module
    under `vgpu_scheduler.devices`, a dotted name is absolute. `factory`, when given, is that
    function itself (a vendor defined outside any importable module, such as a test's)."""

    section: str
    """Top-level key of the device configuration file."""
    module: str
    gate: str = ""
    """The option that must be true for the section to register (`enable_ascend`; its flag is
    `--enable-ascend`); "" registers it whatever the command line says."""
    gate_help: str = ""
    """The gate flag's usage text."""
    flags: tuple[VendorFlag, ...] = ()
    """The vendor's other global flags (legacy resource names and the like)."""
    factory: Factory | None = None
    keys: ConfigShape | Each | None = None
    """The section's keys (`Each` for a section that is a list of entries, such as `iluvatars`;
    None: the section is not checked for unknown keys)."""

    chart_switch: str | None = None
    """The Helm chart's `devices.<switch>.enabled` value that puts the section in the extender's
    device config: "" = always there; None = the gate's vendor (`ascend`), else the section name."""

    @property
    def chart_vendor(self) -> str:
        """The chart switch in effect (see `chart_switch`)."""
        if self.chart_switch is not None:
            return self.chart_switch
        return self.gate.removeprefix("enable_") if self.gate else self.section

    @property
    def listed(self) -> bool:
        """The section is a list of entries rather than a mapping."""
        return isinstance(self.keys, Each)

    @property
    def gate_flag(self) -> VendorFlag | None:
        """The gate as a command-line flag (`--enable-ascend`, a Go bool defaulting to false)."""
        if not self.gate:
            return None
        return VendorFlag(self.gate.replace("_", "-"), False, self.gate_help, attr=self.gate)

    @property
    def all_flags(self) -> tuple[VendorFlag, ...]:
        """The gate (if any) and the other flags."""
        gate = self.gate_flag
        return (gate, *self.flags) if gate is not None else self.flags
