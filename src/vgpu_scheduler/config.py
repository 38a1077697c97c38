"""Typed device configuration (§2): the data shapes only, no YAML.

The engine, the cluster and the verbs depend on these; reading and validating the YAML file is
`vgpu_scheduler.configfile`, which only the process entry points (server, simulate) import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True, frozen=True)
class MigProfileAllowlist:
    models: tuple[str, ...]
    profiles: tuple[str, ...]


@dataclass(slots=True, frozen=True)
class NvidiaConfig:
    """The `nvidia` section with the Helm chart defaults (§2.1)."""

    resource_count_name: str = "nvidia.com/gpu"
    resource_memory_name: str = "nvidia.com/gpumem"
    resource_memory_percentage_name: str = "nvidia.com/gpumem-percentage"
    resource_core_name: str = "nvidia.com/gpucores"
    resource_priority_name: str = "nvidia.com/priority"
    overwrite_env: bool = False
    default_memory: int = 0
    default_cores: int = 0
    default_gpu_num: int = 1
    memory_factor: int = 1
    disable_core_limit: bool = False
    gpu_core_policy: str = "default"
    runtime_class_name: str = ""
    mig_profile_allowlist: tuple[MigProfileAllowlist, ...] = ()
    # Device-plugin-side node defaults, carried so the file round-trips; the scheduler ignores them.
    device_split_count: int = 10
    device_memory_scaling: float = 1.0
    device_core_scaling: float = 1.0
    pre_configured_device_memory: int = 0
    lib_cuda_log_level: int | None = None
    enable_numa_topology: bool = False


@dataclass(slots=True, frozen=True)
class DeviceConfig:
    """The whole device file. Vendors other than NVIDIA are kept raw until their backend exists."""

    nvidia: NvidiaConfig = field(default_factory=NvidiaConfig)
    other_vendors: dict[str, Any] = field(default_factory=dict)
