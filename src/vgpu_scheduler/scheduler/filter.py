"""The filter verb (§5): which node a pod goes to, its devices reserved until the bind.

One concern: turning a filter call into a decision and its answer, with the side effects that go
with it (the reservation, the FilteringSucceed/FilteringFailed events, the requeue bookkeeping and
the decision metrics). Filter writes nothing to the API: the §4.1 annotations are written at bind.

Lock-aware placement: among the nodes that fit, one whose node lock is held (or about to be taken
by a bind in flight, see scheduler/pending.py) is ranked after every free one, so a burst spreads
over nodes instead of queueing on one node's lock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.cluster.nodelock import NodeLocker
from vgpu_scheduler.engine.decide import Chosen, Error, NoFit, NoRequest, decide, decide_on_nodes
from vgpu_scheduler.engine.podinfo import pod_key
from vgpu_scheduler.engine.requests import PodRequestsMemo, pod_has_device_requests
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import ContainerRequests
from vgpu_scheduler.scheduler.failures import FailureTexts, _main_reason, failed_type_counts
from vgpu_scheduler.scheduler.locks import is_pod_group_member, takes_shared_lock
from vgpu_scheduler.scheduler.pending import Reservations
from vgpu_scheduler.scheduler.ports import NORMAL, WARNING, EventSink
from vgpu_scheduler.scheduler.requeue import RequeueNudger
from vgpu_scheduler.scheduler.settings import ExtenderSettings
from vgpu_scheduler.scheduler.stats import ExtenderStats
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire.extender import ExtenderDecodeError, decode_extender_args, encode_filter_result

log = logging.getLogger(__name__)

EVALUATE_ALL_LIMIT = 64
"""Up to this many candidates every node is evaluated, so FilteringSucceed lists every fitting node
with its score as HAMi's does; above it the decision stops at the first fit (see engine/decide.py)."""
POD_WAIT_POLL_SECONDS = 0.01
NOT_SYNCED = "context cancelled"
"""The filter's error while the caches have not synced (what HAMi answers when its wait ends)."""


class _Outcome:
    """What one filter call decided, for the metrics; set by the path that answers."""

    __slots__ = ("kind", "reason")

    def __init__(self) -> None:
        self.kind = "error"
        self.reason = "cancelled"  # stays so only when the caller went away before any answer

    def set(self, kind: str, reason: str) -> None:
        self.kind = kind
        self.reason = reason


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


class Filter:
    """The filter verb over the shared scheduler state: bytes in and out (`filter`), or decoded
    arguments in process (`filter_pod`)."""

    def __init__(
        self,
        *,
        state: SchedulerState,
        requests_of: PodRequestsMemo,
        reservations: Reservations,
        locker: NodeLocker,
        events: EventSink,
        requeue: RequeueNudger,
        stats: ExtenderStats,
        settings: ExtenderSettings,
        synced: asyncio.Event,
        cached_pod: Callable[[str, str], dict[str, Any] | None],
    ) -> None:
        self.state = state
        self.requests_of = requests_of
        self.reservations = reservations
        self.locker = locker
        self.events = events
        # A sink that says it drops every event (the simulation's) spares building their texts.
        self._discards_events = bool(getattr(events, "discards_events", False))
        self.requeue = requeue
        self.stats = stats
        self.settings = settings
        self.synced = synced
        self.cached_pod = cached_pod
        self._failure_texts = FailureTexts()

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
            await asyncio.wait_for(self.synced.wait(), self.settings.sync_wait)
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
        if self.reservations.was_deleted(uid):
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
        refused = await self._refuse_unknown_or_bound(uid, namespace, name, outcome)
        if refused is not None:
            return refused
        return self._decide(pod, requests, node_names, outcome)

    async def _refuse_unknown_or_bound(
        self, uid: str, namespace: str, name: str, outcome: _Outcome
    ) -> FilterAnswer | None:
        """The error answer for a pod the informer does not know, or knows bound; else None."""
        # Only a pod the informer knows may reserve devices: a filter for a pod that exists nowhere
        # would otherwise hold devices no real pod can use until the sweep.
        known = cached_with_uid(self.cached_pod, namespace, name, uid) or await self._known_pod(
            namespace, name, uid
        )
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
        return None

    def _decide(
        self,
        pod: dict[str, Any],
        requests: Sequence[ContainerRequests],
        node_names: Sequence[str] | None,
        outcome: _Outcome,
    ) -> FilterAnswer:
        uid, namespace, name = pod_key(pod)
        self.reservations.pop(uid)
        settings = self.settings
        policies = settings.policies
        candidates = node_names or []
        # Only a pod whose bind takes the shared node lock can meet contention on it (§6.2:
        # AWSNeuron, Mthreads, GCU, … never lock; Cambricon has its own), so only such a pod avoids
        # busy nodes and marks its node busy.
        locks = takes_shared_lock(requests, pod, self.state.vendors)
        busy = None
        if settings.lock_aware and locks:
            busy = self.reservations.busy_node_test(uid, namespace, name)
        decision = decide(
            pod,
            candidates,
            self.state,
            default_node_policy=policies.node,
            default_gpu_policy=policies.gpu,
            now=int(settings.now()),
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
            return self._no_fit(pod, decision, outcome)
        if busy is not None and busy(decision.node) and not is_pod_group_member(pod):
            return self._all_busy(pod, decision, outcome)
        self._reserve(pod, decision, locks=locks, candidates=len(candidates))
        outcome.set("chosen", "fit")
        log.info("filter %s/%s: chose node %s", namespace, name, decision.node)
        return FilterAnswer(node_names=[decision.node])

    def _no_fit(self, pod: Mapping[str, Any], decision: NoFit, outcome: _Outcome) -> FilterAnswer:
        uid, namespace, name = pod_key(pod)
        self.requeue.refused(uid, namespace, name)
        counts = failed_type_counts(decision.failed, decision.reason_counts)
        outcome.set("nofit", _main_reason(counts, decision.failed))
        if self._discards_events:
            return FilterAnswer(no_fit=decision)
        body = encode_no_fit(decision)  # encoded once: the events' texts are kept by it
        self._record_failure(pod, self._failure_texts.of(decision, body))
        return FilterAnswer(no_fit=decision, body=body)

    def _all_busy(self, pod: Mapping[str, Any], decision: Chosen, outcome: _Outcome) -> FilterAnswer:
        """Busy nodes rank last, so every node that fits is about to be locked or is locked by
        another live bind: a bind there would only fail on contention. Fail now, with HAMi's
        contention error and nothing reserved (kube-scheduler retries), so a burst waits in
        kube-scheduler's backoff instead of spending API calls on doomed binds."""
        _, namespace, name = pod_key(pod)
        self.stats.filters_all_busy += 1
        outcome.set("contention", "nodes_busy")
        message = self.locker.contention_message(decision.node)
        log.info("filter %s/%s: every fitting node is busy: %s", namespace, name, message)
        return FilterAnswer(error=message)

    def _reserve(self, pod: dict[str, Any], decision: Chosen, *, locks: bool, candidates: int) -> None:
        """Hold the chosen devices until the bind, and say so in FilteringSucceed."""
        uid = pod_key(pod)[0]
        self.state.reserve(pod, decision)
        self.requeue.forget(uid)
        self.reservations.set(uid, decision, locks=locks)
        if not self._discards_events:
            self._record_success(pod, decision, candidates)

    async def _known_pod(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        """The cached pod with this uid, waiting up to `pod_wait` for the watch to deliver it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.pod_wait
        while True:
            pod = cached_with_uid(self.cached_pod, namespace, name, uid)
            if pod is not None:
                return pod
            if loop.time() >= deadline or self.reservations.was_deleted(uid):
                return None
            await asyncio.sleep(POD_WAIT_POLL_SECONDS)

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
        policies = self.settings.policies
        decision = decide_on_nodes(
            pod,
            items,
            self.state.vendors,
            default_node_policy=policies.node,
            default_gpu_policy=policies.gpu,
            now=int(self.settings.now()),
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


def cached_with_uid(
    cached_pod: Callable[[str, str], dict[str, Any] | None], namespace: str, name: str, uid: str
) -> dict[str, Any] | None:
    """The cached pod with this uid (any, when `uid` is empty), else None."""
    pod = cached_pod(namespace, name)
    if pod is not None and (not uid or objects.uid(pod) == uid):
        return pod
    return None


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
