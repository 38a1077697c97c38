"""One watch stream of the in-memory cluster, shaped like kube-apiserver's.

A watch is an async iterator of the JSON lines the HTTP stream carries, so the in-process transport
and the fake HTTP server (fakeapi) hand out the same bytes. Events are queued as they are committed
(the writer never waits for a reader); a consumer that falls `watch_queue_limit` lines behind is cut,
as the apiserver cuts a watcher that cannot keep up, rather than letting memory grow without bound.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.api import Obj, ResourceType
from vgpu_scheduler.cluster.errors import ApiConnectionError
from vgpu_scheduler.standin.memory import selectors
from vgpu_scheduler.standin.memory.codec import Stored, encode, event_line
from vgpu_scheduler.standin.memory.store import Event, ObjectStore


class HubSettings(Protocol):
    """What a watch reads live from the hub that made it (fanout.WatchHub): the store and the
    settings a test may change while watches are open."""

    store: ObjectStore
    bookmark_interval: float
    watch_queue_limit: int

log = logging.getLogger(__name__)


class WatchDropped(ApiConnectionError):
    """The in-memory cluster cut a watch (fault injection or a consumer too slow to keep up)."""


# Queue markers: the stream ends with an error (connection reset) or cleanly (timeout, 410 sent).
_DROP = object()
_END = object()


class MemoryWatch:
    """One watch stream: an async iterator of JSON lines (bytes, no newline). It ends after
    `timeout_seconds`; raises WatchDropped when cut by `drop_watches()`. Bookmarks come every
    `bookmark_interval`, 2 s before the timeout (as kube-apiserver does), and on `trigger_bookmarks()`."""

    def __init__(
        self,
        hub: HubSettings,
        rt: ResourceType,
        *,
        namespace: str | None,
        lsel: selectors.LabelSelector,
        fsel: selectors.FieldSelector,
        allow_bookmarks: bool,
        timeout_seconds: float | None,
        decoded: bool = False,
    ) -> None:
        """`decoded`: the reader takes events as dicts (`next_event`), so this watch may be handed
        the committed object itself rather than its line (an in-process reader, MemoryTransport)."""
        self.hub = hub
        self._decoded = decoded and rt is not api.EVENTS_V1  # events.k8s.io/v1 is converted
        self.rt = rt
        self._storage = hub.store.storage(rt)
        self.namespace = namespace if rt.namespaced else None
        self._lsel, self._fsel = lsel, fsel
        self._filtered = not (lsel.empty and fsel.empty)
        self.allow_bookmarks = allow_bookmarks
        self._queue: deque[Any] = deque()
        self._wakeup: asyncio.Event | None = None
        now = time.monotonic()
        self._deadline = now + timeout_seconds if timeout_seconds else None
        self._final_bookmark_at = (
            self._deadline - 2.0 if self._deadline and timeout_seconds and timeout_seconds > 4 else None
        )
        self._next_bookmark = now + hub.bookmark_interval
        self._closed = False
        # One timer for the next deadline or bookmark, kept across reads while that time stands
        # (a timer per empty read was most of an idle watch's cost).
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None

    @property
    def closed(self) -> bool:
        """No more events will be queued (the queue may still hold lines to read)."""
        return self._closed

    def matches(self, obj: Obj) -> bool:
        """Whether an object is in this watch's view (namespace and selectors)."""
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return not self._filtered or selectors.matches(self.rt, obj, self._lsel, self._fsel)

    def matches_stored(self, stored: Stored) -> bool:
        """`matches` of a stored object of this watch's namespace (the caller skips the others by
        key), decoding it only when selectors need to look inside."""
        if not self._filtered:
            return True
        return self.matches(stored.obj)

    def offer(self, ev: Event) -> None:
        """Queue an event if it concerns this watch. With selectors, an object that stops matching
        is reported DELETED and one that starts matching ADDED (like the watch cache)."""
        if self._closed:
            return
        if self.namespace is not None and ev.namespace != self.namespace:
            return
        type_ = ev.type
        if self._filtered:
            new_ok = selectors.matches(self.rt, ev.new.obj, self._lsel, self._fsel)
            if type_ == "MODIFIED":
                old_ok = ev.old is not None and selectors.matches(self.rt, ev.old.obj, self._lsel, self._fsel)
                if not (old_ok or new_ok):
                    return
                type_ = "MODIFIED" if old_ok and new_ok else ("ADDED" if new_ok else "DELETED")
            elif not new_ok:
                return
        if self._decoded and ev.owned is not None and type_ == ev.type:
            # Nothing else holds the committed dict: give it away instead of a line to decode.
            obj, ev.owned = ev.owned, None
            rt = self.rt
            self.push({"type": type_, "object": {"kind": rt.kind, "apiVersion": rt.api_version, **obj}})
            return
        cache_key = (type_, self.rt.group)
        line = ev.lines.get(cache_key)
        if line is None:
            line = ev.lines[cache_key] = event_line(self.rt, type_, ev.new)
        self.push(line)

    def push(self, item: Any) -> None:
        """Queue a line (or an end marker) and wake the reader."""
        if self._closed:
            return
        if len(self._queue) >= self.hub.watch_queue_limit:
            # Like the apiserver with a consumer that cannot keep up: terminate the watch.
            log.warning(
                "memory cluster: watch on %s fell %d events behind; dropping it",
                self.rt.plural,
                len(self._queue),
            )
            self._queue.clear()
            self.drop()
            return
        self._queue.append(item)
        if self._wakeup is not None:
            self._wakeup.set()

    def push_bookmark(self, annotations: Mapping[str, str] | None = None) -> None:
        """Queue a BOOKMARK at the current resourceVersion."""
        self.push(
            encode(
                {
                    "type": "BOOKMARK",
                    "object": api.bookmark_object(self.rt, self.hub.store.rv, annotations),
                }
            )
        )

    def drop(self) -> None:
        """Cut the stream: the reader gets WatchDropped after the lines already queued."""
        self.push(_DROP)
        self._detach()

    def finish(self) -> None:
        """End the stream cleanly after the lines already queued (e.g. the 410 ERROR line)."""
        self.push(_END)
        self._detach()

    def _detach(self) -> None:
        # Unregistered at once so that commits stop offering events to a finished watch.
        self._closed = True
        self._storage.watchers.discard(self)
        self._cancel_timer()
        if self._wakeup is not None:
            self._wakeup.set()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_at = None

    def _on_timer(self) -> None:
        self._timer = self._timer_at = None  # fired (maybe a clock tick early): re-armed if needed
        if self._wakeup is not None:
            self._wakeup.set()

    def close(self) -> None:
        """Stop the watch (the consumer went away)."""
        self._detach()
        self._queue.clear()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        item = await self._next_item()
        if isinstance(item, dict):  # only a `decoded` watch queues these
            return encode(item)
        line: bytes = item
        return line

    async def next_event(self) -> dict[str, Any] | bytes:
        """The next event: a decoded dict (the reader owns it), or a line still to decode. Raises
        StopAsyncIteration at the end and WatchDropped when cut, as iterating does."""
        item: dict[str, Any] | bytes = await self._next_item()
        return item

    async def _next_item(self) -> Any:
        while True:
            if self._queue:
                item = self._queue.popleft()
                if item is _DROP:
                    self._queue.clear()
                    raise WatchDropped("watch connection dropped")
                if item is _END:
                    raise StopAsyncIteration
                return item
            if self._closed:
                raise StopAsyncIteration
            now = time.monotonic()
            if self._deadline is not None and now >= self._deadline:
                self.close()
                raise StopAsyncIteration
            if self.allow_bookmarks and (
                now >= self._next_bookmark
                or (self._final_bookmark_at is not None and now >= self._final_bookmark_at)
            ):
                if self._final_bookmark_at is not None and now >= self._final_bookmark_at:
                    self._final_bookmark_at = None
                self._next_bookmark = now + self.hub.bookmark_interval
                self.push_bookmark()
                continue
            wake_at = [
                t
                for t in (
                    self._deadline,
                    self._next_bookmark if self.allow_bookmarks else None,
                    self._final_bookmark_at if self.allow_bookmarks else None,
                )
                if t is not None
            ]
            if self._wakeup is None:
                self._wakeup = asyncio.Event()
            self._wakeup.clear()
            # A timer sets the event rather than `asyncio.wait_for`: on Python 3.11 wait_for swallows
            # a cancellation that lands just as the wait completes (an event pushed in the same loop
            # iteration), and the consumer would then read on until the watch times out.
            wake = min(wake_at) if wake_at else None
            loop = asyncio.get_running_loop()
            if wake != self._timer_at or self._timer_loop is not loop:
                self._cancel_timer()
                if wake is not None:
                    self._timer = loop.call_later(max(wake - now, 0), self._on_timer)
                    self._timer_at, self._timer_loop = wake, loop
            await self._wakeup.wait()
