"""The HAMi node lock: annotation `hami.io/mutex.lock` on the Node (§6.2).

Value `<RFC3339 time>,<namespace>,<pod name>` (legacy: bare RFC3339). The device plugin on the
node finds "its" pod through this value and deletes the annotation after Allocate, so the format
is wire contract. Every write carries the node's resourceVersion as a precondition, so two
scheduler replicas (or two binds) can never both believe they hold the lock.

Differences from HAMi, same wire result: an expired or dangling lock is taken over with one
guarded patch instead of delete-then-set, and a stale resourceVersion (409) is retried with a
fresh read instead of failing the bind. A lock is also dangling when its holder pod is already
bound to another node: that node's device plugin will never see the pod, so nothing would release
the lock before it expires (HAMi waits out the `--node-lock-timeout`, 5 min by default).

A lock that can never expire is stale too, and taken over the same way: one dated further in the
future than the timeout (the timeout itself is allowed for clock skew between writers), and one
whose value does not parse (`,,`, empty, garbage). HAMi fails the bind on such a node; its failure
path clears only a comma-free value, so a future owner-format lock or one like `,,` holds the node
until deleted by hand (a future one: until its time plus the timeout).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from vgpu_scheduler.cluster.client import JSON_PATCH, MERGE_PATCH
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.cluster.lockstats import (
    EXPIRED,
    FUTURE,
    HOLDER_BIND_FAILED,
    HOLDER_ELSEWHERE,
    HOLDER_GONE,
    HOLDER_TERMINAL,
    UNPARSABLE,
    NodeLockStats,
)
from vgpu_scheduler.engine.podinfo import is_terminal
from vgpu_scheduler.gocompat.durations import format_go_duration
from vgpu_scheduler.gocompat.gotime import GoTimeParseError, parse_rfc3339
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire.jsonpatch import escape_token
from vgpu_scheduler.wire.keys import BIND_PHASE, BIND_PHASE_FAILED, BIND_TIME, NODE_LOCK

log = logging.getLogger(__name__)

CONFLICT_RETRIES = 5
RETRY_STRATEGY = "{Duration:100ms Factor:2 Jitter:0.5 Steps:5 Cap:0s}"
"""HAMi's lock-write backoff as Go prints it (%+v of wait.Backoff) in its failure message."""
CONTENTION_POLL_SECONDS = 0.1
_LOCK_POINTER = "/metadata/annotations/" + escape_token(NODE_LOCK)


class NodeLockError(Exception):
    """The lock could not be taken for a reason other than another holder."""


class NodeLockContention(NodeLockError):
    """Another live pod holds the lock.

    `holder_named`: the lock names its holder pod, so releasing it on the failure path would be a
    no-op (only a legacy lock without an owner is cleared by that release)."""

    def __init__(self, message: str, *, holder_named: bool = False) -> None:
        super().__init__(message)
        self.holder_named = holder_named


class LockApi(Protocol):
    async def get_node(self, name: str) -> dict[str, Any]: ...

    async def patch_node(
        self,
        name: str,
        patch: dict[str, Any] | list[dict[str, Any]],
        *,
        answer: bool = True,
        content_type: str = MERGE_PATCH,
    ) -> dict[str, Any]:
        """`answer=False`: the lock never reads what a write answers (see KubeClient). A list
        is a JSON patch (content_type JSON_PATCH)."""
        ...

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...


@dataclass(slots=True, frozen=True)
class LockValue:
    taken_at: datetime
    namespace: str = ""
    pod: str = ""

    @property
    def has_owner(self) -> bool:
        return bool(self.namespace or self.pod)


def format_rfc3339(moment: datetime) -> str:
    """Go's time.RFC3339 layout: seconds precision, `Z` for UTC, else `+hh:mm`."""
    text = moment.isoformat(timespec="seconds")
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def format_lock(moment: datetime, namespace: str, pod: str) -> str:
    return f"{format_rfc3339(moment)},{namespace},{pod}"


def parse_lock(value: str) -> LockValue:
    """HAMi's ParseNodeLock, with its error texts (HAMi's bind fails with them; ours takes such a
    lock over, and explanations quote them)."""
    if "," not in value:
        return LockValue(_parse_time(value))
    parts = value.split(",")
    if len(parts) != 3:
        raise NodeLockError(f"malformed lock annotation: expected 3 parts, got {len(parts)} from {value}")
    return LockValue(_parse_time(parts[0]), parts[1], parts[2])


def _parse_time(text: str) -> datetime:
    try:
        return parse_rfc3339(text)
    except GoTimeParseError as exc:
        raise NodeLockError(str(exc)) from None


TAKEN_OVER_BECAUSE = {
    EXPIRED: "expired",
    FUTURE: "is dated beyond its timeout in the future",
    UNPARSABLE: "does not parse",
}
"""How a lock stale by time or by its value is described in logs and explanations."""


def stale_cause(taken_at: datetime, *, now: datetime, timeout: float) -> str | None:
    """EXPIRED or FUTURE when a lock taken at `taken_at` is stale at `now`, else None (live).

    Live from `timeout` before its time (clock skew between writers) to `timeout` after it, both
    ends included: HAMi's expiry is `age > timeout`, and a lock further ahead would hold the node
    longer than any lock written now could."""
    age = now - taken_at
    limit = timedelta(seconds=timeout)
    if age > limit:
        return EXPIRED
    if -age > limit:
        return FUTURE
    return None


PARSED_LOCKS_KEPT = 4096
"""How many lock values `judge_lock` keeps parsed (then it starts again from none)."""
_parsed_locks: dict[str, LockValue | None] = {}


def _parsed(value: str) -> LockValue | None:
    """parse_lock(value), None when it does not parse; kept by value. A filter in a burst asks
    about every locked node it passes over, and a lock value stays the same until it is released:
    each was parsed (an RFC 3339 time) once per node per filter before."""
    try:
        return _parsed_locks[value]
    except KeyError:
        pass
    try:
        held: LockValue | None = parse_lock(value)
    except NodeLockError:
        held = None
    if len(_parsed_locks) >= PARSED_LOCKS_KEPT:
        _parsed_locks.clear()
    _parsed_locks[value] = held
    return held


def judge_lock(value: str, *, now: datetime, timeout: float) -> tuple[LockValue | None, str | None]:
    """The `hami.io/mutex.lock` value parsed, and why it is stale at `now` (None: live).
    A value that does not parse is (None, UNPARSABLE): it never expires, so it is stale."""
    held = _parsed(value)
    if held is None:
        return None, UNPARSABLE
    return held, stale_cause(held.taken_at, now=now, timeout=timeout)


def expiry_of(taken_at: datetime, timeout: float) -> datetime | None:
    """taken_at + timeout; None past the last representable time (such a lock is far-future)."""
    try:
        return taken_at + timedelta(seconds=timeout)
    except OverflowError:
        return None


def lock_expires_at(value: str, timeout: float) -> datetime | None:
    """When the `hami.io/mutex.lock` value stops being live by age (its time + `timeout`); None
    when it does not parse, i.e. it is takeable already. A lock dated more than `timeout` ahead of
    now is takeable before that moment too (`stale_cause`); see `lockview.node_lock_deadlines`."""
    try:
        held = parse_lock(value)
    except NodeLockError:
        return None
    return expiry_of(held.taken_at, timeout)


def _annotations(node: dict[str, Any]) -> dict[str, str]:
    return node.get("metadata", {}).get("annotations") or {}


def has_lock_annotation(node: dict[str, Any]) -> bool:
    """The node carries a lock value (live or not): what `live_holder` looks at first."""
    return _annotations(node).get(NODE_LOCK) is not None


def _resource_version(node: dict[str, Any]) -> str:
    return str(node.get("metadata", {}).get("resourceVersion", ""))


def dangling_cause(pod: Mapping[str, Any], node_name: str, held: LockValue) -> str | None:
    """Why the existing holder pod of `held` on `node_name` can no longer need its lock, else None.

    HAMi waits out the lock timeout (5 minutes) in each of these cases; the lock only guards the
    window between a bind and its device plugin's Allocate, which is over for a pod that finished,
    was bound to another node, or whose bind failed after it took this lock. A failed phase from an
    earlier attempt (bind-time before the lock) says nothing about the current holder's bind."""
    if is_terminal(pod):
        return HOLDER_TERMINAL
    bound_to = objects.node_name(pod)
    if bound_to and bound_to != node_name:
        return HOLDER_ELSEWHERE
    if objects.annotation(pod, BIND_PHASE) == BIND_PHASE_FAILED:
        try:
            failed_bind_started = int(objects.annotation(pod, BIND_TIME) or "")
        except ValueError:
            return None
        if failed_bind_started >= int(held.taken_at.timestamp()):
            return HOLDER_BIND_FAILED
    return None


def probable_lock(pod: Mapping[str, Any]) -> str | None:
    """The value the node lock of a pod just bound most likely holds: the scheduler stamps the
    pod's bind-time and takes the lock in the same second (one clock), here in UTC. None when the
    pod carries no bind-time. Only a guess: `NodeLocker.release(expected=...)` checks it."""
    try:
        moment = datetime.fromtimestamp(int(objects.annotation(pod, BIND_TIME) or ""), UTC)
    except (ValueError, OverflowError, OSError):  # not a number, or no representable time
        return None
    return format_lock(moment, objects.namespace(pod) or "default", objects.name(pod))


def describe_lock(node: Mapping[str, Any], *, now: datetime, timeout: float) -> str:
    """The node lock in words ("" when there is none), for people asking why a pod waits; a stale
    one (expired, dated beyond `timeout` ahead, unparsable) says the next bind takes it over."""
    value = objects.annotation(node, NODE_LOCK)
    if value is None:
        return ""
    try:
        held = parse_lock(value)
    except NodeLockError as exc:
        return f"unparsable {NODE_LOCK} {value!r}: {exc}; the next bind takes it over"
    cause = stale_cause(held.taken_at, now=now, timeout=timeout)
    since = format_rfc3339(held.taken_at)
    text = f"held by {held.namespace}/{held.pod} since {since}" if held.has_owner else f"held since {since}"
    return text if cause is None else f"{text}, {stale_words(cause, timeout)}"


def stale_words(cause: str, timeout: float) -> str:
    """`cause` of a stale lock with `timeout`, for explanations."""
    return f"{TAKEN_OVER_BECAUSE[cause]} ({format_go_duration(timeout)}): the next bind takes it over"


@dataclass(frozen=True, slots=True)
class _HeldLock:
    """A cached node object's lock value, parsed, and the moments it is live between (both ends
    included; None: beyond the representable times), so a filter's walk compares two datetimes
    per locked node instead of redoing `stale_cause`'s arithmetic on every question."""

    node: dict[str, Any]
    held: LockValue | None
    live_from: datetime | None
    live_until: datetime | None

    @classmethod
    def of(cls, node: dict[str, Any], held: LockValue | None, timeout: float) -> _HeldLock:
        if held is None:
            return cls(node, None, None, None)
        limit = timedelta(seconds=timeout)
        try:
            live_from: datetime | None = held.taken_at - limit
        except OverflowError:
            live_from = None
        return cls(node, held, live_from, expiry_of(held.taken_at, timeout))

    def live_at(self, now: datetime) -> bool:
        """`stale_cause(taken_at, now=now, timeout=timeout) is None`, from the kept window."""
        return (self.live_from is None or self.live_from <= now) and (
            self.live_until is None or now <= self.live_until
        )


class NodeLocker:
    """Takes and releases node locks for binds; one instance per scheduler process."""

    def __init__(
        self,
        api: LockApi,
        *,
        timeout: float = 300.0,
        now: Callable[[], datetime] = lambda: datetime.now().astimezone(),
        cached_node: Callable[[str], dict[str, Any] | None] | None = None,
        locked_nodes: Callable[[], Collection[str]] | None = None,
    ) -> None:
        """`locked_nodes`: the names of the cached nodes that carry a lock annotation (an index
        kept by the node informer's store), so a filter need not read every node to rank them."""
        self._api = api
        self.timeout = timeout
        self._now = now
        self._cached_node = cached_node
        self._locked_nodes = locked_nodes
        self.stats = NodeLockStats()
        # Serialises this process's lock writes per node (HAMi keeps the same in-process mutex).
        self._local: dict[str, asyncio.Lock] = {}
        # node -> the cached node object's lock, parsed with its live window: `live_holder_test`'s memo.
        self._held_by_node: dict[str, _HeldLock] = {}

    @property
    def api(self) -> LockApi:
        """The API the lock is written through (a vendor's own lock is written through it too)."""
        return self._api

    @property
    def clock(self) -> Callable[[], datetime]:
        """The clock lock values are stamped with."""
        return self._now

    def forget_node(self, name: str) -> None:
        self._local.pop(name, None)

    async def _read(self, name: str, fresh: bool) -> dict[str, Any]:
        if not fresh and self._cached_node is not None:
            cached = self._cached_node(name)
            if cached is not None:
                return cached
        return await self._api.get_node(name)

    async def lock(self, node_name: str, namespace: str, pod: str) -> None:
        """Take the lock for namespace/pod, or raise NodeLockContention / NodeLockError.

        HAMi's order, except that a lock that can never expire is stale as well: one that does not
        parse (judged on a fresh read) or is dated beyond the timeout ahead is taken over, as is an
        expired one (even our own, which refreshes its time); a live one of this pod is re-entered;
        one whose holder pod is gone (or bound to another node) is taken over; anything else is
        contention."""
        guard = self._local.setdefault(node_name, asyncio.Lock())
        async with guard:
            fresh = False
            last_error = ""
            for attempt in range(CONFLICT_RETRIES):
                node = await self._read(node_name, fresh)
                current = _annotations(node).get(NODE_LOCK)
                stale: str | None = None
                if current is not None:
                    held, stale = judge_lock(current, now=self._now(), timeout=self.timeout)
                    # Live or unparsable in the cache, which may be behind the API: decide on a read.
                    if (held is None or stale is None) and not fresh:
                        fresh = True
                        continue
                    if held is not None and stale is None:
                        if held.has_owner and (held.namespace, held.pod) == (namespace, pod):
                            return  # re-entrant: a multi-vendor pod, or a retried bind
                        if await self._holder_alive(node_name, held):
                            raise self._contention(node_name, holder_named=held.has_owner)
                    if stale is not None:
                        self.stats.note_takeover(node_name, stale)
                try:
                    await self._write(node, node_name, namespace, pod)
                except ApiError as exc:  # a 409 means a stale read; anything else may pass too
                    last_error = exc.message
                    fresh = True
                    await asyncio.sleep(_backoff(attempt))
                    continue
                if stale is not None:  # logged once, when the takeover is written
                    why = TAKEN_OVER_BECAUSE[stale]
                    log.info("node %s lock %r %s, taking it over", node_name, current, why)
                self.stats.lock_written(node_name, over_another=current is not None)
                return
            raise NodeLockError(
                f"failed to set node lock (node={node_name}, retry strategy={RETRY_STRATEGY}): {last_error}"
            )

    async def _write(self, node: dict[str, Any], node_name: str, namespace: str, pod: str) -> None:
        """The lock of namespace/pod, guarded by the resourceVersion of the `node` decided on."""
        patch = {
            "metadata": {
                "annotations": {NODE_LOCK: format_lock(self._now(), namespace, pod)},
                "resourceVersion": _resource_version(node),
            }
        }
        await self._api.patch_node(node_name, patch, answer=False)

    def live_holder(
        self,
        node_name: str,
        holder_live: Callable[[LockValue, str], bool],
    ) -> LockValue | None:
        """The holder of a live lock on the node as the informer cache shows it, else None.

        No API call: used to rank nodes at filter time, where a slightly stale answer only costs a
        less good spread. A lock that cannot be parsed, has expired, is dated beyond the timeout
        ahead, or names a pod the cache no longer has, or one bound to another node, is not live
        (the next bind takes it over). `holder_live(lock, node)` answers for a lock naming a pod."""
        return self.live_holder_test(holder_live)(node_name)

    def live_holder_test(
        self, holder_live: Callable[[LockValue, str], bool]
    ) -> Callable[[str], LockValue | None]:
        """`live_holder` for many nodes at one moment (a filter's walk asks about every locked
        node it passes). The clock is read once; each node's lock value is parsed once per cached
        node object, not once per question (a burst's filters pass the same locked nodes)."""
        cached_node = self._cached_node
        if cached_node is None:
            return lambda node_name: None
        now, timeout, parsed = self._now(), self.timeout, self._held_by_node

        def holder(node_name: str) -> LockValue | None:
            node = cached_node(node_name)
            if node is None:
                return None
            entry = parsed.get(node_name)
            if entry is None or entry.node is not node:
                value = _annotations(node).get(NODE_LOCK)
                if value is None:
                    parsed.pop(node_name, None)
                    return None
                if len(parsed) >= PARSED_LOCKS_KEPT:
                    parsed.clear()
                entry = parsed[node_name] = _HeldLock.of(node, _parsed(value), timeout)
            held = entry.held
            if held is None or not entry.live_at(now):
                return None
            if held.namespace and held.pod and not holder_live(held, node_name):
                return None
            return held

        return holder

    def maybe_locked(self) -> Collection[str] | None:
        """The cached nodes that carry a lock annotation; None when not known (any node may).
        `live_holder` is None for every other node."""
        if self._cached_node is None:
            return ()
        return self._locked_nodes() if self._locked_nodes is not None else None

    def contention_message(self, node_name: str) -> str:
        """HAMi's text for a node whose lock another live pod holds."""
        within = format_go_duration(self.timeout)
        return f"node {node_name} has been locked within {within}: node lock contention"

    def _contention(self, node_name: str, *, holder_named: bool) -> NodeLockContention:
        return NodeLockContention(self.contention_message(node_name), holder_named=holder_named)

    async def _holder_alive(self, node_name: str, held: LockValue) -> bool:
        """False only when the lock names a pod (namespace and name) the API no longer has, or one
        already bound to another node (its bind there succeeded after this lock was left behind)."""
        if not (held.namespace and held.pod):
            return True
        try:
            pod = await self._api.get_pod(held.namespace, held.pod)
        except ApiError as exc:
            if exc.status != 404:
                raise NodeLockError(exc.message) from exc  # Go's StatusError text: the message
            log.info("node %s lock holder %s/%s is gone, taking over", node_name, held.namespace, held.pod)
            self.stats.note_takeover(node_name, HOLDER_GONE)
            return False
        cause = dangling_cause(pod, node_name, held)
        if cause is not None:
            log.info(
                "node %s lock holder %s/%s no longer needs it (%s), taking over",
                node_name, held.namespace, held.pod, cause,
            )
            self.stats.note_takeover(node_name, cause)
            return False
        return True

    async def lock_with_retry(
        self,
        node_name: str,
        namespace: str,
        pod: str,
        retry_timeout: float,
        *,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        """Poll on contention until retry_timeout; other errors fail at once.

        `should_stop` ends the wait early (the bind was superseded or its caller went away): the
        last contention error is raised then, nothing is taken."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + retry_timeout
        while True:
            try:
                await self.lock(node_name, namespace, pod)
                return
            except NodeLockContention:
                if retry_timeout <= 0 or should_stop():
                    raise
                if loop.time() + CONTENTION_POLL_SECONDS > deadline:
                    raise NodeLockContention(
                        f"timed out after {format_go_duration(retry_timeout)} waiting for node "
                        f"{node_name} to be unlocked: node lock contention"
                    ) from None
                await asyncio.sleep(CONTENTION_POLL_SECONDS)

    async def release(
        self,
        node_name: str,
        namespace: str,
        pod: str,
        *,
        skip_owner_check: bool = False,
        expected: str | None = None,
    ) -> None:
        """Delete the lock if this pod holds it (or unconditionally with skip_owner_check).

        A lock without an owner (legacy bare time) or one released with skip_owner_check is only
        deleted while it is still the value first read: one set meanwhile is someone else's.

        `expected`: the value this pod's lock probably holds (`probable_lock`); when it names this
        pod it is tried first, without reading the node (see `_release_exact`), and only if the
        lock holds anything else is the node read as above."""
        guard = self._local.setdefault(node_name, asyncio.Lock())
        async with guard:
            if (
                expected is not None
                and not skip_owner_check
                and expected.endswith(f",{namespace},{pod}")
                and await self._release_exact(node_name, expected)
            ):
                return
            first: str | None = None
            for attempt in range(CONFLICT_RETRIES):
                try:
                    node = await self._api.get_node(node_name)
                except ApiError as exc:
                    if exc.status == 404:
                        return
                    raise
                current = _annotations(node).get(NODE_LOCK)
                if current is None:
                    return
                first = current if first is None else first
                if skip_owner_check or "," not in current:
                    if current != first:
                        return
                elif not current.endswith(f",{namespace},{pod}"):
                    return
                patch = {
                    "metadata": {"annotations": {NODE_LOCK: None}, "resourceVersion": _resource_version(node)}
                }
                try:
                    await self._api.patch_node(node_name, patch, answer=False)
                    return
                except ApiError as exc:
                    if exc.status != 409:
                        raise
                    await asyncio.sleep(_backoff(attempt))
            log.warning("gave up releasing the lock of node %s after conflicts", node_name)

    async def _release_exact(self, node_name: str, value: str) -> bool:
        """Delete the lock if it holds exactly `value`, in one write and no read: a JSON patch
        testing the value before removing it, which the API server applies atomically to the
        current node (422, nothing written, when the test fails). True when that is settled (lock
        deleted, or the node gone); False when the lock holds something else or nothing."""
        ops = [
            {"op": "test", "path": _LOCK_POINTER, "value": value},
            {"op": "remove", "path": _LOCK_POINTER},
        ]
        try:
            await self._api.patch_node(node_name, ops, content_type=JSON_PATCH, answer=False)
        except ApiError as exc:
            if exc.status == 404:
                return True
            if exc.status in (400, 409, 422):  # the test failed (or no annotations at all)
                return False
            raise
        return True


def _backoff(attempt: int) -> float:
    base: float = 0.1 * (2**attempt)
    return base * (1 + 0.5 * random.random())
