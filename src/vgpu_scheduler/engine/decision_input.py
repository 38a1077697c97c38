"""What one filter decision reads, as values: the pod's setup (`PodSetup`, kept per pod version
by `engine.decide`) and the decision's own input (`DecisionInput`), built once per decision and
handed to the walk that decides (`walk_first_fit`, `walk_all`, `walk_bounded`: `walk(input)`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.devices.protocol import QuotaCheck
from vgpu_scheduler.engine.fit import PodFitContext
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.engine.verdicts import PodFingerprint
from vgpu_scheduler.model import ContainerRequests


@dataclass(slots=True, frozen=True)
class Need:
    """One request a node summary may bound (`walk_common.needs_of`, `walk_common.may_fit`)."""

    nums: int
    memreq: int
    pct: int
    cores: int


@dataclass(slots=True, frozen=True)
class PodSetup:
    """What a decision works out of the pod alone, kept per pod object version (`decide._pod_setup`)."""

    requests: Sequence[ContainerRequests]
    resource_version: str
    gpu_policy: str
    quota: QuotaCheck | None
    uid: str
    name: str
    n_init: int
    ctx: PodFitContext
    fingerprint: PodFingerprint
    needs: tuple[Need, ...]
    asked: tuple[str, ...]
    scored: bool
    """Some vendor asked may score nodes (`walk_common.scoring_vendors`)."""
    best_fit: bool


@dataclass(slots=True)
class DecisionInput:
    """One decision's input: what `decide` was given and worked out before choosing a walk.

    Read only, never changed: not `frozen=True`, whose `object.__setattr__` per field cost ~1 us
    more per decision (more than a fast decision's walk of one node)."""

    pod: Mapping[str, Any]
    node_names: Sequence[str]
    """The caller's candidates, as given (a list passed again may be recognised by identity)."""
    state: SchedulerState
    setup: PodSetup
    policy: str
    """The pod's node policy (binpack or spread)."""
    eligible: frozenset[str]
    """The registered nodes with a device of each vendor asked (`DeviceLedger.nodes_with`)."""
    now: int
    deprioritized: Callable[[str], bool] | None
    """True for a node ranked after every other fitting node (see `decide.decide`)."""
    walk_failed: bool
    """The caller reads `Chosen.failed` (see `decide.decide`)."""
