"""A pod's hypothetical quota usage of one vendor while its fit is built (§5.8): what a vendor's
ladder asks the ResourceQuota check about, init containers collapsed to their peak.
"""

from __future__ import annotations

from collections.abc import Sequence

from vgpu_scheduler.model import ContainerDevices


def quota_usage(
    allocated: Sequence[ContainerDevices],
    n_init: int,
    current: Sequence[tuple[str, int, int]],
) -> tuple[int, int]:
    """Whole-pod hypothetical (memory, cores) of one vendor, init containers collapsed (§5.8).

    `allocated` is the allocation list being built (HAMi passes its own list: during the init
    phase the init entries so far, during the app phase the app entries so far — so app
    container j counts as an init container when j < n_init, as in HAMi); `current` is this
    container's collected devices plus the candidate, at index len(allocated).
    """
    acc: dict[str, list[int]] = {}  # uuid -> [init peak mem, init peak cores, app mem, app cores]
    for ci, ctr in enumerate(allocated):
        for dev in ctr:
            a = acc.setdefault(dev.uuid, [0, 0, 0, 0])
            if ci < n_init:
                a[0] = max(a[0], dev.usedmem)
                a[1] = max(a[1], dev.usedcores)
            else:
                a[2] += dev.usedmem
                a[3] += dev.usedcores
    init = len(allocated) < n_init
    for uuid, mem, cores in current:
        a = acc.setdefault(uuid, [0, 0, 0, 0])
        if init:
            a[0] = max(a[0], mem)
            a[1] = max(a[1], cores)
        else:
            a[2] += mem
            a[3] += cores
    return sum(max(a[0], a[2]) for a in acc.values()), sum(max(a[1], a[3]) for a in acc.values())
