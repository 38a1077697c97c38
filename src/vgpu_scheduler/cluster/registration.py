"""The node registration loop (§8.3): node annotations → device inventories in the state.

One pass per wake-up (15 s ticker, node add/delete, leadership acquired), skipped until the
informers have synced and while this instance is not the leader. A pass reads every node of the
node informer's Store (already restricted by --node-label-selector) and, for each registered
vendor in registration order (`Vendor` in `devices.protocol`):

1. reads the vendor's inventory (`node_devices`, e.g. `hami.io/node-nvidia-register` with its pair
   scores);
2. runs the vendor's health check (`check_health`, §3.4), which may ask for a `Requesting_<now>`
   stamp on the vendor's handshake annotation;
3. unhealthy ⇒ if the node has this vendor's devices: clean up (delete the handshake annotation,
   the vendor forgets the node, its devices are dropped) and go on; decode error ⇒ keep what is
   registered (logged with the node name); zero devices ⇒ drop the vendor's devices; no update
   needed ⇒ keep them; else store the new ones.

The node's inventory in the state is every vendor's devices, in registration order, with the
node's `hami.io/device-cordon` list. After the pass `synced` is set; the filter waits for it.

Choices that differ in form (not in results) from HAMi:
* Handshake writes (`Requesting_<now>` and the cleanup's `null`) go through a small background
  writer instead of blocking the pass: with client-side rate limiting (QPS 5) a first pass over
  thousands of nodes would otherwise take minutes before `synced`. Failures are only logged, as in
  HAMi. HAMi GETs the node before each write; the write is a plain merge patch of one annotation,
  so the informer's copy is enough and the extra GET is not made.
* A node whose check says "no update needed" still gets its cordon list and annotations refreshed
  (the device list stays the registered one, usage is not recounted): an operator's
  `hami.io/device-cordon` edit takes effect within one pass instead of waiting for the next
  inventory change. Inventories are decoded once per distinct annotation value, not every pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any

from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError, is_not_found
from vgpu_scheduler.cluster.store import Store
from vgpu_scheduler.devices import handshake as hs
from vgpu_scheduler.devices.capacity import carries
from vgpu_scheduler.devices.protocol import Vendor, Vendors
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import DeviceInfo
from vgpu_scheduler.wire import keys, objects
from vgpu_scheduler.wire.inventory import InventoryError, decode_cordon

log = logging.getLogger(__name__)

Obj = dict[str, Any]

DEFAULT_INTERVAL = 15.0
PASS_YIELD_EVERY = 8
"""Nodes registered between two yields to the event loop during one pass."""


def local_now() -> datetime:
    """The default clock: an aware datetime in the process's local zone."""
    return datetime.now().astimezone()


# ---------------------------------------------------------------------------------------------
# Reading a node


def node_name(node: Mapping[str, Any]) -> str:
    return objects.name(node)


def node_annotations(node: Mapping[str, Any]) -> dict[str, str]:
    return dict(objects.annotations(node))


def stamp_keys(vendors: Vendors) -> frozenset[str]:
    """Node annotations the handshakes and node locks rewrite and no decision reads (a key that
    is also some vendor's inventory, like AMD's handshake on its register annotation, is kept)."""
    written = {k for v in vendors for k in (v.handshake_key, v.lock_key) if k is not None}
    return frozenset(written - {k for v in vendors for k in v.inventory_keys})


def _same_apart_from(old: Mapping[str, str], new: Mapping[str, str], ignored: frozenset[str]) -> bool:
    if old == new:
        return True
    keys_changed = old.keys() ^ new.keys()
    if not keys_changed <= ignored:
        return False
    return all(old[k] == new[k] for k in old.keys() & new.keys() if k not in ignored)


def carries_inventory(vendor: Vendor, node: Mapping[str, Any], annotations: Mapping[str, str]) -> bool:
    """The node carries the vendor's inventory, so an error reading it is a real error: one of
    its inventory annotations, or, for a vendor reading node capacity (no inventory annotation),
    one of its resources in the node's capacity. Otherwise the node simply has no such devices."""
    if vendor.inventory_keys:
        return any(k in annotations for k in vendor.inventory_keys)
    names = vendor.names
    return carries(node, frozenset((names.count, names.memory, names.cores)))


# ---------------------------------------------------------------------------------------------
# Handshake writes, off the pass


class NodeAnnotationWriter:
    """Merge-patches single node annotations (handshake keys) in the background, a few at a time.

    While a write of one (node, key) is still queued a newer value replaces it (only the latest
    matters); a node is never written by two requests at once. Failures are logged, never retried:
    the next pass asks again if it still has to."""

    def __init__(self, client: KubeClient, key: str = keys.NODE_HANDSHAKE, concurrency: int = 4) -> None:
        self.client = client
        self.key = key
        """The key `submit` writes when it is given none."""
        self.concurrency = max(1, concurrency)
        self._queued: dict[tuple[str, str], str | None] = {}
        self._inflight: set[str] = set()
        self._running: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        self.failed = 0

    def submit(self, node: str, value: str | None, key: str | None = None) -> None:
        self._queued[(node, key or self.key)] = value
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="write node annotations")

    def discard(self, node: str) -> None:
        """Forget the node's queued writes (the node was deleted)."""
        for queued in [q for q in self._queued if q[0] == node]:
            del self._queued[queued]

    def pending(self, node: str) -> bool:
        return any(q[0] == node for q in self._queued) or node in self._inflight

    async def flush(self) -> None:
        """Wait until every submitted write has been attempted."""
        while self._task is not None and not self._task.done():
            await asyncio.wait({self._task})

    async def close(self) -> None:
        tasks = [t for t in (self._task, *self._running) if t is not None and not t.done()]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._queued.clear()

    async def _drain(self) -> None:
        while self._queued or self._running:
            for node, key in self._next_writes(self.concurrency - len(self._running)):
                value = self._queued.pop((node, key))
                self._inflight.add(node)
                task = asyncio.get_running_loop().create_task(self._write(node, key, value))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
            if self._running:
                await asyncio.wait(set(self._running), return_when=asyncio.FIRST_COMPLETED)

    def _next_writes(self, free: int) -> list[tuple[str, str]]:
        """Up to `free` queued writes, oldest first, at most one per node and none of a node being
        written. The scan stops there: a pass queues a write per node, and scanning the whole
        queue after each completed write made draining quadratic (5,000 nodes: 6 M steps)."""
        picked: list[tuple[str, str]] = []
        nodes: set[str] = set()
        if free <= 0:
            return picked
        for node, key in self._queued:
            if node in self._inflight or node in nodes:
                continue  # another key of this node is being written
            picked.append((node, key))
            nodes.add(node)
            if len(picked) >= free:
                break
        return picked

    async def _write(self, node: str, key: str, value: str | None) -> None:
        try:
            await self.client.patch_node(node, hs.requesting_patch(key, value), answer=False)
            self.written += 1
            log.debug("node %s: %s set to %r", node, key, value)
        except ApiError as exc:
            self.failed += 1
            level = logging.DEBUG if is_not_found(exc) else logging.WARNING
            log.log(level, "node %s: failed to patch %s: %s", node, key, exc)
        except Exception as exc:  # connection errors, timeouts: logged only, the next pass retries
            self.failed += 1
            log.warning("node %s: failed to patch %s: %s", node, key, exc)
        finally:
            self._inflight.discard(node)


# ---------------------------------------------------------------------------------------------
# The loop


@dataclass(slots=True)
class PassReport:
    """What one pass did (logged at debug level; tests read it)."""

    nodes: int = 0
    updated: list[str] = field(default_factory=list)
    """Nodes whose devices were (re-)stored."""
    removed: list[str] = field(default_factory=list)
    """Nodes whose devices were dropped (zero devices)."""
    cleaned: list[str] = field(default_factory=list)
    """Registered nodes found unhealthy and cleaned up."""
    unhealthy: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    """Node -> inventory errors, "; "-joined over vendors (registered devices kept). A vendor
    whose inventory is absent (no annotation; for a capacity vendor, none of its resources in the
    capacity) counts only on a node with no device at all (then the first such vendor's error)."""
    requested: list[str] = field(default_factory=list)
    """Nodes a `Requesting_<now>` stamp was asked for."""


@dataclass(slots=True)
class _Decoded:
    source: tuple[str | None, ...]
    """The values of the vendor's inventory annotations this was decoded from."""
    devices: list[DeviceInfo] | None
    error: str | None


def _note(names: list[str], name: str) -> None:
    # One node is registered at a time, so only the last name can repeat (a pass is not
    # quadratic in the fleet's size).
    if not names or names[-1] != name:
        names.append(name)


class _NodeEvents:
    """Reflector handler for the node informer: add/delete wake the loop (updates do not, §8.3)."""

    def __init__(self, loop: RegistrationLoop) -> None:
        self._loop = loop

    def on_add(self, obj: Obj) -> None:
        self._loop.notify()

    def on_update(self, old: Obj, new: Obj) -> None:
        pass

    def on_delete(self, obj: Obj) -> None:
        name = node_name(obj)
        if name:
            self._loop.forget_node(name)
        self._loop.notify()


class RegistrationLoop:
    def __init__(
        self,
        client: KubeClient,
        state: SchedulerState,
        nodes: Store,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        ready: Callable[[], bool] = lambda: True,
        on_node_deleted: Callable[[str], None] | None = None,
        on_pass: Callable[[], Awaitable[None]] | None = None,
        now: Callable[[], datetime] = local_now,
        tz: tzinfo | None = None,
        interval: float = DEFAULT_INTERVAL,
        write_concurrency: int = 4,
        synced: asyncio.Event | None = None,
    ) -> None:
        """
        nodes: the node informer's Store; the vendors are the state's. ready: True once the
        informers have synced.
        is_leader: passes are skipped while it is False. on_node_deleted: called with the node name
        when the informer reports a deletion (the node locker forgets the node). on_pass: awaited
        after each pass, e.g. LeaderTracker.label_pods; its failures are logged. now/tz: clock and
        zone of the handshake stamps (tz None = local zone, as HAMi). synced: the event the filter
        waits on (a new one if not given).
        """
        self.client = client
        self.state = state
        self.nodes = nodes
        self.vendors = state.vendors
        self.is_leader = is_leader
        self.ready = ready
        self.on_node_deleted = on_node_deleted
        self.on_pass = on_pass
        self.now = now
        self.tz = tz
        self.interval = interval
        self.synced = synced if synced is not None else asyncio.Event()
        """Set after the first pass (and every pass after); cleared when leadership is lost."""
        self.passes = 0
        self.last_report: PassReport | None = None
        self.handler = _NodeEvents(self)
        """Give this to the node Reflector as its handler."""
        self.writer = NodeAnnotationWriter(client, keys.NODE_HANDSHAKE, write_concurrency)
        # node -> vendor key -> devices stored for it; the state holds their concatenation.
        self._inventory: dict[str, dict[str, list[DeviceInfo]]] = {}
        self._decoded: dict[tuple[str, str], _Decoded] = {}
        self._stamps = stamp_keys(self.vendors)
        self._last_error: dict[tuple[str, str], str] = {}
        self.problems: dict[str, str] = {}
        """Node -> why its inventory is unusable, as of its last registration (explain)."""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- wake-ups --------------------------------------------------------------------------------

    def notify(self) -> None:
        """Ask for a pass soon; many notifications before it runs make one pass (size-1 channel)."""
        self._wake.set()

    def on_leader_change(self, leader: bool) -> None:
        """LeaderTracker listener: a new leader registers at once; a follower is not synced."""
        if leader:
            self.notify()
        else:
            self.synced.clear()

    def forget_node(self, name: str) -> None:
        """The node was deleted: drop its devices, the vendors' state and pending handshake writes."""
        self.state.remove_node(name)
        self._inventory.pop(name, None)
        self.problems.pop(name, None)
        for vendor in self.vendors:
            vendor.forget_node(name)
            self._decoded.pop((name, vendor.key), None)
            self._last_error.pop((name, vendor.key), None)
        self.writer.discard(name)
        if self.on_node_deleted is not None:
            try:
                self.on_node_deleted(name)
            except Exception:
                log.exception("node %s: on_node_deleted hook failed", name)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name="node registration")
            self.notify()  # first attempt now; skipped if the informers are not synced yet
        return self._task

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.writer.close()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_tick = loop.time() + self.interval
        while True:
            try:
                # Not wait_for: on 3.11 it can swallow the cancel of a stop() that meets a wake-up
                # (stop right after start), and the loop would then never end.
                async with asyncio.timeout(max(0.0, next_tick - loop.time())):
                    await self._wake.wait()
            except TimeoutError:
                next_tick = max(next_tick + self.interval, loop.time())
            self._wake.clear()
            if not self.ready():
                log.debug("registration: informers not synced yet, pass skipped")
                continue
            if not self.is_leader():
                log.debug("registration: not the leader, pass skipped")
                continue
            try:
                await self.run_pass()
            except Exception:
                log.exception("registration pass failed")

    # -- one pass --------------------------------------------------------------------------------

    async def run_pass(self) -> PassReport:
        """One registration pass over the node Store (regardless of leadership/readiness)."""
        report = PassReport()
        now = self.now()
        requesting = hs.format_requesting(now, self.tz)  # one stamp per pass: every node is asked at `now`
        nodes = self.nodes.list()
        report.nodes = len(nodes)
        for done, listed in enumerate(nodes):
            name = node_name(listed)
            if not name:
                continue
            node = listed
            if done and done % PASS_YIELD_EVERY == 0:
                # A pass over thousands of nodes takes a second: let filters and binds run
                # meanwhile, then read the node again (updated or deleted since the listing).
                await asyncio.sleep(0)
            if done >= PASS_YIELD_EVERY:
                current = self.nodes.get(None, name)
                if current is None:
                    continue
                node = current
            try:
                self._register(name, node, now, report, requesting=requesting)
            except Exception:  # a bug on one node must not stop the others
                log.exception("node %s: registration failed", name)
        self.passes += 1
        self.last_report = report
        self.synced.set()
        log.debug(
            "registration pass %d: %d nodes, updated %s, removed %s, cleaned %s, errors %s",
            self.passes,
            report.nodes,
            report.updated,
            report.removed,
            report.cleaned,
            sorted(report.errors),
        )
        if self.on_pass is not None:
            try:
                await self.on_pass()
            except Exception:
                log.exception("registration: post-pass hook failed")
        return report

    async def flush_writes(self) -> None:
        """Wait for the handshake writes asked for so far (tests, shutdown)."""
        await self.writer.flush()

    def _register(self, name: str, node: Obj, now: datetime, report: PassReport, *, requesting: str) -> None:
        annotations = node_annotations(node)
        stored = self._inventory.get(name, {})
        changed = updated = current = False
        errors: list[str] = []
        absent: list[str] = []
        for vendor in self.vendors:
            key = vendor.key
            decoded = self._decode(name, vendor, node, annotations)
            health = vendor.check_health(node, now, self.tz)
            if health.write_requesting and vendor.handshake_key is not None:
                self.writer.submit(name, requesting, vendor.handshake_key)
                _note(report.requested, name)
            if not health.healthy:
                _note(report.unhealthy, name)
                if key in stored:
                    log.warning("node %s: %s devices are unhealthy, cleaning up node", name, key)
                    if vendor.cleanup_key is not None:
                        self.writer.submit(name, None, vendor.cleanup_key)
                    vendor.forget_node(name)
                    del stored[key]
                    changed = True
                    _note(report.cleaned, name)
                continue
            if decoded.error is not None:
                has_inventory = carries_inventory(vendor, node, annotations)
                self._log_error(name, vendor, decoded.error, has_inventory)
                (errors if has_inventory else absent).append(decoded.error)
                continue
            self._last_error.pop((name, key), None)
            devices = decoded.devices or []
            if not devices:
                if key in stored:
                    log.info("node %s: no %s devices registered any more", name, key)
                    del stored[key]
                changed = True
                _note(report.removed, name)
                continue
            if not health.need_update:
                current = True  # registered devices still right: only cordon/annotations may move
                continue
            if key not in stored:
                log.info("node %s: registered %d %s devices", name, len(devices), key)
            stored[key] = devices
            changed = updated = True
        if errors:
            report.errors[name] = "; ".join(errors)
        elif absent and not stored:
            report.errors[name] = absent[0]
        if name in report.errors:
            self.problems[name] = report.errors[name]
        else:
            self.problems.pop(name, None)
        if stored:
            self._inventory[name] = stored
        else:
            self._inventory.pop(name, None)
        cordon = decode_cordon(annotations.get(keys.DEVICE_CORDON))
        if not stored:
            if changed:
                self.state.remove_node(name)
            return
        if not changed:
            if current:
                self._refresh(name, cordon, annotations)
            return
        devices = [d for vendor in self.vendors for d in stored.get(vendor.key, ())]
        self._store(name, devices, cordon, annotations)
        if updated:
            _note(report.updated, name)

    def _decode(self, name: str, vendor: Vendor, node: Obj, annotations: dict[str, str]) -> _Decoded:
        """The vendor's inventory, decoded once per distinct value of its inventory annotations."""
        source = tuple(map(annotations.get, vendor.inventory_keys))
        cached = self._decoded.get((name, vendor.key)) if source else None
        if cached is not None and cached.source == source:
            return cached
        try:
            result = _Decoded(source, vendor.node_devices(node), None)
        except InventoryError as exc:
            result = _Decoded(source, None, str(exc))
        if source:
            self._decoded[(name, vendor.key)] = result
        return result

    def _refresh(self, name: str, cordon: frozenset[str], annotations: dict[str, str]) -> None:
        view = self.state.ledger.view(name)
        if view is not None:
            self._store(name, view.devices, cordon, annotations)

    def _store(
        self, name: str, devices: list[DeviceInfo], cordon: frozenset[str], annotations: dict[str, str]
    ) -> None:
        view = self.state.ledger.view(name)
        if (
            view is not None
            and view.cordoned == cordon
            and _same_apart_from(view.annotations, annotations, self._stamps)
            and view.devices == devices
        ):
            # Nothing a decision reads moved (handshake stamps and lock values are rewritten by every
            # pass and bind): the node keeps its generation, so its cached verdicts and summary stay.
            return
        # Same device list ⇒ the ledger keeps the usage and only swaps cordon/annotations.
        self.state.set_node_devices(name, devices, cordon, annotations)

    def _log_error(self, name: str, vendor: Vendor, error: str, has_inventory: bool) -> None:
        if not has_inventory:
            # Nodes without this vendor's devices: normal, would be noise at every pass.
            log.debug("node %s: %s", name, error)
        elif self._last_error.get((name, vendor.key)) != error:
            log.warning(
                "node %s: unusable %s inventory (registered devices kept): %s", name, vendor.key, error
            )
        self._last_error[(name, vendor.key)] = error
