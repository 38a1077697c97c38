"""NVIDIA's CheckHealth (§3.4): the generic handshake check wrapped with per-node counters.

NVIDIA remembers, per node, the allocatable count of its count resource and the register
annotation last seen, so an inventory change or a drop of the allocatable count to 0 is noticed on
the next pass even though v2.8+ device plugins never touch the handshake.
"""

from __future__ import annotations

from dataclasses import dataclass

from vgpu_scheduler.devices.protocol import Health


@dataclass(frozen=True, slots=True)
class NodeCounters:
    """What NVIDIA remembers per node between passes."""

    reported: int = 0
    """Allocatable count seen at the last change."""
    register: str = ""
    """Register annotation value seen at the last change."""


UNSEEN = NodeCounters()
"""A node NVIDIA never stored anything for behaves like one with zero counters (Go zero values)."""


@dataclass(frozen=True, slots=True)
class NvidiaHealth:
    healthy: bool
    need_update: bool
    counters: NodeCounters
    """What to remember for the node after this check."""


def check_nvidia(
    counters: NodeCounters, current: int, register: str, generic: Health
) -> NvidiaHealth:
    """NVIDIA's CheckHealth (§3.4) on top of the generic result (computed first, always).

    current: allocatable count of the configured count resource now; register: the register
    annotation now ("" when absent)."""
    if current == 0:
        if counters.reported == 0:
            return NvidiaHealth(generic.healthy, generic.need_update, counters)
        # The plugin withdrew its devices: clean the node up now.
        return NvidiaHealth(False, generic.need_update, NodeCounters(0, register))
    if counters.reported != current:
        return NvidiaHealth(True, True, NodeCounters(current, register))
    if counters.register != register:
        return NvidiaHealth(generic.healthy, True, NodeCounters(current, register))
    return NvidiaHealth(generic.healthy, generic.need_update, counters)
