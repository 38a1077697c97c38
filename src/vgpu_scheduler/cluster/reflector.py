"""Reflector: keep a Store equal to the API server's view of one resource, and tell a handler.

LIST (paginated) → WATCH from the list's resourceVersion with bookmarks → on 410 Gone (in-stream
ERROR or HTTP 410) RELIST and diff against the store, so deletes that happened while we were not
watching are still delivered → on connection errors reconnect with jittered exponential backoff
and resume from the last resourceVersion seen (events or bookmarks), so nothing is replayed or lost.

Why our own: the Python clients either give up after one 410 or re-watch "from now" and silently
lose the deletes in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from dataclasses import dataclass, field
from typing import Any, Protocol

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.api import ResourceType
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError, is_gone
from vgpu_scheduler.cluster.store import Store
from vgpu_scheduler.gctuning import gc_paused
from vgpu_scheduler.wire import objects

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def _without_managed_fields(obj: Obj) -> Obj:
    """`obj` without metadata.managedFields, as kube-scheduler's informers keep pods: nothing here
    reads them, and they are a third of a pod's bytes as kube-apiserver sends it (more once kubelet
    has updated its status). Edited in place: the reflector owns what its client decoded."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class Handler(Protocol):
    """Synchronous callbacks (the engine is pure); exceptions are logged and do not stop the reflector."""

    def on_add(self, obj: Obj) -> None: ...

    def on_update(self, old: Obj, new: Obj) -> None: ...

    def on_delete(self, obj: Obj) -> None: ...


@dataclass
class Backoff:
    """Exponential backoff: initial, ×factor per failure up to maximum, plus up to `jitter`×delay."""

    initial: float = 0.2
    maximum: float = 10.0
    factor: float = 2.0
    jitter: float = 0.5
    rng: random.Random = field(default_factory=random.Random)
    _next: float = 0.0

    def next(self) -> float:
        base = self._next or self.initial
        self._next = min(base * self.factor, self.maximum)
        return base * (1.0 + self.jitter * self.rng.random())

    def reset(self) -> None:
        self._next = 0.0


@dataclass
class ReflectorStats:
    lists: int = 0  # successful LISTs (the first one and every relist)
    relists_after_gone: int = 0
    watches: int = 0  # watch streams opened
    bookmarks: int = 0
    errors: int = 0  # failed requests / cut streams (each followed by a backoff sleep)


class Reflector:
    def __init__(
        self,
        client: KubeClient,
        resource: str | ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        handler: Handler | None = None,
        store: Store | None = None,
        page_size: int = 500,
        watch_timeout: float = 300.0,
        backoff: Backoff | None = None,
        min_watch_duration: float = 1.0,
    ) -> None:
        """watch_timeout: each watch asks the server for timeoutSeconds in [t, 2t) (client-go spreads
        them the same way so reconnects of many clients do not line up)."""
        self.client = client
        self.rt = api.resource_type(resource)
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.handler = handler
        self.store = store if store is not None else Store()
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.backoff = backoff or Backoff()
        self.min_watch_duration = min_watch_duration
        self.resource_version = ""
        self.stats = ReflectorStats()
        self.synced = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.rt.qualified + (f" in {self.namespace}" if self.namespace else "")

    @property
    def has_synced(self) -> bool:
        """True once the first LIST has been applied to the store."""
        return self.synced.is_set()

    async def wait_synced(self, timeout: float | None = None) -> bool:
        try:
            async with asyncio.timeout(timeout):
                await self.synced.wait()
        except TimeoutError:
            return False
        return True

    def start(self) -> asyncio.Task[None]:
        if self._task is None or self._task.done():
            self._stop.clear()
            self._task = asyncio.create_task(self.run(), name=f"reflector {self.name}")
        return self._task

    async def stop(self) -> None:
        self._stop.set()
        task, self._task = self._task, None
        # Cancel until it is really done: on Python 3.11 a cancellation can be swallowed by
        # asyncio.wait_for in code we await (e.g. a transport's read), and one lost cancel must not
        # leave stop() waiting for a watch that lasts minutes.
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.1)
        if task is not None and not task.cancelled() and task.exception() is not None:
            log.warning("reflector %s ended with %r", self.name, task.exception())

    async def run(self) -> None:
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    await self._list_and_replace()
                    need_list = False
                    self.backoff.reset()
                started = asyncio.get_running_loop().time()
                got_events = await self._watch_once()
                if got_events:
                    self.backoff.reset()
                elif asyncio.get_running_loop().time() - started < self.min_watch_duration:
                    # A watch that ends at once with nothing in it: do not spin on it.
                    await self._sleep(self.backoff.next())
            except ApiError as exc:
                if is_gone(exc):
                    log.info("reflector %s: %s; relisting", self.name, exc.message)
                    self.stats.relists_after_gone += 1
                    need_list = True
                    continue
                self.stats.errors += 1
                log.warning("reflector %s: %s", self.name, exc)
                await self._sleep(self.backoff.next())
            except ApiConnectionError as exc:
                self.stats.errors += 1
                log.warning(
                    "reflector %s: %s; resuming from resourceVersion %s",
                    self.name,
                    exc,
                    self.resource_version or "(list)",
                )
                await self._sleep(self.backoff.next())

    async def _sleep(self, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):  # not wait_for: it can swallow a cancellation (3.11)
                await self._stop.wait()

    async def _list_and_replace(self) -> None:
        # The whole relist with the GC paused: otherwise each page's dicts trigger collections that
        # scan the full store (8 s instead of 2 s for 50,000 pods here).
        with gc_paused():
            items, rv = await self.client.list_all(
                self.rt,
                self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                page_size=self.page_size,
                each=_without_managed_fields,
            )
            self._replace(items, rv)

    def _replace(self, items: list[Obj], rv: str) -> None:
        self.stats.lists += 1
        fresh = {api.key_of(o): o for o in items}
        # Deletes first: the ledger frees devices before the survivors are re-counted.
        for key in self.store.all_keys():
            if key not in fresh:
                old = self.store.remove(key)
                if old is not None:
                    self._call("on_delete", old)
        for obj in fresh.values():
            old = self.store.upsert(obj)
            if old is None:
                self._call("on_add", obj)
            elif _rv(old) != _rv(obj):
                self._call("on_update", old, obj)
        self.resource_version = rv
        self.synced.set()

    async def _watch_once(self) -> bool:
        timeout = int(self.watch_timeout * (1.0 + self.backoff.rng.random())) or 1
        self.stats.watches += 1
        got = False
        events = self.client.watch(
            self.rt,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            resource_version=self.resource_version,
            timeout_seconds=timeout,
            allow_bookmarks=True,
        )
        async with contextlib.aclosing(events):
            async for type_, obj in events:
                got = True
                self._apply(type_, obj)
                if self._stop.is_set():
                    break
        return got

    def _apply(self, type_: str, obj: Obj) -> None:
        rv = _rv(obj)
        if type_ == "BOOKMARK":
            self.stats.bookmarks += 1
        elif type_ in ("ADDED", "MODIFIED"):
            old = self.store.upsert(_without_managed_fields(obj))
            if old is None:
                self._call("on_add", obj)
            else:
                self._call("on_update", old, obj)
        elif type_ == "DELETED":
            if self.store.remove(api.key_of(obj)) is not None:
                self._call("on_delete", obj)
        else:
            log.warning("reflector %s: ignoring watch event of type %r", self.name, type_)
            return
        if rv:
            self.resource_version = rv

    def _call(self, method: str, *args: Obj) -> None:
        if self.handler is None:
            return
        try:
            getattr(self.handler, method)(*args)
        except Exception:
            # One bad object must not stop the stream for all the others.
            key = api.key_of(args[-1])
            log.exception("reflector %s: %s(%s) failed", self.name, method, key)


def _rv(obj: Obj) -> str:
    return objects.resource_version(obj)
