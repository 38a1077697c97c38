"""Conventions of the embedded cluster that its fleets, workloads and simulated kubelet share.

The fixed epoch of the timestamps they write, and pod run times: a bound pod whose
DURATION_ANNOTATION says so finishes after that many seconds (simulated seconds in `simulate`,
wall-clock seconds under `--cluster-snapshot`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire.objects import as_mapping

DEFAULT_EPOCH = 1_767_225_600
"""Unix time of simulated second 0 (2026-01-01T00:00:00Z): fixed, so timestamps written into pod and
node annotations are identical from run to run."""

DURATION_ANNOTATION = "simulate.vgpu-scheduler.io/duration-seconds"
"""How long a pod runs once bound (decimal seconds). Pods without it run until the simulation ends."""


class InvalidDurationError(ValueError):
    """A duration annotation that is not a finite, non-negative number of seconds."""


def duration_seconds(pod: Mapping[str, Any]) -> float | None:
    """The pod's run time from DURATION_ANNOTATION; None when absent (runs forever)."""
    # The raw mapping, not `objects.annotations`: a YAML number (`30`) must be read, not dropped.
    raw = as_mapping(objects.metadata(pod).get("annotations")).get(DURATION_ANNOTATION)
    if raw is None:
        return None
    try:
        value = float(str(raw).strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise InvalidDurationError(f"annotation {DURATION_ANNOTATION}={raw!r} is not seconds >= 0")
    return value
