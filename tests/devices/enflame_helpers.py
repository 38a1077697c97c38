"""Builders shared by the Enflame tests (GCU, DRS, end to end)."""

from __future__ import annotations

import json
from typing import Any

from tests.builders import container, node
from tests.devices import vendorkit
from vgpu_scheduler.configfile import default_device_config
from vgpu_scheduler.devices.enflame import capacity
from vgpu_scheduler.devices.registry import build

GCU_NAME = "enflame.com/gcu"
DRS_NAME = "enflame.com/drs-gcu"
MEM_NAME = "enflame.com/gcu-memory"
CORE_NAME = "enflame.com/gcu-core"
CHART = default_device_config()
VENDORS = build(CHART)  # NVIDIA, DCU, GCU, Enflame (the chart's sections)
GCU = VENDORS["GCU"]
DRS = VENDORS["Enflame"]

PROFILES = {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"}


def readable(value: object) -> str | None:
    """Case ids for the tables: `vendorkit.readable`, and long strings shortened too."""
    if isinstance(value, str):
        return value if len(value) <= 60 else value[:57] + "..."
    return vendorkit.readable(value)


def drs_capacity(*capacities: object, profiles: dict[str, str] | None = None) -> str:
    """The node annotation: device i has index/minor "i" and the given capacity."""
    devices = [{"index": str(i), "minor": str(i), "capacity": c} for i, c in enumerate(capacities)]
    return json.dumps({"devices": devices, "profiles": PROFILES if profiles is None else profiles})


def drs_node(name: str = "n", value: str | None = None, **kw: Any) -> dict[str, Any]:
    annotations = {capacity.DRS_CAPACITY: value} if value is not None else {}
    return node(name, annotations=annotations, **kw)


def gcu_node(name: str = "n", count: str | None = "2", **annos: str) -> dict[str, Any]:
    return node(name, annotations=annos, capacity={GCU_NAME: count} if count is not None else {})


def drs_ctr(name: str = "c", **limits: str) -> dict[str, Any]:
    names = {"drs": DRS_NAME, "mem": MEM_NAME, "core": CORE_NAME, "gcu": GCU_NAME}
    return container(name, limits={names[k]: v for k, v in limits.items()})
