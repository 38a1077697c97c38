"""The `vnpus` section (HAMi `VNPUs` / `VNPUConfig` / `Template`, pkg/device/ascend/vnpu.go).

`hamiVnpuCore` is the cluster default for soft partitioning (a node's `hami-vnpu-core` annotation
overrides it); `configs` holds one chip per entry. Integers follow the Go field types (memory
values int64, factor and core counts int32); a wrong type is a VendorConfigError naming the key.
Templates are kept sorted by memory ascending (HAMi sorts them when the vendor is built), so the
first template holding a request is the smallest one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vgpu_scheduler.devices.protocol import VendorConfigError
from vgpu_scheduler.devices.sections import Section

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@dataclass(slots=True, frozen=True)
class Template:
    """A hard-split vNPU profile: its name, memory (MiB), AI cores and AI CPUs."""

    name: str
    memory: int
    ai_core: int = 0
    ai_cpu: int = 0


@dataclass(slots=True, frozen=True)
class VnpuConfig:
    """One chip of `vnpus.configs`."""

    common_word: str
    chip_name: str = ""
    resource_name: str = ""
    resource_memory_name: str = ""
    resource_core_name: str = ""
    memory_allocatable: int = 0
    memory_capacity: int = 0
    memory_factor: int = 0
    ai_core: int = 0
    ai_cpu: int = 0
    runtime_class_name: str = ""
    overwrite_env: bool = False
    super_pod: bool = False
    templates: tuple[Template, ...] = ()

    def trim_memory(self, memory: int) -> tuple[int, str]:
        """HAMi `trimMemory`: the smallest template holding `memory` (its memory and name), else
        the whole device (`memoryAllocatable`, no name) up to `memoryCapacity`, else (0, "")."""
        for template in self.templates:
            if memory <= template.memory:
                return template.memory, template.name
        if memory <= self.memory_capacity:
            return self.memory_allocatable, ""
        return 0, ""


@dataclass(slots=True, frozen=True)
class Vnpus:
    hami_vnpu_core: bool = False
    configs: tuple[VnpuConfig, ...] = ()


def _int64(section: Section, key: str) -> int:
    value = section.data.get(key)
    if value is None:
        return 0
    where = f"{section.path}.{key}" if section.path else key
    if type(value) is not int:
        raise VendorConfigError(f"expected an integer, got {type(value).__name__} {value!r}", where)
    if not INT64_MIN <= value <= INT64_MAX:
        raise VendorConfigError(f"{value} is out of range [{INT64_MIN}, {INT64_MAX}]", where)
    return value


def _list(section: Section, key: str) -> Sequence[object]:
    value = section.data.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        where = f"{section.path}.{key}" if section.path else key
        raise VendorConfigError(f"expected a list, got {type(value).__name__}", where)
    return value


def _template(raw: object, path: str) -> Template:
    s = Section(raw, path)
    return Template(s.string("name"), _int64(s, "memory"), s.int32("aiCore"), s.int32("aiCPU"))


def _chip(raw: object, path: str) -> VnpuConfig:
    s = Section(raw, path)
    templates = [_template(t, f"{path}.templates[{i}]") for i, t in enumerate(_list(s, "templates"))]
    return VnpuConfig(
        common_word=s.string("commonWord"),
        chip_name=s.string("chipName"),
        resource_name=s.string("resourceName"),
        resource_memory_name=s.string("resourceMemoryName"),
        resource_core_name=s.string("resourceCoreName"),
        memory_allocatable=_int64(s, "memoryAllocatable"),
        memory_capacity=_int64(s, "memoryCapacity"),
        memory_factor=s.int32("memoryFactor"),
        ai_core=s.int32("aiCore"),
        ai_cpu=s.int32("aiCPU"),
        runtime_class_name=s.string("runtimeClassName"),
        overwrite_env=s.boolean("overwriteEnv"),
        super_pod=s.boolean("superPod"),
        # Stable, where Go's sort.Slice is not: equal memories keep their file order.
        templates=tuple(sorted(templates, key=lambda t: t.memory)),
    )


def parse_vnpus(raw: object) -> Vnpus:
    """The `vnpus` section (None: no section, no chips)."""
    s = Section(raw)
    chips = tuple(_chip(c, f"configs[{i}]") for i, c in enumerate(_list(s, "configs")))
    return Vnpus(s.boolean("hamiVnpuCore"), chips)
