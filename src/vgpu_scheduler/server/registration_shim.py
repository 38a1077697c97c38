"""Temporary registration: decode each node's NVIDIA inventory into the state (no handshake).

Replaced by cluster.registration.RegistrationLoop once it lands.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import InventoryError, decode_cordon, decode_node_devices

if TYPE_CHECKING:
    from vgpu_scheduler.server.process import SchedulerProcess

log = logging.getLogger(__name__)


class MinimalRegistration:
    def __init__(self, process: SchedulerProcess, interval: float = 15.0) -> None:
        self.process = process
        self.interval = interval
        self._wake = asyncio.Event()
        self._first = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    async def wait_first_pass(self) -> None:
        await self._first.wait()

    def run_pass(self) -> None:
        state = self.process.state
        seen: set[str] = set()
        for node in self.process.nodes.store.list():
            meta = node.get("metadata") or {}
            name = str(meta.get("name") or "")
            annotations = meta.get("annotations") or {}
            value = annotations.get(keys.NODE_NVIDIA_REGISTER)
            if not name or value is None:
                continue
            try:
                devices = decode_node_devices(value)
            except InventoryError as exc:
                log.warning("node %s: %s", name, exc)
                continue
            seen.add(name)
            state.set_node_devices(
                name, devices, decode_cordon(annotations.get(keys.DEVICE_CORDON)), annotations
            )
        for name in list(state.ledger.node_names()):
            if name not in seen:
                state.remove_node(name)
        self.process.synced.set()
        self._first.set()

    async def run(self) -> None:
        while True:
            self.run_pass()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
