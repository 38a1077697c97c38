"""Reading and writing a container's resources the way HAMi's backends do (§5.1, §7).

Containers are plain Kubernetes JSON dicts. Quantities go through `quantity_as_int64` (Go's
`Quantity.AsInt64` on the API server's canonical text); a resource is looked up in `limits` first
and, only when the name is absent there, in `requests` — presence decides, not validity, so an
unparsable limit is not rescued by a valid request (as in HAMi). The admission helpers mutate a
container in place.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from vgpu_scheduler.wire.quantity import parse_quantity, quantity_as_int64

INT32_MAX = 2**31 - 1

MISSING: Any = object()
"""`lookup`'s answer for a resource the container does not name."""


def trunc_div(a: int, b: int) -> int:
    """Go integer division (truncates toward zero)."""
    q = abs(a) // b
    return q if a >= 0 else -q


def int32(value: int) -> int:
    """Go's `int32(x)` conversion of an int64: keep the low 32 bits, two's complement."""
    return (value + 2**31) % 2**32 - 2**31


def lookup(resources: Mapping[str, Any], name: str) -> Any:
    """`limits[name]`, else `requests[name]`, else MISSING (an empty name is never present)."""
    if not name:
        return MISSING
    for section in ("limits", "requests"):
        values = resources.get(section)
        if isinstance(values, Mapping) and name in values:
            return values[name]
    return MISSING


def limit(resources: Mapping[str, Any], name: str) -> Any:
    """`limits[name]` only (some backends ignore `requests`), else MISSING."""
    values = resources.get("limits")
    if name and isinstance(values, Mapping) and name in values:
        return values[name]
    return MISSING


def as_int(value: object) -> int | None:
    """`Quantity.AsInt64()`: the exact integer, or None (fractions, garbage, MISSING)."""
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return quantity_as_int64(value)
    return None


def resources_of(container: Mapping[str, Any]) -> Mapping[str, Any] | None:
    resources = container.get("resources")
    return resources if isinstance(resources, Mapping) else None


# -- admission (MutateAdmission) helpers -------------------------------------------------------


def present(ctr: Mapping[str, Any], section: str, name: str) -> bool:
    """`name` is a key of `resources.<section>` (its value is not looked at)."""
    values = (ctr.get("resources") or {}).get(section) or {}
    return bool(name) and name in values


def value(ctr: Mapping[str, Any], name: str) -> int | None:
    """Go's `Quantity.Value()` (rounded up, away from zero) of limits[name], else requests[name]."""
    for section in ("limits", "requests"):
        if present(ctr, section, name):
            raw = ctr["resources"][section][name]
            if raw is None:
                return 0
            exact = parse_quantity(str(raw))
            return math.ceil(exact) if exact >= 0 else math.floor(exact)
    return None


def binary_si(n: int) -> str:
    """`resource.NewQuantity(n, BinarySI).String()` for n >= 0: "1", "1023", "1Ki", "1536"."""
    if n < 1024:
        return str(n)
    exponent = 0
    while n % 1024 == 0 and exponent < 6:
        n //= 1024
        exponent += 1
    return f"{n}{('', 'Ki', 'Mi', 'Gi', 'Ti', 'Pi', 'Ei')[exponent]}"


def set_limit(ctr: dict[str, Any], name: str, quantity: str) -> None:
    resources = ctr.get("resources")
    if not isinstance(resources, dict):
        resources = ctr["resources"] = {}
    if not isinstance(resources.get("limits"), dict):
        resources["limits"] = {}
    resources["limits"][name] = quantity


def append_env(ctr: dict[str, Any], name: str, env_value: str) -> None:
    if not isinstance(ctr.get("env"), list):
        ctr["env"] = []
    ctr["env"].append({"name": name, "value": env_value})
