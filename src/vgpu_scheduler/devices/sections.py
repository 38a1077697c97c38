"""Typed reads of one vendor's raw device-config section (§2.2), for the vendor modules.

The YAML file is parsed by `configfile`; the `nvidia` section is typed there and every other
section reaches its vendor as the raw mapping (or None when the file has no such section: the
vendor is then registered with Go's zero values, i.e. empty resource names). Unknown keys are
ignored, as Go's YAML decoder ignores them; a value of the wrong type is a VendorConfigError
naming the key (the registry prefixes the section).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_scheduler.devices.protocol import ResourceNames, VendorConfigError

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _describe(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:57] + '...' if len(text) > 60 else text}"


class Section:
    """One mapping of the device configuration, read with Go's zero values as defaults."""

    def __init__(self, raw: object, path: str = "") -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise VendorConfigError(f"expected a mapping, got {_describe(raw)}", path)
        self.data: Mapping[str, Any] = raw
        self.path = path

    def _key(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def string(self, key: str, default: str = "") -> str:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise VendorConfigError(f"expected a string, got {_describe(value)}", self._key(key))
        return value

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise VendorConfigError(f"expected true or false, got {_describe(value)}", self._key(key))
        return value

    def int32(self, key: str, default: int = 0) -> int:
        value = self.data.get(key)
        if value is None:
            return default
        if type(value) is not int:
            raise VendorConfigError(f"expected an integer, got {_describe(value)}", self._key(key))
        if not INT32_MIN <= value <= INT32_MAX:
            raise VendorConfigError(f"{value} is out of range [{INT32_MIN}, {INT32_MAX}]", self._key(key))
        return value

    def resource_names(
        self, *, memory: bool = True, cores: bool = True, memory_factor: int | str = 0
    ) -> ResourceNames:
        """`resourceCountName`, `resourceMemoryName` and `resourceCoreName` (those the vendor has),
        with the memory factor: a number, or the key holding it (read last, as HAMi does)."""
        count = self.string("resourceCountName")
        memory_name = self.string("resourceMemoryName") if memory else ""
        cores_name = self.string("resourceCoreName") if cores else ""
        factor = self.int32(memory_factor) if isinstance(memory_factor, str) else memory_factor
        return ResourceNames(count, memory_name, cores_name, factor)
