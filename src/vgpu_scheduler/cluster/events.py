"""Pod events, the way HAMi's client-go event broadcaster writes them (§8.3 "Events").

HAMi records `FilteringSucceed`/`FilteringFailed`/`BindingSucceed`/`BindingFailed` through
client-go's legacy recorder, i.e. core/v1 Events:

* `metadata.name` = `<pod name>.<unix nanoseconds in hex>`, namespace = the pod's (or `default`);
* `involvedObject` = {kind: Pod, namespace, name, uid, apiVersion: v1, resourceVersion} (empty
  fields omitted, as Go's `omitempty` does);
* `source` = {component: --scheduler-name} (`{}` when the flag is empty); `reportingComponent` is
  the same component and `reportingInstance` the (unset, so empty) source host;
* `firstTimestamp` = `lastTimestamp` = now (RFC 3339, seconds, UTC `Z`), `count` 1, `eventTime`
  null, `type` Normal or Warning.

`record()` never blocks and never does I/O: it builds the event and puts it on a bounded queue
(full ⇒ dropped, logged at debug level, like the broadcaster's `ActionOrDrop`). A few background
senders write the events, several at a time: one at a time, a burst's API latency (a few hundred
ms per write under load) let them keep up with one pod in five, and the rest were dropped.
Identical events (same pod, type, reason, message) are folded like client-go's correlator does,
one after the other: the Event already written is patched with `count+1` and a new `lastTimestamp`
(recreated under the same name if it expired meanwhile); the last 4096 distinct events are
remembered, with no time window, as in client-go. Not reproduced: client-go's aggregation of 10+
*similar* events with different messages, and its per-object spam filter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError, is_already_exists, is_not_found
from vgpu_scheduler.wire import objects

log = logging.getLogger(__name__)

Obj = dict[str, Any]

NORMAL = "Normal"
WARNING = "Warning"
EVENT_TYPES = frozenset({NORMAL, WARNING})

# Reasons HAMi records (callers build the messages, §5.7 and §6.1).
FILTERING_SUCCEED = "FilteringSucceed"
FILTERING_FAILED = "FilteringFailed"
BINDING_SUCCEED = "BindingSucceed"
BINDING_FAILED = "BindingFailed"

CACHE_SIZE = 4096  # client-go's maxLruCacheEntries
SENDERS = 32
"""Event writes in flight at most: enough for a burst of binds at a few hundred ms per write."""


def utc_now() -> datetime:
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    """metav1.Time's JSON form: second precision, UTC, `Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def unix_nanos(moment: datetime) -> int:
    """Exact nanoseconds since the epoch (microsecond resolution; naive = local time)."""
    delta = moment.astimezone(UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def pod_reference(pod: Mapping[str, Any]) -> Obj:
    """The ObjectReference client-go builds for a Pod, empty fields left out."""
    meta = objects.metadata(pod)
    ref: Obj = {"kind": "Pod"}
    for key in ("namespace", "name", "uid"):
        value = meta.get(key)
        if isinstance(value, str) and value:
            ref[key] = value
    ref["apiVersion"] = "v1"
    rv = meta.get("resourceVersion")
    if isinstance(rv, str) and rv:
        ref["resourceVersion"] = rv
    return ref


def make_event(
    pod: Mapping[str, Any],
    type_: str,
    reason: str,
    message: str,
    *,
    component: str,
    moment: datetime,
    nanos: int,
) -> Obj:
    """The core/v1 Event body (without kind/apiVersion, which the client adds)."""
    ref = pod_reference(pod)
    ts = rfc3339(moment)
    return {
        "metadata": {
            "name": f"{ref.get('name', '')}.{nanos:x}",
            "namespace": ref.get("namespace") or "default",
        },
        "involvedObject": ref,
        "reason": reason,
        "message": message,
        "source": {"component": component} if component else {},
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
        "type": type_,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": "",
    }


@dataclass(slots=True)
class _Seen:
    name: str
    count: int
    first: str


@dataclass(slots=True)
class RecorderStats:
    created: int = 0
    patched: int = 0
    dropped: int = 0
    """Queue full, or still queued when stop() gave up."""
    failed: int = 0
    """Rejected by the API, or unreachable after the retries."""
    invalid: int = 0
    """Bad event type or a pod without a name: never queued."""


class EventRecorder:
    def __init__(
        self,
        client: KubeClient,
        component: str,
        max_queue: int = 1000,
        *,
        now: Callable[[], datetime] = utc_now,
        cache_size: int = CACHE_SIZE,
        retries: int = 3,
        retry_delay: float = 1.0,
        senders: int = SENDERS,
    ) -> None:
        """component: --scheduler-name (may be empty). retries/retry_delay: attempts after a
        connection error (API errors are final, as in client-go). senders: writes in flight at most."""
        self.client = client
        self.component = component
        self.now = now
        self.cache_size = cache_size
        self.retries = retries
        self.retry_delay = retry_delay
        self.stats = RecorderStats()
        self._queue: asyncio.Queue[tuple[tuple[str, ...], Obj]] = asyncio.Queue(max(1, max_queue))
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._last_nanos = 0
        self._senders = max(1, senders)
        self._tasks: set[asyncio.Task[None]] = set()  # the running senders (each leaves when it ends)
        # key -> done when the write of an identical event in flight ends: the next one waits for
        # it, then patches its count instead of creating a second Event.
        self._in_flight: dict[tuple[str, ...], asyncio.Future[None]] = {}
        self._closed = False

    # -- producer side (sync, non-blocking) ------------------------------------------------------

    def record(self, pod: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Queue one event on `pod`; returns at once. Starts the sender if it is not running."""
        if type_ not in EVENT_TYPES:
            self.stats.invalid += 1
            log.error("unsupported event type %r (reason %s), not recorded", type_, reason)
            return
        name = objects.name(pod)
        if not name:
            self.stats.invalid += 1
            log.error("cannot reference a pod without a name; event %s not recorded: %s", reason, message)
            return
        if self._closed:
            self.stats.dropped += 1
            log.debug("event recorder stopped, dropping %s event for pod %s", reason, name)
            return
        moment = self.now()
        nanos = max(unix_nanos(moment), self._last_nanos + 1)  # names must not collide
        self._last_nanos = nanos
        event = make_event(pod, type_, reason, message, component=self.component, moment=moment, nanos=nanos)
        ref = event["involvedObject"]
        key = (
            event["metadata"]["namespace"],
            ref.get("uid", ""),
            name,
            type_,
            reason,
            message,
        )
        try:
            self._queue.put_nowait((key, event))
        except asyncio.QueueFull:
            self.stats.dropped += 1
            log.debug("event queue full, dropping %s event for pod %s/%s", reason, ref.get("namespace"), name)
            return
        self._ensure_started()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._closed = False
        self._ensure_started()

    def _ensure_started(self) -> None:
        if len(self._tasks) >= self._senders:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # queued; sent once start() runs inside the event loop
        while len(self._tasks) < self._senders:
            task = loop.create_task(self._run(), name="event recorder")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def flush(self) -> None:
        """Wait until everything queued so far has been sent (or given up on)."""
        if self._queue.empty() and not self._tasks:
            return
        self._ensure_started()
        await self._queue.join()

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting events, send what is queued for at most `timeout` seconds, then stop."""
        self._closed = True
        if not self._queue.empty():
            self._ensure_started()
        if self._tasks:  # queued or in flight: a write already taken from the queue is waited for too
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), timeout)
        tasks, self._tasks = list(self._tasks), set()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        left = 0
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()
            left += 1
        if left:
            self.stats.dropped += left
            log.warning("event recorder stopped with %d unsent events", left)

    # -- sender ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            key, event = await self._queue.get()
            try:
                await self._send_in_turn(key, event)
            except asyncio.CancelledError:
                self.stats.dropped += 1  # stop() gave up on it in flight
                raise
            except Exception:
                self.stats.failed += 1
                log.exception("sending event %s failed", event["metadata"]["name"])
            finally:
                self._queue.task_done()

    async def _send_in_turn(self, key: tuple[str, ...], event: Obj) -> None:
        """`_send`, after any identical event already in flight (it folds into that one)."""
        while (earlier := self._in_flight.get(key)) is not None:
            await asyncio.shield(earlier)
        done = asyncio.get_running_loop().create_future()
        self._in_flight[key] = done
        try:
            await self._send(key, event)
        finally:
            del self._in_flight[key]
            done.set_result(None)

    async def _send(self, key: tuple[str, ...], event: Obj) -> None:
        namespace = event["metadata"]["namespace"]
        seen = self._seen.get(key)
        if seen is not None:
            count = seen.count + 1
            patch = {"count": count, "lastTimestamp": event["lastTimestamp"]}
            try:
                done = await self._attempt(
                    lambda: self.client.patch(api.EVENTS, seen.name, patch, namespace, answer=False), event
                )
            except ApiError as exc:
                if not is_not_found(exc):
                    self._failed(event, exc)
                    return
                # The Event expired (1 h TTL) or was deleted: write it again under the same name.
                event = {
                    **event,
                    "metadata": {**event["metadata"], "name": seen.name},
                    "count": count,
                    "firstTimestamp": seen.first,
                }
            else:
                if done:
                    self.stats.patched += 1
                    self._remember(key, _Seen(seen.name, count, seen.first))
                return
        try:
            done = await self._attempt(
                lambda: self.client.create_event(namespace, event, answer=False), event
            )
        except ApiError as exc:
            self._failed(event, exc)
            return
        if done:
            self.stats.created += 1
            self._remember(key, _Seen(event["metadata"]["name"], event["count"], event["firstTimestamp"]))

    async def _attempt(self, call: Callable[[], Any], event: Obj) -> bool:
        """Run `call`, retrying connection errors; ApiError propagates. False when given up."""
        for attempt in range(self.retries + 1):
            try:
                await call()
                return True
            except ApiConnectionError as exc:
                if attempt == self.retries:
                    self.stats.failed += 1
                    log.warning("unable to write event %s: %s (giving up)", event["metadata"]["name"], exc)
                    return False
                log.debug("unable to write event %s: %s (retrying)", event["metadata"]["name"], exc)
                await asyncio.sleep(self.retry_delay * (attempt + 1))
        return False

    def _failed(self, event: Obj, exc: ApiError) -> None:
        self.stats.failed += 1
        level = logging.DEBUG if is_already_exists(exc) else logging.WARNING
        log.log(level, "server rejected event %s: %s (will not retry)", event["metadata"]["name"], exc)

    def _remember(self, key: tuple[str, ...], seen: _Seen) -> None:
        self._seen[key] = seen
        self._seen.move_to_end(key)
        while len(self._seen) > self.cache_size:
            self._seen.popitem(last=False)
