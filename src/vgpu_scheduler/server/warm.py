"""Keeps the ledger's per-node caches filled between requests, off the /filter path.

The ledger computes a node's summary (the bounds `decide` skips hopeless nodes by) on first use
after every change of the node, and a node view its devices' positions per vendor on first use.
A pod that fits nowhere reads both for every candidate: at 5,000 nodes, with every cache cold
(after start, or after many nodes' devices, cordons or usage changed, each of which resets the
node's summary), that first answer spent about as long filling them as evaluating the nodes.
Filling them here, in slices of well under a millisecond between requests, leaves the answer
only the evaluation.
Nothing a decision computes changes: the same values, computed earlier.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from vgpu_scheduler.engine.ledger import DeviceLedger

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 0.2
"""How often the ledger is checked for changed nodes."""
SLICE_NODES = 16
"""Nodes warmed before yielding to the event loop (~0.1 ms of CPU), so a request that arrives
meanwhile waits at most one slice."""


class LedgerWarmer:
    """Fills the summaries of the nodes changed since the last pass, and their vendors' device
    positions, `SLICE_NODES` at a time."""

    def __init__(self, ledger: DeviceLedger, vendor_keys: Iterable[str]) -> None:
        self.ledger = ledger
        self.vendor_keys = tuple(vendor_keys)
        self._seen = -1  # no pass yet: the first warms every node
        self.warmed = 0
        """Nodes warmed so far (tests, debugging)."""

    def pending(self) -> list[str]:
        """The nodes changed since the last pass (every node on the first pass, or when the ledger
        no longer knows the changes since then), de-duplicated; marks them as seen."""
        ledger = self.ledger
        tick = ledger.tick
        changed = ledger.changed_since(self._seen) if self._seen >= 0 else None
        self._seen = tick
        return list(dict.fromkeys(ledger.node_names() if changed is None else changed))

    def warm(self, names: Iterable[str]) -> None:
        ledger = self.ledger
        with_vendor = [(key, ledger.nodes_with((key,))) for key in self.vendor_keys]
        for name in names:
            view = ledger.view(name)
            if view is None:  # removed since
                continue
            ledger.summary(name)
            for key, nodes in with_vendor:
                if name in nodes:
                    view.positions(key)
            self.warmed += 1

    async def warm_pending(self) -> None:
        """One pass over the changed nodes, yielding between slices."""
        names = self.pending()
        for start in range(0, len(names), SLICE_NODES):
            self.warm(names[start : start + SLICE_NODES])
            await asyncio.sleep(0)

    async def run(self, interval: float = INTERVAL_SECONDS) -> None:
        """Warm forever (a background task; cancel it to stop)."""
        while True:
            try:
                await self.warm_pending()
            except Exception:  # never let a bug here take the server down: decisions work cold
                log.exception("warming the ledger caches failed")
            await asyncio.sleep(interval)
