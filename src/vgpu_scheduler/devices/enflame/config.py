"""The `enflame` device-configuration section (HAMi `EnflameConfig`, pkg/device/enflame/config.go).

One section feeds both Enflame vendors. HAMi's init assigns the section's values over the
`--enflame-*` flags unconditionally, so the flags never matter:

* GCU (whole card): `resourceNameGCU` as written, empty when the section or key is missing;
* DRS: `resourceNameDRSGCU`, else the legacy `resourceNameVGCU`, else `enflame.com/drs-gcu`;
  `resourceNameGCUMemory` / `resourceNameGCUCore` else their defaults — so DRS requests are
  recognised even without any `enflame` section.

`resourceNameVGCUPercentage` is read (a wrong type is still a configuration error) but nothing
uses it in v2.10.0.
"""

from __future__ import annotations

from dataclasses import dataclass

from vgpu_scheduler.devices.sections import Section

DEFAULT_DRS = "enflame.com/drs-gcu"
DEFAULT_MEMORY = "enflame.com/gcu-memory"
DEFAULT_CORE = "enflame.com/gcu-core"


@dataclass(slots=True, frozen=True)
class EnflameNames:
    gcu: str
    """Whole-card count resource (vendor `GCU`)."""
    drs: str
    """DRS slice-count resource (vendor `Enflame`)."""
    memory: str
    core: str
    vgcu_percentage: str = ""
    """Legacy, unused."""


def enflame_names(section: object) -> EnflameNames:
    s = Section(section)
    gcu = s.string("resourceNameGCU")
    legacy_vgcu = s.string("resourceNameVGCU")
    return EnflameNames(
        gcu=gcu,
        drs=s.string("resourceNameDRSGCU") or legacy_vgcu or DEFAULT_DRS,
        memory=s.string("resourceNameGCUMemory") or DEFAULT_MEMORY,
        core=s.string("resourceNameGCUCore") or DEFAULT_CORE,
        vgcu_percentage=s.string("resourceNameVGCUPercentage"),
    )
