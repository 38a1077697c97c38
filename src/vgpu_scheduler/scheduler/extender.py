"""The extender verbs: filter (§5) and bind (§6) over the shared scheduler state.

Two deliberate differences from HAMi, both invisible on the wire:

* Filter writes nothing to the API. It reserves the chosen devices in the ledger and answers; the
  §4.1 annotations are written at bind, in the same patch as `bind-phase: allocating`. The device
  plugin reads them only after the Binding exists, and kube-scheduler's serial scheduling cycle
  no longer waits for a patch round trip per pod.
* Lock-aware placement: among the nodes that fit, one whose node lock is held (or about to be
  taken by a bind in flight) is ranked after every free one, so a burst spreads over nodes
  instead of queueing on one node's lock. Bind then waits on contention only for PodGroup
  members, as HAMi does, and never longer than `--bind-timeout`.

A bind acts only on the decision it belongs to: a newer filter for the same pod supersedes a bind
still in flight, which stops before its next write and releases its lock; so does a bind whose
caller has gone away or whose deadline passed. The pod patch and the Binding carry the pod's
resourceVersion, so of two binds racing for one pod exactly one writes annotations and node.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError
from vgpu_scheduler.cluster.nodelock import (
    LockValue,
    NodeLockContention,
    NodeLocker,
    NodeLockError,
    dangling_cause,
)
from vgpu_scheduler.cluster.stamplock import StampLocker
from vgpu_scheduler.devices.protocol import NodeLockSpec, Vendors
from vgpu_scheduler.engine.decide import (
    Chosen,
    Error,
    NoFit,
    NoRequest,
    decide,
    decide_on_nodes,
)
from vgpu_scheduler.engine.podinfo import pod_annotations, pod_key
from vgpu_scheduler.engine.requests import PodRequestsMemo, pod_has_device_requests, pod_requests
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import ContainerRequests

# Re-exported: server/, simulate/ and tests import these names from here.
from vgpu_scheduler.scheduler.failures import (
    NODE_UNREGISTERED_REASON,
    OTHER_REASON,
    _main_reason,
    failed_by_type,
    failed_type_counts,
    filtering_failed_messages,
    main_reason,
    reason_types,
)
from vgpu_scheduler.scheduler.pending import PendingBinds
from vgpu_scheduler.scheduler.requeue import RequeueNudger
from vgpu_scheduler.scheduler.stats import (
    BIND_OUTCOMES,
    FILTER_OUTCOMES,
    LOCK_OUTCOMES,
    ExtenderStats,
)
from vgpu_scheduler.wire import keys, objects
from vgpu_scheduler.wire.extender import (
    ExtenderDecodeError,
    decode_binding_args,
    decode_extender_args,
    encode_binding_result,
    encode_filter_result,
)

log = logging.getLogger(__name__)

__all__ = [
    "BIND_OUTCOMES",
    "FILTER_OUTCOMES",
    "LOCK_OUTCOMES",
    "NODE_UNREGISTERED_REASON",
    "OTHER_REASON",
    "ExtenderStats",
    "failed_by_type",
    "failed_type_counts",
    "filtering_failed_messages",
    "main_reason",
    "reason_types",
]

NORMAL = "Normal"
WARNING = "Warning"
RECENTLY_DELETED = 10_000
FAILURE_TEXTS_KEPT = 16
"""How many no-fit answers keep their FilteringFailed texts for the pod's retries (see
`Extender._failure_texts`)."""
"""How many deleted pod uids are remembered to refuse a late filter for them (see on_pod_deleted)."""
EVALUATE_ALL_LIMIT = 64
"""Up to this many candidates every node is evaluated, so FilteringSucceed lists every fitting node
with its score as HAMi's does; above it the decision stops at the first fit (see engine/decide.py)."""
POD_WAIT_POLL_SECONDS = 0.01
PATCH_CONFLICT_RETRIES = 3


class EventSink(Protocol):
    def record(self, pod: Mapping[str, Any], type_: str, reason: str, message: str) -> None: ...


class BindApi(Protocol):
    async def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    async def patch_pod(
        self, namespace: str, name: str, merge_patch: Mapping[str, Any]
    ) -> dict[str, Any]: ...

    async def bind_pod(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        *,
        resource_version: str | None = None,
        answer: bool = True,
    ) -> dict[str, Any]: ...


@dataclass(slots=True)
class Policies:
    node: str = "binpack"
    gpu: str = "spread"


class _Outcome:
    """What one filter call decided, for the metrics; set by the path that answers."""

    __slots__ = ("kind", "reason")

    def __init__(self) -> None:
        self.kind = "error"
        self.reason = "cancelled"  # stays so only when the caller went away before any answer

    def set(self, kind: str, reason: str) -> None:
        self.kind = kind
        self.reason = reason


NOT_LEADER = "this replica is not the leader any more"
"""A bind's error when leader election is on and the Lease is another replica's."""

NOT_SYNCED = "context cancelled"
"""The filter's error while the caches have not synced (what HAMi answers when its wait ends)."""


@dataclass(slots=True, frozen=True)
class FilterAnswer:
    """The filter's answer before it is encoded: the node chosen (or the names echoed), the
    decision of a pod that fits nowhere, or an error."""

    node_names: list[str] | None = None
    error: str = ""
    no_fit: NoFit | None = None
    body: bytes | None = field(default=None, compare=False)
    """The encoding, when already made (a no-fit answer's FailedNodes: thousands of entries)."""

    @property
    def failed(self) -> Mapping[str, str] | None:
        """FailedNodes; not to be changed (it may be the verdict snapshot's lent map)."""
        return self.no_fit.failed if self.no_fit is not None else None

    def encoded(self) -> bytes:
        """The ExtenderFilterResult body (a no-fit one reuses its snapshot's encoding)."""
        if self.body is not None:
            return self.body
        if self.no_fit is not None:
            return encode_no_fit(self.no_fit)
        return encode_filter_result(node_names=self.node_names, error=self.error)


class _BindControl:
    """What a bind in flight checks before each write: is it still the one that should act?"""

    __slots__ = ("caller_gone", "deadline", "outcome")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.caller_gone = False
        self.outcome = ""  # BIND_OUTCOMES; set where the bind stops, else from its error text


class Extender:
    def __init__(
        self,
        *,
        state: SchedulerState,
        api: BindApi,
        locker: NodeLocker,
        events: EventSink,
        policies: Policies,
        synced: asyncio.Event,
        cached_pod: Callable[[str, str], dict[str, Any] | None],
        cached_node: Callable[[str], dict[str, Any] | None],
        lock_retry_timeout: float = 28.0,
        bind_timeout: float = 20.0,
        lock_aware: bool = True,
        requeue_nudges: bool = True,
        pod_wait: float = 1.0,
        sync_wait: float = 30.0,
        now: Callable[[], float] = time.time,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        self.state = state
        self.requests_of = PodRequestsMemo(state.vendors)
        self.api = api
        self.locker = locker
        self.events = events
        # A sink that says it drops every event (the simulation's) spares building their texts.
        self._discards_events = bool(getattr(events, "discards_events", False))
        self.policies = policies
        self.synced = synced
        self.cached_pod = cached_pod
        self.cached_node = cached_node
        self.lock_retry_timeout = lock_retry_timeout
        self.bind_timeout = bind_timeout
        self.lock_aware = lock_aware
        self.requeue = RequeueNudger(
            api, now=now, cached_pod=cached_pod, enabled=requeue_nudges, is_leader=is_leader
        )
        self.pod_wait = pod_wait
        self.sync_wait = sync_wait
        self.now = now
        self.is_leader = is_leader  # --leader-elect: binds only while our kube-scheduler holds the Lease
        # Filter decisions waiting for their bind (scheduler/pending.py); the per-node table under
        # its old name for the busy-node test and tests.
        self._pending = PendingBinds()
        self._pending_per_node = self._pending.per_node
        # uids of pods whose deletion the informer has delivered, oldest first (bounded).
        self._deleted: dict[str, None] = {}
        self.stats = ExtenderStats()
        # Vendors' own locks without holder (NodeLockSpec.names_holder False), by annotation key.
        self._vendor_lockers: dict[str, StampLocker] = {}
        # id(FailedNodes answer) -> (that answer, its FilteringFailed texts), most recent last.
        self._failure_texts: OrderedDict[int, tuple[bytes, list[str]]] = OrderedDict()

    # -- pod lifecycle hooks (called by the pod informer handler) ---------------------------------

    def on_pod_deleted(self, pod: Mapping[str, Any]) -> None:
        uid, _, _ = pod_key(pod)
        self._pop_pending(uid)
        self.requeue.forget(uid)
        # kube-scheduler's cache may lag ours and still filter this pod. No event will ever come
        # for it again, so a reservation made then would never be freed: remember the uid so such
        # a filter is refused (HAMi's filter-time patch fails with NotFound the same way).
        if uid:
            self._deleted[uid] = None
            if len(self._deleted) > RECENTLY_DELETED:
                del self._deleted[next(iter(self._deleted))]

    def sweep_reservations(self, pod_exists: Callable[[str, str, str], bool], max_age: float) -> int:
        """Drop reservations older than `max_age` seconds whose pod is gone from the informer.

        The safety net behind on_pod_deleted: a pod deleted before our watch ever saw it, then
        filtered from kube-scheduler's lagging cache, would otherwise hold its devices forever.
        """
        dropped = 0
        now = self.now()
        for uid, reserved_at in self.state.reservations():
            alloc = self.state.allocation(uid)
            try:
                age = now - int(reserved_at)
            except ValueError:
                age = max_age + 1
            if alloc is None or age <= max_age or pod_exists(alloc.namespace, alloc.name, uid):
                continue
            log.info("dropping the reservation of vanished pod %s/%s", alloc.namespace, alloc.name)
            self._drop(uid)
            dropped += 1
        return dropped

    # -- filter -----------------------------------------------------------------------------------

    async def filter(self, body: bytes) -> bytes:
        """The filter verb: an ExtenderArgs body in, an ExtenderFilterResult body out."""
        self.stats.filters += 1
        started = time.perf_counter()
        outcome = _Outcome()
        try:
            return await self._filter(body, outcome)
        finally:
            self._count_filter(outcome, started)

    async def filter_pod(
        self, pod: dict[str, Any], node_names: Sequence[str] | None
    ) -> FilterAnswer:
        """The filter verb in process, on arguments already decoded (the simulator's): the same
        decision, side effects and metrics as `filter` of the body naming `pod` and `node_names`,
        without the JSON both ways, which at thousands of nodes costs more than the decision.
        `pod` and `node_names` are read, never changed."""
        self.stats.filters += 1
        started = time.perf_counter()
        outcome = _Outcome()
        try:
            if not await self._wait_synced(outcome):
                return FilterAnswer(error=NOT_SYNCED)
            return await self._filter_live(pod, node_names, outcome)
        finally:
            self._count_filter(outcome, started)

    def _count_filter(self, outcome: _Outcome, started: float) -> None:
        st = self.stats
        st.decisions.inc((outcome.kind, outcome.reason))
        st.filter_duration.observe((outcome.kind,), time.perf_counter() - started)

    async def _wait_synced(self, outcome: _Outcome) -> bool:
        """False (the answer is an error) when the caches do not sync within `sync_wait`."""
        if self.synced.is_set():
            return True
        try:
            await asyncio.wait_for(self.synced.wait(), self.sync_wait)
        except TimeoutError:
            outcome.set("error", "not_synced")
            return False
        return True

    async def _filter(self, body: bytes, outcome: _Outcome) -> bytes:
        if not await self._wait_synced(outcome):
            return encode_filter_result(error=NOT_SYNCED)
        try:
            args = decode_extender_args(body)
        except ExtenderDecodeError as exc:
            log.error("filter: %s", exc)
            outcome.set("error", "bad_request")
            return encode_filter_result(error=str(exc))
        if args.pod is None:
            outcome.set("error", "bad_request")
            return encode_filter_result(error="extender args missing pod")
        pod = args.pod
        if args.node_names is None and args.nodes is not None:
            return self._filter_template_nodes(pod, args.nodes.get("items") or [], outcome)
        answer = await self._filter_live(pod, args.node_names, outcome)
        return answer.encoded()

    async def _filter_live(
        self, pod: dict[str, Any], node_names: Sequence[str] | None, outcome: _Outcome
    ) -> FilterAnswer:
        uid, namespace, name = pod_key(pod)
        if uid in self._deleted:
            log.info("filter %s/%s: the pod has been deleted", namespace, name)
            outcome.set("error", "pod_deleted")
            return FilterAnswer(error=f'pods "{name}" not found')
        invalid = self.requests_of.invalid(pod)
        if invalid:
            return FilterAnswer(error=self._refuse_invalid(pod, invalid, outcome))
        requests = self.requests_of(pod)
        if not pod_has_device_requests(requests):
            outcome.set("no_request", "no_device_request")
            return _echo(node_names)
        # Only a pod the informer knows may reserve devices: a filter for a pod that exists nowhere
        # would otherwise hold devices no real pod can use until the sweep.
        known = self._cached_with_uid(namespace, name, uid) or await self._known_pod(namespace, name, uid)
        if known is None:
            self.stats.filters_unknown_pod += 1
            outcome.set("error", "pod_unknown")
            log.info("filter %s/%s: pod %s is not in the informer cache", namespace, name, uid)
            return FilterAnswer(error=f'pods "{name}" not found')
        bound_to = objects.node_name(known)
        if bound_to:
            # kube-scheduler's cache lags ours: the pod is bound, its annotations are the truth.
            message = f'pod {namespace}/{name} is already assigned to node "{bound_to}"'
            outcome.set("error", "pod_bound")
            return FilterAnswer(error=message)
        self._pop_pending(uid)
        policies = self.policies
        candidates = node_names or []
        # Only a pod whose bind takes the shared node lock can meet contention on it (§6.2:
        # AWSNeuron, Mthreads, GCU, … never lock; Cambricon has its own), so only such a pod avoids
        # busy nodes and marks its node busy.
        locks = _takes_shared_lock(requests, pod, self.state.vendors)
        busy = self._busy_node_test(uid, namespace, name) if self.lock_aware and locks else None
        decision = decide(
            pod,
            candidates,
            self.state,
            default_node_policy=policies.node,
            default_gpu_policy=policies.gpu,
            now=int(self.now()),
            evaluate_all=len(candidates) <= EVALUATE_ALL_LIMIT,
            deprioritized=busy,
            requests=requests,
            walk_failed=not self._discards_events,  # only FilteringSucceed reads it
        )
        if isinstance(decision, NoRequest):
            outcome.set("no_request", "no_device_request")
            return _echo(node_names)
        if isinstance(decision, Error):
            log.error("filter %s/%s: %s", namespace, name, decision.message)
            outcome.set("error", "decision")
            return FilterAnswer(error=decision.message)
        if isinstance(decision, NoFit):
            self.requeue.refused(uid, namespace, name)
            counts = failed_type_counts(decision.failed, decision.reason_counts)
            outcome.set("nofit", _main_reason(counts, decision.failed))
            if self._discards_events:
                return FilterAnswer(no_fit=decision)
            body = encode_no_fit(decision)  # encoded once: the events' texts are kept by it
            self._record_failure(pod, self._failure_texts_of(decision, body))
            return FilterAnswer(no_fit=decision, body=body)
        if busy is not None and busy(decision.node) and not is_pod_group_member(pod):
            # Busy nodes rank last, so every node that fits is about to be locked or is locked
            # by another live bind: a bind there would only fail on contention. Fail now, with
            # HAMi's contention error and nothing reserved (kube-scheduler retries), so a burst
            # waits in kube-scheduler's backoff instead of spending API calls on doomed binds.
            self.stats.filters_all_busy += 1
            outcome.set("contention", "nodes_busy")
            message = self.locker.contention_message(decision.node)
            log.info("filter %s/%s: every fitting node is busy: %s", namespace, name, message)
            return FilterAnswer(error=message)
        self.state.reserve(pod, decision)
        self.requeue.forget(uid)
        self._set_pending(uid, decision, locks=locks)
        if not self._discards_events:
            self._record_success(pod, decision, len(candidates))
        outcome.set("chosen", "fit")
        log.info("filter %s/%s: chose node %s", namespace, name, decision.node)
        return FilterAnswer(node_names=[decision.node])

    def _cached_with_uid(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        """The cached pod with this uid (any, when `uid` is empty), else None."""
        pod = self.cached_pod(namespace, name)
        if pod is not None and (not uid or objects.uid(pod) == uid):
            return pod
        return None

    async def _known_pod(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        """The cached pod with this uid, waiting up to `pod_wait` for the watch to deliver it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.pod_wait
        while True:
            pod = self._cached_with_uid(namespace, name, uid)
            if pod is not None:
                return pod
            if loop.time() >= deadline or uid in self._deleted:
                return None
            await asyncio.sleep(POD_WAIT_POLL_SECONDS)

    def _busy_node_test(self, uid: str, namespace: str, name: str) -> Callable[[str], bool] | None:
        """Is a bind other than this pod's about to run, or holding the lock, on the node? None
        when no node can be (no other bind pending, no cached node carrying a lock): the same
        ranking, without asking about every node."""
        now = self.now()
        # Only nodes with a pending bind of another pod, or carrying a lock, can be busy.
        about_to_lock = {
            node
            for node, waiting in self._pending_per_node.items()
            if any(until > now for other, until in waiting.items() if other != uid)
        }
        locked = self.locker.maybe_locked()
        if not about_to_lock and locked is not None and not locked:
            return None

        def busy(node: str) -> bool:
            if node in about_to_lock:
                return True
            if locked is not None and node not in locked:
                return False
            held = self.locker.live_holder(node, self._holder_alive)
            return held is not None and (held.namespace, held.pod) != (namespace, name)

        return busy

    def _holder_alive(self, held: LockValue, node: str) -> bool:
        """Can the holder of lock `held` on `node` still need it? Not when it is gone, or in a
        state `dangling_cause` names (the lock is dangling: the next bind takes it over)."""
        pod = self.cached_pod(held.namespace, held.pod)
        return pod is not None and dangling_cause(pod, node, held) is None

    def _set_pending(self, uid: str, decision: Chosen, *, locks: bool = True) -> None:
        """Remember the decision until its bind; `locks`: that bind takes the node lock, so the
        node is busy for other locking pods meanwhile."""
        self._pending.set(uid, decision, self.now() + self.bind_timeout if locks else None)

    def _pop_pending(self, uid: str) -> Chosen | None:
        return self._pending.pop(uid)

    def _refuse_invalid(self, pod: Mapping[str, Any], message: str, outcome: _Outcome) -> str:
        """A device quantity that does not parse: an extender Error, so the pod stays pending with
        the message in kube-scheduler's FailedScheduling event (and ours, FilteringFailed, as HAMi
        records its filter errors), instead of being placed with the value read as absent. The error
        is node-independent, which FailedNodes (one entry per node) would hide."""
        outcome.set("error", "invalid_quantity")
        log.warning("filter: %s", message)
        if not self._discards_events:
            self.events.record(pod, WARNING, "FilteringFailed", message)
        return message

    def _filter_template_nodes(
        self, pod: dict[str, Any], items: list[dict[str, Any]], outcome: _Outcome
    ) -> bytes:
        invalid = self.requests_of.invalid(pod)
        if invalid:
            return encode_filter_result(error=self._refuse_invalid(pod, invalid, outcome))
        decision = decide_on_nodes(
            pod,
            items,
            self.state.vendors,
            default_node_policy=self.policies.node,
            default_gpu_policy=self.policies.gpu,
            now=int(self.now()),
        )
        if isinstance(decision, NoRequest):
            # Deliberate difference: HAMi echoes only NodeNames (null here), so kube-scheduler gets
            # no node at all and a device-free pod can never schedule with nodeCacheCapable=false.
            # Echo the Nodes that were sent instead.
            outcome.set("no_request", "no_device_request")
            return encode_filter_result(nodes=items)
        if isinstance(decision, Error):
            outcome.set("error", "decision")
            return encode_filter_result(error=decision.message)
        if isinstance(decision, NoFit):
            outcome.set("nofit", _main_reason(failed_type_counts(decision.failed), decision.failed))
            return encode_filter_result(failed=decision.failed)
        outcome.set("chosen", "fit")
        chosen = [n for n in items if (n.get("metadata") or {}).get("name") == decision.node][:1]
        # Every failing node is reported next to the chosen one ({} when none failed, as the map HAMi
        # builds is never nil).
        return encode_filter_result(nodes=chosen, failed=decision.failed)

    def _record_success(self, pod: Mapping[str, Any], chosen: Chosen, candidates: int) -> None:
        fits = ",".join(f"{node}:{score:.2f}" for node, score in sorted(chosen.scores.items()))
        message = (
            f"find fit node({chosen.node}), {len(chosen.failed)} nodes not fit, "
            f"{len(chosen.scores)} nodes fit({fits})"
        )
        evaluated = len(chosen.failed) + len(chosen.scores)
        if evaluated < candidates:  # the early exit: say so rather than imply the others failed
            message += f", {evaluated} of {candidates} nodes evaluated"
        self.events.record(pod, NORMAL, "FilteringSucceed", message)

    def _record_failure(self, pod: Mapping[str, Any], messages: list[str]) -> None:
        for message in messages:
            self.events.record(pod, WARNING, "FilteringFailed", message)

    def _failure_texts_of(self, decision: NoFit, answer: bytes) -> list[str]:
        """`filtering_failed_messages(decision.failed)`, reused while the answer is.

        A retried pod's answer is its verdict snapshot's kept encoding (`encode_no_fit`): the same
        bytes object exactly while no verdict changed, and the texts are a function of the same
        verdicts. So the texts are kept by the answer object's identity (the entry holds the
        answer, so its id is not reused while kept)."""
        kept = self._failure_texts
        entry = kept.get(id(answer))
        if entry is not None and entry[0] is answer:
            kept.move_to_end(id(answer))
            return entry[1]
        messages = filtering_failed_messages(decision.failed)
        if decision.source is not None and decision.source.rendered is answer:
            kept[id(answer)] = (answer, messages)
            if len(kept) > FAILURE_TEXTS_KEPT:
                kept.popitem(last=False)
        return messages

    # -- bind -------------------------------------------------------------------------------------

    async def bind(self, body: bytes) -> bytes:
        self.stats.binds += 1
        started = time.perf_counter()
        control = _BindControl(0.0)
        try:
            return await self._bind_call(body, control)
        finally:
            outcome = control.outcome or "error"
            self.stats.bind_duration.observe((outcome,), time.perf_counter() - started)

    async def _bind_call(self, body: bytes, control: _BindControl) -> bytes:
        try:
            args = decode_binding_args(body)
        except ExtenderDecodeError as exc:
            return encode_binding_result(str(exc))
        loop = asyncio.get_running_loop()
        control.deadline = loop.time() + self.bind_timeout
        # The bind runs in its own task: if our caller goes away (the HTTP handler is cancelled),
        # the bind is not cut in the middle of a write but stops at its next check and cleans up.
        task = asyncio.ensure_future(
            self._bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node, control=control)
        )
        task.add_done_callback(_log_unexpected)
        try:
            error = await asyncio.shield(task)
        except asyncio.CancelledError:
            control.caller_gone = True
            control.outcome = "stopped"
            self.stats.binds_cancelled += 1
            log.warning("bind %s/%s: the caller went away", args.pod_namespace, args.pod_name)
            raise
        if error:
            self.stats.bind_failures += 1
        control.outcome = control.outcome or ("error" if error else "bound")
        return encode_binding_result(error)

    async def _bind(
        self, namespace: str, name: str, uid: str, node: str, *, control: _BindControl
    ) -> str:
        pod = self.cached_pod(namespace, name)
        if pod is None or (uid and pod_key(pod)[0] != uid):
            try:  # the informer may lag behind kube-scheduler by a few milliseconds
                self.stats.api_calls_in_bind += 1
                pod = await self.api.get_pod(namespace, name)
            except ApiConnectionError as exc:  # the pod may well exist: keep its reservation
                log.error("bind %s/%s: %s", namespace, name, exc)
                return str(exc)
            except ApiError as exc:
                self._drop(uid)
                log.error("bind %s/%s: %s", namespace, name, exc)
                return exc.message if exc.status != 404 else f'pod "{name}" not found'
        if self.cached_node(node) is None:
            self._drop(uid or pod_key(pod)[0])
            message = f"failed to get node {node}"
            self.events.record(pod, WARNING, "BindingFailed", message)
            return f'node "{node}" not found'
        uid = pod_key(pod)[0]
        bound_to = objects.node_name(pod)
        if bound_to:  # no write may touch a bound pod: its annotations are the truth
            message = f'pod {namespace}/{name} is already assigned to node "{bound_to}"'
            self.events.record(pod, WARNING, "BindingFailed", message)
            return message
        reserved = self._pending.get(uid)
        if reserved is not None and reserved.node != node:
            # A stale bind (its filter was superseded): the latest decision is for another node.
            self.stats.binds_wrong_node += 1
            control.outcome = "stopped"
            message = f"pod {namespace}/{name} was last filtered onto node {reserved.node}, not {node}"
            log.warning("bind: %s", message)
            self.events.record(pod, WARNING, "BindingFailed", message)
            return message

        if not self.is_leader():
            # A replica deposed while its kube-scheduler had this bind in flight (e.g. paused past
            # its lease): the leader decides now, this one writes nothing.
            control.outcome = "stopped"
            return f"bind of pod {namespace}/{name} to {node}: {NOT_LEADER}"
        chosen, error = self._decision_for_bind(pod, node)
        if error:
            self.events.record(pod, WARNING, "BindingFailed", error)
            return error
        # Every distinct lock the pod's vendors take, in key order: a fixed order, so two binds
        # asking the same locks never each hold one the other waits for.
        locks = pod_node_locks(pod, self.state.vendors, self.requests_of(pod)) if chosen is not None else []
        held: list[tuple[NodeLockSpec, str]] = []  # (lock, value this bind wrote), in order taken
        shared_tried = False
        annotations: dict[str, Any] = {}
        labels: dict[str, str] = {}
        if chosen is not None:
            annotations.update(chosen.annotations)
            labels.update(chosen.labels)
        annotations[keys.BIND_PHASE] = keys.BIND_PHASE_ALLOCATING
        annotations[keys.BIND_TIME] = str(int(self.now()))
        patch: dict[str, Any] = {"metadata": {"annotations": annotations}}
        if labels:
            patch["metadata"]["labels"] = labels

        def check() -> None:
            """Raise _Refused when this bind must not write any more."""
            if chosen is not None and self._pending.get(uid) is not chosen:
                raise _Refused(f"{where()} superseded by a newer filter", kind="superseded")
            if control.caller_gone:
                raise _Refused(f"{where()} abandoned: the caller went away", kind="cancelled")
            if asyncio.get_running_loop().time() >= control.deadline:
                raise _Refused(f"{where()} timed out after {self.bind_timeout:g}s", kind="deadline")
            if not self.is_leader():
                raise _Refused(f"{where()}: {NOT_LEADER}", kind="not_leader")

        def where() -> str:  # formatted only for a refusal: check() runs several times per bind
            return f"bind of pod {namespace}/{name} to {node}"

        message = ""
        exc_seen: Exception | None = None
        try:
            for spec in locks:
                shared_tried = shared_tried or spec.names_holder
                held.append((spec, await self._lock(pod, node, control, check, spec=spec)))
            check()
            patched = await self._patch_unbound(pod, patch, check)
            check()
            self.stats.api_calls_in_bind += 1
            await self.api.bind_pod(
                namespace, name, uid, node, resource_version=objects.resource_version(patched), answer=False
            )
        # A connection error (API server down, --kube-timeout) is a failure like any other: answered
        # in `Error`, and the lock taken before it released, or it would hold the node for 5 min.
        except (ApiError, ApiConnectionError, NodeLockError, _Refused) as exc:
            message = _error_text(exc)
            exc_seen = exc
            if isinstance(exc, NodeLockContention):
                self.stats.lock_contention += 1
                control.outcome = "contention"
            elif isinstance(exc, _Refused):
                control.outcome = "stopped"
                if exc.kind == "superseded":
                    self.stats.binds_superseded += 1
                elif exc.kind == "deadline":
                    self.stats.binds_deadline += 1
        if message:
            log.error("bind %s/%s to %s failed: %s", namespace, name, node, message)
            if chosen is not None and self._pending.get(uid) is chosen:
                # No bind is coming for this decision any more: the node is not about to be
                # locked by it. The devices stay reserved until the pod is filtered again (HAMi).
                self._pop_pending(uid)
            # As HAMi, release also when taking the lock failed: a legacy lock is cleared then.
            # Not when another named pod holds it: that release would read the node for nothing.
            named = isinstance(exc_seen, NodeLockContention) and exc_seen.holder_named
            deposed = isinstance(exc_seen, _Refused) and exc_seen.kind == "not_leader"
            if not deposed:  # a deposed replica writes nothing: its lock expires or is taken over
                await self._release_locks(node, namespace, name, held, shared=shared_tried and not named)
            self.events.record(pod, WARNING, "BindingFailed", message)
            return message
        if chosen is not None and self._pending.get(uid) is chosen:
            self._pop_pending(uid)
        self.events.record(
            pod, NORMAL, "BindingSucceed", f"Successfully binding node [{node}] to {namespace}/{name}"
        )
        return ""

    async def _lock(
        self,
        pod: Mapping[str, Any],
        node: str,
        control: _BindControl,
        check: Callable[[], None],
        *,
        spec: NodeLockSpec,
    ) -> str:
        """_take_lock, timed into `stats.lock_wait` by how it ended; the value written ("" for
        the shared mutex)."""
        started = time.perf_counter()
        outcome = "error"
        try:
            value = await self._take_lock(pod, node, control, check, spec=spec)
            outcome = "acquired"
            return value
        except NodeLockContention:
            outcome = "contention"
            raise
        except _Refused:
            outcome = "stopped"
            raise
        finally:
            self.stats.lock_wait.observe((outcome,), time.perf_counter() - started)

    async def _take_lock(
        self,
        pod: Mapping[str, Any],
        node: str,
        control: _BindControl,
        check: Callable[[], None],
        *,
        spec: NodeLockSpec,
    ) -> str:
        """HAMi's rule: only PodGroup members wait on contention of the shared mutex (a vendor
        lock's busy error is not HAMi's contention error: never waited on); never past the bind's
        deadline, and not once the bind was superseded or abandoned (then _Refused says why)."""
        if not spec.names_holder:
            return await self._vendor_locker(spec).lock(node)
        _, namespace, name = pod_key(pod)
        if not (self.lock_retry_timeout > 0 and is_pod_group_member(pod)):
            await self.locker.lock(node, namespace, name)
            return ""

        def should_stop() -> bool:
            try:
                check()
            except _Refused:
                return True
            return False

        budget = control.deadline - asyncio.get_running_loop().time()
        wait = max(0.0, min(self.lock_retry_timeout, budget))
        try:
            await self.locker.lock_with_retry(node, namespace, name, wait, should_stop=should_stop)
        except NodeLockContention:
            check()  # a stop is reported as what it is, not as contention
            raise
        return ""

    async def _patch_unbound(
        self, pod: Mapping[str, Any], patch: dict[str, Any], check: Callable[[], None]
    ) -> dict[str, Any]:
        """Merge-patch the pod only while it is the unbound version we read (resourceVersion
        precondition); on a conflict read it again and go on only if it is still unbound."""
        uid, namespace, name = pod_key(pod)
        current: Mapping[str, Any] = pod
        for attempt in range(PATCH_CONFLICT_RETRIES):
            rv = objects.resource_version(current)
            body = {"metadata": {**patch["metadata"], "resourceVersion": rv}} if rv else patch
            try:
                self.stats.api_calls_in_bind += 1
                return await self.api.patch_pod(namespace, name, body)
            except ApiError as exc:
                if exc.status != 409 or attempt == PATCH_CONFLICT_RETRIES - 1:
                    raise
            self.stats.api_calls_in_bind += 1
            current = await self.api.get_pod(namespace, name)
            if pod_key(current)[0] != uid:
                raise _Refused(f"pod {namespace}/{name} was replaced (uid {pod_key(current)[0]})")
            bound_to = objects.node_name(current)
            if bound_to:
                raise _Refused(f'pod {namespace}/{name} is already assigned to node "{bound_to}"')
            check()
        raise AssertionError("unreachable")

    def _vendor_locker(self, spec: NodeLockSpec) -> StampLocker:
        locker = self._vendor_lockers.get(spec.key)
        if locker is None:
            locker = StampLocker(self.locker.api, spec, now=self.locker.clock, stats=self.locker.stats)
            self._vendor_lockers[spec.key] = locker
        return locker

    async def _release_locks(
        self, node: str, namespace: str, name: str, held: list[tuple[NodeLockSpec, str]], *, shared: bool
    ) -> None:
        """After a failed bind, in reverse order: every vendor lock this bind wrote (while it still
        holds the value written), and with `shared` the shared mutex (if this pod holds it, or a
        legacy lock without owner, as HAMi)."""
        if shared and not any(spec.names_holder for spec, _ in held):
            await self._release(node, namespace, name)  # tried last, not taken
        for spec, value in reversed(held):
            if spec.names_holder:
                if shared:
                    await self._release(node, namespace, name)
                continue
            try:
                await self._vendor_locker(spec).release(node, value)
            except (ApiError, ApiConnectionError, NodeLockError) as exc:
                log.error("releasing the lock %s of node %s failed: %s", spec.key, node, exc)

    async def _release(self, node: str, namespace: str, name: str) -> None:
        try:
            await self.locker.release(node, namespace, name)
        except (ApiError, ApiConnectionError) as exc:
            log.error("releasing the lock of node %s failed: %s", node, exc)

    def _decision_for_bind(self, pod: dict[str, Any], node: str) -> tuple[Chosen | None, str]:
        """The filter's decision for this pod on this node, or a fresh fit if it is gone.

        A restart between filter and bind loses the reservation: the pod is fitted again on the
        requested node; if it no longer fits the bind fails and kube-scheduler retries. A pod is
        never bound with devices nobody checked.
        """
        uid, _, name = pod_key(pod)
        chosen = self._pending.get(uid)
        if chosen is not None and chosen.node == node and self.state.allocation(uid) is not None:
            return chosen, ""
        decision = decide(
            pod,
            [node],
            self.state,
            default_node_policy=self.policies.node,
            default_gpu_policy=self.policies.gpu,
            now=int(self.now()),
            requests=self.requests_of(pod),
        )
        if isinstance(decision, NoRequest):
            return None, ""
        if isinstance(decision, Error):
            return None, decision.message
        if isinstance(decision, NoFit):
            reason = decision.failed.get(node, "")
            return None, f"pod {name} no longer fits node {node}: {reason}"
        self.state.reserve(pod, decision)
        locks = _takes_shared_lock(self.requests_of(pod), pod, self.state.vendors)
        self._set_pending(uid, decision, locks=locks)
        return decision, ""

    def _drop(self, uid: str) -> None:
        if uid:
            self._pop_pending(uid)
            self.state.release(uid)


class _Refused(Exception):
    """The bind stopped on its own before a write (superseded, abandoned, past its deadline, pod
    bound meanwhile or replaced, replica deposed); `kind` names the first three for the metrics
    (and `not_leader` the last, whose bind releases nothing)."""

    def __init__(self, message: str, *, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


def _log_unexpected(task: asyncio.Future[str]) -> None:
    """A bind whose caller left is never awaited again: make sure its failure is still seen."""
    if not task.cancelled() and task.exception() is not None:
        log.error("bind failed unexpectedly", exc_info=task.exception())


def is_pod_group_member(pod: Mapping[str, Any]) -> bool:
    """HAMi's PodGroup test: label scheduling.x-k8s.io/pod-group or spec.schedulingGroup.podGroupName."""
    meta = pod.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if isinstance(labels, Mapping) and labels.get(keys.POD_GROUP_LABEL):
        return True
    spec = pod.get("spec")
    group = spec.get("schedulingGroup") if isinstance(spec, Mapping) else None
    return isinstance(group, Mapping) and bool(group.get("podGroupName"))


def _error_text(exc: Exception) -> str:
    """What Go's err.Error() shows: for an API error that is the Status message alone."""
    return exc.message if isinstance(exc, ApiError) else str(exc)


def _echo(node_names: Sequence[str] | None) -> FilterAnswer:
    """The answer for a pod asking no device: the names as sent, null included."""
    return FilterAnswer(node_names=None if node_names is None else list(node_names))


def encode_no_fit(decision: NoFit) -> bytes:
    """The FailedNodes answer, reusing the snapshot's encoding while its verdicts are unchanged."""
    source = decision.source
    if source is not None and source.rendered is not None:
        return source.rendered
    body = encode_filter_result(failed=decision.failed)
    if source is not None:
        source.rendered = body
    return body


def pod_node_locks(
    pod: Mapping[str, Any], vendors: Vendors, requests: Sequence[ContainerRequests] | None = None
) -> list[NodeLockSpec]:
    """The node locks a bind of `pod` takes, one per distinct key, sorted by key. HAMi locks the
    node for a vendor only when a regular (non-init) container requests it and the vendor locks
    (§6.1); vendors naming one key share that lock (`hami.io/mutex.lock`: one lock, re-entered)."""
    n_init = objects.init_container_count(pod)
    found: dict[str, NodeLockSpec] = {}
    if requests is None:
        requests = pod_requests(pod, vendors)
    for creq in requests[n_init:]:
        for key in creq:
            vendor = vendors.get(key)
            if vendor is not None and vendor.node_lock is not None:
                found.setdefault(vendor.node_lock.key, vendor.node_lock)
    return [found[key] for key in sorted(found)]


def _locking_request(pod: Mapping[str, Any], vendors: Vendors) -> bool:
    """Does a bind of `pod` take any node lock?"""
    return bool(pod_node_locks(pod, vendors))


def _takes_shared_lock(
    requests: Sequence[ContainerRequests], pod: Mapping[str, Any], vendors: Vendors
) -> bool:
    """Does a bind of `pod` (asking `requests`) take the shared owner-format lock
    (`hami.io/mutex.lock`), the one lock-aware placement watches?"""
    return any(spec.names_holder for spec in pod_node_locks(pod, vendors, requests))


def pod_policy_annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return pod_annotations(pod)
