"""The bind verb (§6): lock the node, write the pod's annotations, create the Binding (the device
plugin releases the lock once it has allocated); on a failure, release the locks this bind took.

One concern: one bind from its arguments to its answer. A bind acts only on the decision it belongs
to: a newer filter for the same pod supersedes a bind still in flight, which stops before its next
write and releases its lock; so does a bind whose caller has gone away or whose deadline passed.
The pod patch and the Binding carry the pod's resourceVersion, so of two binds racing for one pod
exactly one writes annotations and node. Bind waits on lock contention only for PodGroup members,
as HAMi does, and never longer than `--bind-timeout`.

The §4.1 annotations are written here, in the same patch as `bind-phase: allocating`, not at
filter: the device plugin reads them only after the Binding exists.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError
from vgpu_scheduler.cluster.nodelock import NodeLockContention, NodeLocker, NodeLockError
from vgpu_scheduler.cluster.stamplock import StampLocker
from vgpu_scheduler.cluster.writeguard import guarded_writes
from vgpu_scheduler.devices.protocol import NodeLockSpec
from vgpu_scheduler.engine.decide import Chosen, Error, NoFit, NoRequest, decide
from vgpu_scheduler.engine.podinfo import pod_key
from vgpu_scheduler.engine.requests import PodRequestsMemo
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.scheduler.locks import is_pod_group_member, pod_node_locks, takes_shared_lock
from vgpu_scheduler.scheduler.pending import Reservations
from vgpu_scheduler.scheduler.ports import NORMAL, WARNING, BindApi, EventSink
from vgpu_scheduler.scheduler.settings import ExtenderSettings
from vgpu_scheduler.scheduler.stats import ExtenderStats
from vgpu_scheduler.wire import keys, objects
from vgpu_scheduler.wire.extender import ExtenderDecodeError, decode_binding_args, encode_binding_result

log = logging.getLogger(__name__)

PATCH_CONFLICT_RETRIES = 3
_BIND_ERRORS = (ApiError, ApiConnectionError, NodeLockError)
"""What a bind's writes may raise besides `_Refused`: each is answered in `Error`."""


class _BindControl:
    """What a bind in flight checks before each write: is it still the one that should act?"""

    __slots__ = ("caller_gone", "deadline", "outcome")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.caller_gone = False
        self.outcome = ""  # BIND_OUTCOMES; set where the bind stops, else from its error text


NOT_LEADER = "this replica is not the leader any more"
"""A bind's error when leader election is on and the Lease is another replica's."""


class _Refused(Exception):
    """The bind stopped on its own before a write (superseded, abandoned, past its deadline, pod
    bound meanwhile or replaced, replica deposed); `kind` names the first three for the metrics,
    and `not_leader` the last, whose bind releases nothing."""

    def __init__(self, message: str, *, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


class Binder:
    """The bind verb: a BindingArgs body in, an ExtenderBindingResult body out."""

    def __init__(
        self,
        *,
        state: SchedulerState,
        requests_of: PodRequestsMemo,
        reservations: Reservations,
        api: BindApi,
        locker: NodeLocker,
        events: EventSink,
        stats: ExtenderStats,
        settings: ExtenderSettings,
        cached_pod: Callable[[str, str], dict[str, Any] | None],
        cached_node: Callable[[str], dict[str, Any] | None],
    ) -> None:
        self.state = state
        self.requests_of = requests_of
        self.reservations = reservations
        self.api = api
        self.locker = locker
        self.events = events
        self.stats = stats
        self.settings = settings
        self.cached_pod = cached_pod
        self.cached_node = cached_node
        # Vendors' own locks without holder (NodeLockSpec.names_holder False), by annotation key.
        self._vendor_lockers: dict[str, StampLocker] = {}

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
        control.deadline = loop.time() + self.settings.bind_timeout
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
        """The bind of one pod: "" when bound, else the error text answered."""
        pod, error = await self._pod_to_bind(namespace, name, uid)
        if pod is None:
            return error
        error = self._refusal(pod, namespace=namespace, name=name, uid=uid, node=node, control=control)
        if error:
            return error
        if not self.settings.is_leader():
            # A replica deposed while its kube-scheduler had this bind in flight (e.g. paused past
            # its lease): the leader decides now, this one writes nothing.
            control.outcome = "stopped"
            return f"bind of pod {namespace}/{name} to {node}: {NOT_LEADER}"
        chosen, error = self._decision_for_bind(pod, node)
        if error:
            self.events.record(pod, WARNING, "BindingFailed", error)
            return error
        return await self._write(
            pod, namespace=namespace, name=name, node=node, chosen=chosen, control=control
        )

    async def _pod_to_bind(self, namespace: str, name: str, uid: str) -> tuple[dict[str, Any] | None, str]:
        """The pod named (from the cache, else the API), or None and the error to answer."""
        pod = self.cached_pod(namespace, name)
        if pod is not None and not (uid and pod_key(pod)[0] != uid):
            return pod, ""
        try:  # the informer may lag behind kube-scheduler by a few milliseconds
            self.stats.api_calls_in_bind += 1
            return await self.api.get_pod(namespace, name), ""
        except ApiConnectionError as exc:  # the pod may well exist: keep its reservation
            log.error("bind %s/%s: %s", namespace, name, exc)
            return None, str(exc)
        except ApiError as exc:
            self.reservations.drop(uid)
            log.error("bind %s/%s: %s", namespace, name, exc)
            return None, exc.message if exc.status != 404 else f'pod "{name}" not found'

    def _refusal(
        self, pod: dict[str, Any], *, namespace: str, name: str, uid: str, node: str, control: _BindControl
    ) -> str:
        """Why this bind must write nothing at all ("" when it may go on): the node is unknown, the
        pod already bound, or its latest filter chose another node."""
        if self.cached_node(node) is None:
            self.reservations.drop(uid or pod_key(pod)[0])
            message = f"failed to get node {node}"
            self.events.record(pod, WARNING, "BindingFailed", message)
            return f'node "{node}" not found'
        bound_to = objects.node_name(pod)
        if bound_to:  # no write may touch a bound pod: its annotations are the truth
            message = f'pod {namespace}/{name} is already assigned to node "{bound_to}"'
            self.events.record(pod, WARNING, "BindingFailed", message)
            return message
        reserved = self.reservations.get(pod_key(pod)[0])
        if reserved is not None and reserved.node != node:
            # A stale bind (its filter was superseded): the latest decision is for another node.
            self.stats.binds_wrong_node += 1
            control.outcome = "stopped"
            message = f"pod {namespace}/{name} was last filtered onto node {reserved.node}, not {node}"
            log.warning("bind: %s", message)
            self.events.record(pod, WARNING, "BindingFailed", message)
            return message
        return ""

    async def _write(
        self,
        pod: dict[str, Any],
        *,
        namespace: str,
        name: str,
        node: str,
        chosen: Chosen | None,
        control: _BindControl,
    ) -> str:
        """Take the node locks, patch the pod, create the Binding; on a failure release the locks
        taken. "" when bound, else the error text answered."""
        uid = pod_key(pod)[0]
        # Every distinct lock the pod's vendors take, in key order: a fixed order, so two binds
        # asking the same locks never each hold one the other waits for.
        locks = pod_node_locks(pod, self.state.vendors, self.requests_of(pod)) if chosen is not None else []
        held: list[tuple[NodeLockSpec, str]] = []  # (lock, value this bind wrote), in order taken
        shared_tried = False
        patch = self._bind_patch(chosen)
        where = f"{namespace}/{name} to {node}"
        check = self._stop_check(uid=uid, chosen=chosen, control=control, where=where)
        failure: Exception | None = None
        try:
            # The same check once more inside the transport, right before each write leaves: a
            # write may wait in the client's rate limiter, and the process be paused there.
            with guarded_writes(check):
                for spec in locks:
                    shared_tried = shared_tried or spec.names_holder
                    held.append((spec, await self._lock(pod, node, control, check, spec=spec)))
                check()
                patched = await self._patch_unbound(pod, patch, check)
                check()
                self.stats.api_calls_in_bind += 1
                await self.api.bind_pod(
                    namespace, name, uid, node, resource_version=objects.resource_version(patched),
                    answer=False,
                )
        # A connection error (API server down, --kube-timeout) is a failure like any other: answered
        # in `Error`, and the lock taken before it released, or it would hold the node for 5 min.
        except (*_BIND_ERRORS, _Refused) as exc:
            failure = exc
        message = self._count_failure(failure, control) if failure is not None else ""
        if message:
            log.error("bind %s/%s to %s failed: %s", namespace, name, node, message)
            if chosen is not None and self.reservations.get(uid) is chosen:
                # No bind is coming for this decision any more: the node is not about to be
                # locked by it. The devices stay reserved until the pod is filtered again (HAMi).
                self.reservations.pop(uid)
            await self._undo_locks(
                failure, node=node, namespace=namespace, name=name, held=held, shared_tried=shared_tried
            )
            self.events.record(pod, WARNING, "BindingFailed", message)
            return message
        if chosen is not None and self.reservations.get(uid) is chosen:
            self.reservations.pop(uid)
        self.events.record(
            pod, NORMAL, "BindingSucceed", f"Successfully binding node [{node}] to {namespace}/{name}"
        )
        return ""

    async def _undo_locks(
        self,
        failure: Exception | None,
        *,
        node: str,
        namespace: str,
        name: str,
        held: list[tuple[NodeLockSpec, str]],
        shared_tried: bool,
    ) -> None:
        """After a failed bind. As HAMi, release also when taking the lock failed: a legacy lock is
        cleared then. Not when another named pod holds it: that release would read the node for
        nothing. Nothing when this replica was deposed: it writes nothing any more, its lock
        expires or is taken over."""
        if isinstance(failure, _Refused) and failure.kind == "not_leader":
            return
        named = isinstance(failure, NodeLockContention) and failure.holder_named
        await self._release_locks(node, namespace, name, held, shared=shared_tried and not named)

    def _bind_patch(self, chosen: Chosen | None) -> dict[str, Any]:
        """The pod's merge patch: the decision's annotations and labels, and the bind phase."""
        annotations: dict[str, Any] = {}
        labels: dict[str, str] = {}
        if chosen is not None:
            annotations.update(chosen.annotations)
            labels.update(chosen.labels)
        annotations[keys.BIND_PHASE] = keys.BIND_PHASE_ALLOCATING
        annotations[keys.BIND_TIME] = str(int(self.settings.now()))
        patch: dict[str, Any] = {"metadata": {"annotations": annotations}}
        if labels:
            patch["metadata"]["labels"] = labels
        return patch

    def _stop_check(
        self, *, uid: str, chosen: Chosen | None, control: _BindControl, where: str
    ) -> Callable[[], None]:
        """What the bind calls before each write: raises _Refused when it must not write any more.
        `where`: "<namespace>/<name> to <node>", for the refusal's text."""
        reservations = self.reservations
        settings = self.settings

        def check() -> None:
            if chosen is not None and reservations.get(uid) is not chosen:
                raise _Refused(f"bind of pod {where} superseded by a newer filter", kind="superseded")
            if control.caller_gone:
                raise _Refused(f"bind of pod {where} abandoned: the caller went away", kind="cancelled")
            if asyncio.get_running_loop().time() >= control.deadline:
                raise _Refused(
                    f"bind of pod {where} timed out after {settings.bind_timeout:g}s", kind="deadline"
                )
            if not settings.is_leader():
                raise _Refused(f"bind of pod {where}: {NOT_LEADER}", kind="not_leader")

        return check

    def _count_failure(self, failure: Exception, control: _BindControl) -> str:
        """Count how the bind failed (metrics, `control.outcome`); the error text answered."""
        if isinstance(failure, NodeLockContention):
            self.stats.lock_contention += 1
            control.outcome = "contention"
        elif isinstance(failure, _Refused):
            control.outcome = "stopped"
            if failure.kind == "superseded":
                self.stats.binds_superseded += 1
            elif failure.kind == "deadline":
                self.stats.binds_deadline += 1
        return _error_text(failure)

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
        retry_timeout = self.settings.lock_retry_timeout
        if not (retry_timeout > 0 and is_pod_group_member(pod)):
            await self.locker.lock(node, namespace, name)
            return ""

        def should_stop() -> bool:
            try:
                check()
            except _Refused:
                return True
            return False

        budget = control.deadline - asyncio.get_running_loop().time()
        wait = max(0.0, min(retry_timeout, budget))
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
            except _BIND_ERRORS as exc:
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
        chosen = self.reservations.get(uid)
        if chosen is not None and chosen.node == node and self.state.allocation(uid) is not None:
            return chosen, ""
        settings = self.settings
        decision = decide(
            pod,
            [node],
            self.state,
            default_node_policy=settings.policies.node,
            default_gpu_policy=settings.policies.gpu,
            now=int(settings.now()),
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
        locks = takes_shared_lock(self.requests_of(pod), pod, self.state.vendors)
        self.reservations.set(uid, decision, locks=locks)
        return decision, ""


def _log_unexpected(task: asyncio.Future[str]) -> None:
    """A bind whose caller left is never awaited again: make sure its failure is still seen."""
    if not task.cancelled() and task.exception() is not None:
        log.error("bind failed unexpectedly", exc_info=task.exception())


def _error_text(exc: Exception) -> str:
    """What Go's err.Error() shows: for an API error that is the Status message alone."""
    return exc.message if isinstance(exc, ApiError) else str(exc)
