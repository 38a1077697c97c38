"""What a simulation is asked and what it answers: its options, its result, and the annotation that
says when a pod (or a node, in a pods file) arrives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import default_device_config
from vgpu_scheduler.devices.registry import REGISTRY
from vgpu_scheduler.devices.spec import VendorSpec
from vgpu_scheduler.simulate.providers import DEFAULT_PROVIDER
from vgpu_scheduler.standin.embedded.runtime import DEFAULT_EPOCH

ARRIVAL_ANNOTATION = "simulate.vgpu-scheduler.io/arrival-seconds"
"""When a pod (or a node, in a pods file) appears, in simulated seconds (default 0)."""


@dataclass(slots=True)
class SimulationOptions:
    provider: str = DEFAULT_PROVIDER
    node_scheduler_policy: str = "binpack"
    gpu_scheduler_policy: str = "spread"
    device_config: DeviceConfig = field(default_factory=default_device_config)
    seed: int = 0
    """Seeds the embedded cluster's uid generator (uids appear in no report field, but keep runs
    identical anyway)."""
    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    epoch: int = DEFAULT_EPOCH
    vendor_gates: frozenset[str] = frozenset()
    """The scheduler's vendor gates that are on (`enable_ascend` for `--enable-ascend`: the `vnpus`
    section registers only with it, §2)."""
    registry: Sequence[VendorSpec] = REGISTRY
    """The vendors that may register (the package's; a test adds one of its own)."""
    explain: bool = False
    """Pending pods in the report carry their explanation (per node and device, engine.explain)."""
    max_sim_time: float | None = None
    """Stop once the next thing to do lies beyond this simulated second (None: no bound)."""


@dataclass(slots=True)
class SimulationResult:
    report: dict[str, Any]
    cycles: int
    """Scheduling attempts (pops of the queue)."""
    wall_seconds: float
    """Wall time of the run (not part of the report, which must be reproducible)."""




def arrival_seconds(obj: Mapping[str, Any]) -> float:
    """ARRIVAL_ANNOTATION as seconds >= 0 (0 when absent); ValueError when malformed."""
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping) or ARRIVAL_ANNOTATION not in annotations:
        return 0.0
    raw = annotations[ARRIVAL_ANNOTATION]
    try:
        value = float(str(raw).strip())
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"annotation {ARRIVAL_ANNOTATION}={raw!r} is not seconds >= 0")
    return value

