"""The extender verbs: filter (§5) and bind (§6) over the shared scheduler state.

Two deliberate differences from HAMi, both invisible on the wire:

* Filter writes nothing to the API. It reserves the chosen devices in the ledger and answers; the
  §4.1 annotations are written at bind, in the same patch as `bind-phase: allocating`. The device
  plugin reads them only after the Binding exists, and kube-scheduler's serial scheduling cycle
  no longer waits for a patch round trip per pod.
* Bind retries node-lock contention for every pod (not only PodGroup members) up to
  `--node-lock-retry-timeout`, instead of failing fast into kube-scheduler's backoff.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError
from vgpu_scheduler.cluster.nodelock import NodeLocker, NodeLockError
from vgpu_scheduler.config import NvidiaConfig
from vgpu_scheduler.engine.decide import Chosen, Error, NoFit, NoRequest, decide, decide_on_nodes
from vgpu_scheduler.engine.podinfo import pod_annotations, pod_key
from vgpu_scheduler.engine.reasons import parse_reason
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.extender import (
    ExtenderDecodeError,
    decode_binding_args,
    decode_extender_args,
    encode_binding_result,
    encode_filter_result,
)

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
RECENTLY_DELETED = 10_000
"""How many deleted pod uids are remembered to refuse a late filter for them (see on_pod_deleted)."""


class EventSink(Protocol):
    def record(self, pod: Mapping[str, Any], type_: str, reason: str, message: str) -> None: ...


class BindApi(Protocol):
    async def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    async def patch_pod(
        self, namespace: str, name: str, merge_patch: Mapping[str, Any]
    ) -> dict[str, Any]: ...

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> dict[str, Any]: ...


@dataclass(slots=True)
class Policies:
    node: str = "binpack"
    gpu: str = "spread"


@dataclass(slots=True)
class ExtenderStats:
    filters: int = 0
    binds: int = 0
    bind_failures: int = 0
    api_calls_in_bind: int = 0


class Extender:
    def __init__(
        self,
        *,
        state: SchedulerState,
        cfg: NvidiaConfig,
        api: BindApi,
        locker: NodeLocker,
        events: EventSink,
        policies: Policies,
        synced: asyncio.Event,
        cached_pod: Callable[[str, str], dict[str, Any] | None],
        cached_node: Callable[[str], dict[str, Any] | None],
        lock_retry_timeout: float = 28.0,
        sync_wait: float = 30.0,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self.cfg = cfg
        self.api = api
        self.locker = locker
        self.events = events
        self.policies = policies
        self.synced = synced
        self.cached_pod = cached_pod
        self.cached_node = cached_node
        self.lock_retry_timeout = lock_retry_timeout
        self.sync_wait = sync_wait
        self.now = now
        # Filter decisions waiting for their bind: uid -> the decision (the uncollapsed per-container
        # allocation the bind patch writes). Dropped at bind, on re-filter and on pod deletion.
        self._pending: dict[str, Chosen] = {}
        # uids of pods whose deletion the informer has delivered, oldest first (bounded).
        self._deleted: dict[str, None] = {}
        self.stats = ExtenderStats()

    # -- pod lifecycle hooks (called by the pod informer handler) ---------------------------------

    def on_pod_deleted(self, pod: Mapping[str, Any]) -> None:
        uid, _, _ = pod_key(pod)
        self._pending.pop(uid, None)
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
        self.stats.filters += 1
        if not self.synced.is_set():
            try:
                await asyncio.wait_for(self.synced.wait(), self.sync_wait)
            except TimeoutError:
                return encode_filter_result(error="context cancelled")
        try:
            args = decode_extender_args(body)
        except ExtenderDecodeError as exc:
            log.error("filter: %s", exc)
            return encode_filter_result(error=str(exc))
        if args.pod is None:
            return encode_filter_result(error="extender args missing pod")
        pod = args.pod
        if args.node_names is None and args.nodes is not None:
            return self._filter_template_nodes(pod, args.nodes.get("items") or [])
        return self._filter_live(pod, args.node_names)

    def _filter_live(self, pod: dict[str, Any], node_names: list[str] | None) -> bytes:
        uid, namespace, name = pod_key(pod)
        self._pending.pop(uid, None)
        if uid in self._deleted:
            log.info("filter %s/%s: the pod has been deleted", namespace, name)
            return encode_filter_result(error=f'pods "{name}" not found')
        policies = self.policies
        decision = decide(
            pod, node_names or [], self.state, self.cfg, policies.node, policies.gpu, int(self.now())
        )
        if isinstance(decision, NoRequest):
            return encode_filter_result(node_names=node_names)  # echoed as sent, null included
        if isinstance(decision, Error):
            log.error("filter %s/%s: %s", namespace, name, decision.message)
            return encode_filter_result(error=decision.message)
        if isinstance(decision, NoFit):
            self._record_failure(pod, decision.failed)
            return encode_filter_result(failed=decision.failed)
        self.state.reserve(pod, decision)
        self._pending[uid] = decision
        self._record_success(pod, decision)
        log.info("filter %s/%s: chose node %s", namespace, name, decision.node)
        return encode_filter_result(node_names=[decision.node])

    def _filter_template_nodes(self, pod: dict[str, Any], items: list[dict[str, Any]]) -> bytes:
        decision = decide_on_nodes(
            pod, items, self.cfg, self.policies.node, self.policies.gpu, int(self.now())
        )
        if isinstance(decision, NoRequest):
            # Deliberate difference: HAMi echoes only NodeNames (null here), so kube-scheduler gets
            # no node at all and a device-free pod can never schedule with nodeCacheCapable=false.
            # Echo the Nodes that were sent instead.
            return encode_filter_result(nodes=items)
        if isinstance(decision, Error):
            return encode_filter_result(error=decision.message)
        if isinstance(decision, NoFit):
            return encode_filter_result(failed=decision.failed)
        chosen = [n for n in items if (n.get("metadata") or {}).get("name") == decision.node][:1]
        # Every failing node is reported next to the chosen one ({} when none failed, as the map HAMi
        # builds is never nil).
        return encode_filter_result(nodes=chosen, failed=decision.failed)

    def _record_success(self, pod: Mapping[str, Any], chosen: Chosen) -> None:
        fits = ",".join(f"{node}:{score:.2f}" for node, score in sorted(chosen.scores.items()))
        self.events.record(
            pod,
            NORMAL,
            "FilteringSucceed",
            f"find fit node({chosen.node}), {len(chosen.failed)} nodes not fit, "
            f"{len(chosen.scores)} nodes fit({fits})",
        )

    def _record_failure(self, pod: Mapping[str, Any], failed: Mapping[str, str]) -> None:
        for message in filtering_failed_messages(failed):
            self.events.record(pod, WARNING, "FilteringFailed", message)

    # -- bind -------------------------------------------------------------------------------------

    async def bind(self, body: bytes) -> bytes:
        self.stats.binds += 1
        try:
            args = decode_binding_args(body)
        except ExtenderDecodeError as exc:
            return encode_binding_result(str(exc))
        error = await self._bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
        if error:
            self.stats.bind_failures += 1
        return encode_binding_result(error)

    async def _bind(self, namespace: str, name: str, uid: str, node: str) -> str:
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

        chosen, error = self._decision_for_bind(pod, node)
        if error:
            self.events.record(pod, WARNING, "BindingFailed", error)
            return error
        locked = chosen is not None and _regular_containers_request(pod, self.cfg)
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
        try:
            if locked:
                await self.locker.lock_with_retry(node, namespace, name, self.lock_retry_timeout)
            self.stats.api_calls_in_bind += 2
            await self.api.patch_pod(namespace, name, patch)
            await self.api.bind_pod(namespace, name, uid, node)
        # A connection error (API server down, --kube-timeout) is a failure like any other: answered
        # in `Error`, and the lock taken before it released, or it would hold the node for 5 min.
        except (ApiError, ApiConnectionError, NodeLockError) as exc:
            message = _error_text(exc)
            log.error("bind %s/%s to %s failed: %s", namespace, name, node, message)
            if locked:
                try:
                    await self.locker.release(node, namespace, name)
                except (ApiError, ApiConnectionError) as release_exc:
                    log.error("releasing the lock of node %s failed: %s", node, release_exc)
            self.events.record(pod, WARNING, "BindingFailed", message)
            return message
        self._pending.pop(uid, None)
        self.events.record(
            pod, NORMAL, "BindingSucceed", f"Successfully binding node [{node}] to {namespace}/{name}"
        )
        return ""

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
            pod, [node], self.state, self.cfg, self.policies.node, self.policies.gpu, int(self.now())
        )
        if isinstance(decision, NoRequest):
            return None, ""
        if isinstance(decision, Error):
            return None, decision.message
        if isinstance(decision, NoFit):
            reason = decision.failed.get(node, "")
            return None, f"pod {name} no longer fits node {node}: {reason}"
        self.state.reserve(pod, decision)
        self._pending[uid] = decision
        return decision, ""

    def _drop(self, uid: str) -> None:
        if uid:
            self._pending.pop(uid, None)
            self.state.release(uid)


def filtering_failed_messages(failed: Mapping[str, str]) -> list[str]:
    """The FilteringFailed event texts when no node fits (§5.7).

    One event per reason *type* (a node whose reason string names several types counts under
    each), then the summary. Nodes without a reason type ("node unregistered") only count in the
    summary, as in HAMi, which groups the nodes it evaluated by `ParseReason`.
    """
    by_type: dict[str, list[str]] = {}
    for node, reason in failed.items():
        for name in parse_reason(reason):
            by_type.setdefault(name, []).append(node)
    out = [f"{len(nodes)} nodes {name}({','.join(sorted(nodes))})" for name, nodes in sorted(by_type.items())]
    out.append(f"no available node, {len(failed)} nodes do not meet")
    return out


def _error_text(exc: Exception) -> str:
    """What Go's err.Error() shows: for an API error that is the Status message alone."""
    return exc.message if isinstance(exc, ApiError) else str(exc)


def _regular_containers_request(pod: Mapping[str, Any], cfg: NvidiaConfig) -> bool:
    """HAMi locks the node only when a regular (non-init) container requests a device (§6.1)."""
    n_init = len((pod.get("spec") or {}).get("initContainers") or [])
    return any(pod_requests(pod, cfg)[n_init:])


def pod_policy_annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return pod_annotations(pod)
