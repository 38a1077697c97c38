"""MIG placement for NVIDIA devices in `mig` mode (§5.3 "MIG devices").

A MIG device advertises profiles with the placements NVML reports; placements already taken come
from `hami.io/vgpu-mig-allocations` of cached pods (DeviceUsage.mig_taken). A request of memreq
MiB takes the smallest profile (memoryMB, then sliceCount) with memoryMB >= memreq that still
has a free placement. `1g.*`/`3g.*` placements are tried from the highest start down (keeping the
low slices free for the big profiles), the others from the lowest start up.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

from vgpu_scheduler.model import MIG_MODE as MIG_MODE
from vgpu_scheduler.model import MigPlacement, MigProfile


@lru_cache(maxsize=1024)
def _candidates(profiles: tuple[MigProfile, ...]) -> tuple[tuple[MigProfile, tuple[MigPlacement, ...]], ...]:
    """Profiles in preference order, each with its placements in trial order.

    Placements come from the FIRST profile of that name (HAMi looks the profile up by name).
    """
    first_by_name: dict[str, MigProfile] = {}
    for p in profiles:
        first_by_name.setdefault(p.name, p)
    out = []
    for p in sorted(profiles, key=lambda p: (p.memory_mb, p.slice_count)):
        placements = first_by_name[p.name].placements
        high_first = p.name.startswith(("1g.", "3g."))
        ordered = sorted(placements, key=(lambda pl: -pl.start) if high_first else (lambda pl: pl.start))
        out.append((p, tuple(ordered)))
    return tuple(out)


def select_mig(
    profiles: Sequence[MigProfile], occupied: Iterable[MigPlacement], memory: int
) -> tuple[MigProfile, MigPlacement] | None:
    """The (profile, placement) a request of `memory` MiB gets, or None when nothing fits."""
    taken = list(occupied)
    for profile, placements in _candidates(tuple(profiles)):
        if profile.memory_mb < memory:
            continue
        for candidate in placements:
            if not any(candidate.overlaps(t) for t in taken):
                return profile, candidate
    return None


def mig_feasible(
    profiles: Sequence[MigProfile],
    taken: Iterable[MigPlacement],
    earlier: Sequence[int],
    memory: int,
) -> bool:
    """Can this device host `memory` after the instances `earlier` (memreqs of devices already
    collected on it for the same container) are placed in order?"""
    occupied = list(taken)
    for mem in earlier:
        chosen = select_mig(profiles, occupied, mem)
        if chosen is None:
            return False
        occupied.append(chosen[1])
    return select_mig(profiles, occupied, memory) is not None


def placement_capacity(profiles: Sequence[MigProfile]) -> int:
    """Upper bound of instances one device can hold (guards re-examination loops)."""
    return sum(len(p.placements) for p in profiles)
