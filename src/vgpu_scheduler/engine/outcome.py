"""What a filter decision answers: the pod's node and devices, or why none fits.

Its own module so the scheduler state (which reserves a `Chosen`) and the decision walks (which
read the state) both import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from vgpu_scheduler.engine.verdicts import Snapshot
from vgpu_scheduler.model import MigAllocation, PodDevices


@dataclass(slots=True, frozen=True)
class Chosen:
    """The pod fits on `node`: what to patch onto the pod and what to report."""

    node: str
    devices: PodDevices
    """Per vendor, per container (init first, padded) — the uncollapsed allocation."""
    mig: tuple[MigAllocation, ...]
    annotations: dict[str, str]
    """Exactly the §4.1 filter patch annotations."""
    labels: dict[str, str]
    score: float
    scores: dict[str, float] = field(default_factory=dict)
    """Score of every node known to fit (only `node` unless evaluated with `evaluate_all`)."""
    failed: dict[str, str] = field(default_factory=dict)
    """Reasons of the nodes evaluated (or unregistered) on the way; HAMi does not report them."""


@dataclass(slots=True, frozen=True)
class NoFit:
    failed: dict[str, str]
    """Node -> reason (GenReason string, NodeInsufficientDevice, or "node unregistered")."""
    reason_counts: Mapping[str, int] | None = field(default=None, compare=False)
    """How many nodes of `failed` have each reason text, when known without counting them."""
    source: Snapshot | None = field(default=None, compare=False)
    """The verdict snapshot `failed` is a copy of, when it is one (its `rendered` answer may be
    reused while no verdict changes)."""


@dataclass(slots=True, frozen=True)
class Error:
    message: str


@dataclass(slots=True, frozen=True)
class NoRequest:
    """The pod asks for no device: Filter echoes the candidate nodes unchanged, no side effects."""


Decision = Chosen | NoFit | Error | NoRequest
