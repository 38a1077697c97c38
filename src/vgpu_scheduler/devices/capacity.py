"""Reading a node's `status.capacity` the way HAMi's capacity-based backends do (AWS Neuron,
Mthreads): `n.Status.Capacity.Name(name, resource.DecimalSI).AsInt64()`.

A resource the node does not list is Go's zero Quantity, which reads as (0, true); a listed value
that is not an exact integer reads as (0, false).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire.quantity import quantity_as_int64

UINT64 = 2**64


def capacity_int64(node: Mapping[str, Any], name: str) -> tuple[int, bool]:
    """(value, ok) of `status.capacity[name]`, as Go's `AsInt64` on it."""
    values = objects.status(node).get("capacity")
    raw = values.get(name) if isinstance(values, Mapping) and name else None
    if raw is None:
        return 0, True
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        return 0, False
    value = quantity_as_int64(raw)
    return (0, False) if value is None else (value, True)


def carries(node: Mapping[str, Any], names: frozenset[str]) -> bool:
    """The node lists one of `names` in its capacity (it has, or had, such devices)."""
    values = objects.status(node).get("capacity")
    return isinstance(values, Mapping) and any(n in values for n in names if n)


def as_uint64(value: int) -> int:
    """Go's `uint(x)` of an int64 on a 64-bit platform."""
    return value % UINT64


def as_int64(value: int) -> int:
    """Go's `int64(x)` / `int(x)` of a uint64."""
    value %= UINT64
    return value - UINT64 if value >= 2**63 else value
