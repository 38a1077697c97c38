"""The simulated scheduling loop: kube-scheduler's cycle around the real scheduler process.

Everything that decides runs the server's code: an embedded `MemoryCluster` is the API server, a
`SchedulerProcess` (informers → scheduler state/ledger, registration, node locker, `Extender`) is the
HAMi scheduler, and the loop is kube-scheduler:

1. pop the next pod from the `SchedulingQueue` (priority, then arrival; backoff in simulated time);
2. run the provider's predicates on every node (the informer's Node objects + a `NodeInfo` per node);
3. ask the extender's filter about the feasible node names and take the single node it answers:
   in process its typed verb (`Extender.filter_pod`, the same decision as `/filter` without the
   JSON), or a real `ExtenderArgs` body POSTed to a running server (`HttpExtender`);
4. bind through the extender (`ExtenderBindingArgs`): node lock, pod patch, Binding. A pod asking
   for none of the extender's managed resources never reaches the extender (kube-scheduler's
   `IsInterested`): the provider's priorities choose among the feasible nodes and the loop posts
   the Binding itself, as kube-scheduler's DefaultBinder does;
5. the simulated device plugin (`deviceplugin.SimDevicePlugin`) consumes the allocation, sets
   `bind-phase: success`, releases the lock, and the pod runs; with a run time it goes `Succeeded`
   later in simulated time, which is a cluster event that moves unschedulable pods back to active.

A pod no node fits waits in the queue's unschedulable set with its reasons (until a cluster event);
a filter or bind answered with an error (lock contention, say) is retried after its backoff, as
kube-scheduler retries it, forever. A simulation must end, so such a pod is parked once retrying
cannot change its answer, until something happens (`retries`: a pod arrives, binds or finishes, a
node joins, or the clock passes a node lock's deadline, to which it jumps when nothing else is left
to do). The run ends when nothing is left but unschedulable and parked pods; those are reported
pending with their last error. `max_sim_time` bounds the simulated time; the report's
`summary.end` says what ended the run.
Nothing reads the wall clock or an unseeded random source on the way to the report: the clock of the
process, the extender, the node locker and the cluster is the `SimClock`, and the cluster's uids come
from a seeded generator, so the same inputs give a byte-identical report.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import msgspec

from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.gctuning import collector_settled
from vgpu_scheduler.scheduler.options import options_type, with_gates
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.simulate.clock import SimClock
from vgpu_scheduler.simulate.extenderio import (
    ExtenderEndpoint,
    FilterAnswer,
    PendingReasons,
    decode_filter_answer,
    extender_args,
)
from vgpu_scheduler.simulate.nodetable import FilterResult, NodeTable, ScoreCache, VerdictCache
from vgpu_scheduler.simulate.options import (
    SimulationOptions,
    SimulationResult,
    arrival_seconds,
)
from vgpu_scheduler.simulate.outcomes import device_states, pod_outcomes
from vgpu_scheduler.simulate.podmemo import PodMemo
from vgpu_scheduler.simulate.predicates import (
    PodResources,
    ignored_resources_for,
    pod_resources,
)
from vgpu_scheduler.simulate.providers import AlgorithmProvider, get_provider
from vgpu_scheduler.simulate.queue import QueuedPod, SchedulingQueue, pod_key
from vgpu_scheduler.simulate.report import (
    build_report,
)
from vgpu_scheduler.simulate.retries import (
    END_DONE,
    END_MAX_SIM_TIME,
    END_NO_PROGRESS,
    ErrorRetries,
    next_lock_deadline,
)
from vgpu_scheduler.simulate.settle import InformerSettler
from vgpu_scheduler.simulate.usage import FleetUsage
from vgpu_scheduler.standin.embedded.deviceplugin import SimDevicePlugin
from vgpu_scheduler.standin.embedded.runtime import duration_seconds
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport

log = logging.getLogger(__name__)

Obj = dict[str, Any]

SIM_HOSTNAME = "vgpu-scheduler-simulate"

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class _NoEvents:
    """The simulation records no Kubernetes Events (they would only slow the run down)."""

    discards_events = True
    """Tells the extender not to build event texts for this sink."""

    def record(self, pod: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        return None


_ARRIVE, _NODE, _FINISH = 1, 0, 2  # at equal times: nodes first, then finishes, then arrivals


class Simulation:
    """One run. `await start()`, optionally replace `endpoint`, `await run()`, `await close()`."""

    def __init__(
        self,
        nodes: Sequence[Mapping[str, Any]],
        pods: Sequence[Mapping[str, Any]],
        *,
        existing: Iterable[Mapping[str, Any]] = (),
        added_nodes: Sequence[Mapping[str, Any]] = (),
        options: SimulationOptions | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """`nodes` and `existing` (pods, ResourceQuotas) are the cluster at time 0; `pods` are
        scheduled, in order, at their arrival time; `added_nodes` join at their arrival time."""
        self.options = options or SimulationOptions()
        self.clock = SimClock(epoch=self.options.epoch)
        self.cluster = MemoryCluster(clock=self.clock.datetime, seed=self.options.seed)
        self.cluster.seed_from_list([*nodes, *existing])
        self.client = KubeClient(MemoryTransport(self.cluster))
        cfg = self.options.device_config
        sched_opts = with_gates(
            options_type(self.options.registry)(
                node_scheduler_policy=self.options.node_scheduler_policy,
                gpu_scheduler_policy=self.options.gpu_scheduler_policy,
                # The simulated queue retries refused pods on every event, on the state the filter has.
                requeue_nudges=False,
            ),
            dict.fromkeys(self.options.vendor_gates, True),
        )
        self.process = SchedulerProcess(
            sched_opts,
            cfg,
            self.client,
            SIM_HOSTNAME,
            now=lambda: self.clock.epoch + self.clock.now,
            now_datetime=self.clock.datetime,
            events=_NoEvents(),
            registry=self.options.registry,
        )
        self.endpoint: ExtenderEndpoint = self.process.extender
        self.device_plugin = SimDevicePlugin(self.client, self.process.vendors)
        self._managed = ignored_resources_for(self.process.vendors)
        self.provider: AlgorithmProvider = get_provider(
            self.options.provider, ignored_resources=self._managed
        )
        self.queue = SchedulingQueue(
            initial_backoff=self.options.initial_backoff, max_backoff=self.options.max_backoff
        )
        self.progress = progress
        self._input = [dict(p) for p in pods]
        self._keys = [pod_key(p) for p in self._input]
        self._events: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        for node in added_nodes:
            self._push(arrival_seconds(node), _NODE, dict(node))
        for pod in self._input:
            self._push(arrival_seconds(pod), _ARRIVE, pod)
        nodes_informer = self.process.nodes
        self._table = NodeTable(nodes_informer.store, lambda: nodes_informer.resource_version)
        self._verdicts = VerdictCache(self._table, self.provider)
        self._scores = ScoreCache(self._table, self.provider)
        self._settler = InformerSettler(self.cluster, self.process.reflectors)
        self._reasons: dict[str, PendingReasons] = {}
        self._memo = PodMemo(self._managed)
        self._usage = FleetUsage()
        self._bound = 0
        self.cycles = 0
        self._finished: set[str] = set()
        self._started = False
        self._retries = ErrorRetries()
        self._lock_deadline: tuple[str, float | None] | None = None  # see _next_lock_deadline
        self.end = END_DONE

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.process.start()
        await self.settle()
        for pod in self.cluster.objects("pods"):
            spec = pod.get("spec") or {}
            phase = (pod.get("status") or {}).get("phase")
            if spec.get("nodeName") and phase not in ("Succeeded", "Failed"):
                self._assume(pod, str(spec["nodeName"]))
        self._started = True

    async def close(self) -> None:
        await self.process.stop()
        await self.client.close()
        closer = getattr(self.endpoint, "close", None)
        if closer is not None and self.endpoint is not self.process.extender:
            await closer()

    async def settle(self) -> None:
        """Wait until every informer of the process has seen every write made so far."""
        await self._settler.settle()

    # -- events ------------------------------------------------------------------------------------

    def _push(self, at: float, kind: int, payload: Any) -> None:
        heapq.heappush(self._events, (at, kind, self._seq, payload))
        self._seq += 1

    async def _handle_due_events(self) -> None:
        cluster_event = ""
        arrived: list[str] = []
        while self._events and self._events[0][0] <= self.clock.now:
            _, kind, _, payload = heapq.heappop(self._events)
            if kind == _NODE:
                await self._add_node(payload)
                cluster_event = "NodeAdd"
            elif kind == _FINISH:
                await self._finish(payload)
                cluster_event = "PodDelete"
            else:
                await self.client.create("pods", payload, answer=False)
                arrived.append(pod_key(payload))
        if arrived or cluster_event:
            self._happened()
            await self.settle()
        for key in arrived:
            cached = self._cached_pod(key)
            if cached is not None and not (cached.get("spec") or {}).get("nodeName"):
                self.queue.add(cached, self.clock.now)
        if cluster_event:
            self.queue.move_all_to_active_on_event(self.clock.now, cluster_event)

    async def _add_node(self, node: Obj) -> None:
        await self.client.create("nodes", node, answer=False)
        name = str((node.get("metadata") or {}).get("name") or "")
        await self.settle()
        # The node informer wakes the registration loop; wait for its pass to register the node.
        for _ in range(10_000):
            if name in self.process.state.ledger:
                return
            await asyncio.sleep(0)
        log.warning("node %s was added but not registered (no usable device inventory?)", name)

    async def _finish(self, key: str) -> None:
        node = self._usage.finished(key, now=self.clock.now, pending=len(self.queue))
        if node is None:
            return
        namespace, _, name = key.partition("/")
        await self.device_plugin.finish(namespace, name)
        self._table.remove_pod(node, key)
        self._finished.add(key)

    # -- the loop ----------------------------------------------------------------------------------

    async def run(self) -> SimulationResult:
        if not self._started:
            await self.start()
        wall_start = time.perf_counter()
        limit = self.options.max_sim_time
        while True:
            await self._handle_due_events()
            item = self.queue.pop(self.clock.now)
            if isinstance(item, QueuedPod):
                self.cycles += 1
                await self._schedule_one(item)
                continue
            deadline = self._next_lock_deadline() if self.queue.parked_count else None
            next_event = self._events[0][0] if self._events else None
            wake = [t for t in (item, next_event, deadline) if t is not None]
            if not wake:
                break
            at = min(wake)
            if limit is not None and at > limit:
                self.end = END_MAX_SIM_TIME
                break
            self.clock.advance_to(at)
            if at == deadline:
                if not self._retries.may_pass_deadline():
                    self.end = END_NO_PROGRESS
                    break
                self._happened(idle=True)
        await self.settle()
        report = await self._report()
        return SimulationResult(report, self.cycles, time.perf_counter() - wall_start)

    def _happened(self, *, idle: bool = False) -> None:
        """Something happened that a failed retry could not foresee: parked pods resume.
        `idle`: only a lock deadline passed."""
        self._retries.happened(idle=idle)
        self.queue.release_parked(self.clock.now)

    def _next_lock_deadline(self) -> float | None:
        """In simulated seconds. Asked only when pods are parked; a walk over every node, so the
        answer is kept until a node changes or the clock passes it (a live lock stays live until
        its deadline, and one stale now never frees anything later)."""
        process = self.process
        version = process.nodes.resource_version
        known = self._lock_deadline
        if known is not None and known[0] == version and (known[1] is None or known[1] > self.clock.now):
            return known[1]
        deadline = next_lock_deadline(
            process.nodes.store.list(), process.vendors, timeout=process.locker.timeout,
            now=self.clock.datetime(),
        )
        at = deadline.timestamp() - self.clock.epoch if deadline is not None else None
        self._lock_deadline = (version, at)
        return at

    def _retry_after_error(self, qp: QueuedPod, reasons: PendingReasons, error: str) -> None:
        """A filter or bind that answered an error: kube-scheduler retries the pod after its
        backoff (queueAfterBackoff), not on a cluster event. Parked once retrying is pointless."""
        self._reasons[qp.key] = reasons
        if self._retries.failed(qp.key, error):
            self.queue.park(qp, self.clock.now)
        else:
            self.queue.add_backoff(qp, self.clock.now)

    def _cached_pod(self, key: str) -> Obj | None:
        namespace, _, name = key.partition("/")
        return self.process.pods.store.get(namespace, name)

    async def _schedule_one(self, qp: QueuedPod) -> None:
        pod = self._cached_pod(qp.key)
        if pod is None or (pod.get("spec") or {}).get("nodeName"):
            return  # deleted, or bound by someone else meanwhile
        qp.pod = pod
        verdicts = self._verdicts.filter(pod, qp.key)
        failed, feasible = verdicts.failed, verdicts.feasible
        if not feasible:
            self._unschedulable(qp, PendingReasons(failed))
            return
        if not self._memo.interested(qp.key, pod):
            best = self._scores.best(pod, verdicts.positions)
            await self._default_bind(qp, pod, self._table.order[best].name)
            return
        answer = await self._ask_filter(qp.key, pod, verdicts)
        if answer.error:
            # An extender error names no rejecting plugin: lock contention, an invalid annotation.
            reasons = PendingReasons({**failed, **dict.fromkeys(feasible, answer.error)})
            self._retry_after_error(qp, reasons, answer.error)
            return
        chosen = [n for n in answer.node_names if n in verdicts.feasible_set]
        if not chosen:
            self._unschedulable(qp, PendingReasons(failed, self._memo.shared_failed(answer.failed_nodes)))
            return
        node_name = self._prioritize(pod, chosen)
        meta = pod.get("metadata") or {}
        bind_body = {
            "PodName": meta.get("name", ""),
            "PodNamespace": meta.get("namespace", "default"),
            "PodUID": meta.get("uid", ""),
            "Node": node_name,
        }
        error = str(_decode(await self.endpoint.bind(_encode(bind_body))).get("Error") or "")
        if error:
            # A binding error is not "unschedulable": like the live kube-scheduler, retry the pod
            # when its backoff runs out (a lock may expire meanwhile).
            self._retry_after_error(qp, PendingReasons({node_name: error}), error)
            return
        await self._after_bind(qp, node_name)

    async def _ask_filter(self, key: str, pod: Obj, verdicts: FilterResult) -> FilterAnswer:
        """The extender's filter over the feasible nodes. In process, its verb on the informer's
        pod and the names themselves: the JSON both ways (thousands of names, and as many
        FailedNodes entries) would cost more than the decision, and decodes to the same values."""
        extender = self.process.extender
        if self.endpoint is extender:
            got = await extender.filter_pod(pod, verdicts.feasible)
            return FilterAnswer(got.node_names or [], got.failed or {}, got.error)
        body = extender_args(pod, verdicts.names_json, self._memo.pod_json(key, pod))
        return decode_filter_answer(await self.endpoint.filter(body))

    async def _default_bind(self, qp: QueuedPod, pod: Obj, node_name: str) -> None:
        """kube-scheduler's DefaultBinder: the Binding alone, no annotation, no lock."""
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        try:
            await self.client.bind_pod(namespace, name, str(meta.get("uid") or ""), node_name)
        except ApiError as exc:
            self._retry_after_error(qp, PendingReasons({node_name: exc.message}), exc.message)
            return
        await self._after_bind(qp, node_name)

    def _prioritize(self, pod: Obj, names: list[str]) -> str:
        if len(names) == 1:
            return names[0]
        # Highest score wins; equal scores go to the first name (kube-scheduler picks at random).
        best, best_score = names[0], -1
        scorer, slot_of = self._scores.scorer(pod), self._table.slot
        for name in sorted(names):
            slot = slot_of(name)
            assert slot is not None  # a feasible name is a node of this cycle's table
            score = scorer(slot)
            if score > best_score:
                best, best_score = name, score
        return best

    def _unschedulable(self, qp: QueuedPod, reasons: PendingReasons) -> None:
        self._reasons[qp.key] = reasons
        self._retries.forget(qp.key)
        self.queue.add_unschedulable(qp, self.clock.now)

    async def _after_bind(self, qp: QueuedPod, node_name: str) -> None:
        key = qp.key
        self._happened()
        # The bound pod as the informer has it once settled: the version a GET would answer.
        await self.settle()
        pod = self._cached_pod(key)
        if pod is None:
            log.error("device plugin: pod %s: not found", key)
            return
        try:
            admission = await self.device_plugin.admit(pod)
        except ApiError as exc:
            log.error("device plugin: pod %s: %s", key, exc)
            return
        self._reasons.pop(key, None)
        self._retries.forget(key)
        self._verdicts.forget(key)
        self._memo.forget(key)
        await self.settle()
        self._bound += 1
        if admission.phase != "Running":
            log.warning("pod %s failed on node %s: %s", key, node_name, admission.error)
            self._finished.add(key)
            return
        # The requests of the pod as it was scheduled (cached): binding changed no container, a
        # pod's spec being immutable but for its nodeName, tolerations and images.
        self._assume(pod, node_name, pod_resources(qp.pod) if qp.pod is not None else None)
        duration = duration_seconds(pod)
        if duration is not None:
            self._push(self.clock.now + duration, _FINISH, key)
        if self.progress is not None:
            self.progress(self._bound, len(self._input))

    def _assume(self, pod: Obj, node_name: str, resources: PodResources | None = None) -> None:
        """Count a running pod on its node (NodeInfo for the predicates, totals for the timeline);
        `resources`: the pod's, when known."""
        key = pod_key(pod)
        self._table.add_pod(node_name, pod, resources)
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        alloc = self.process.state.allocation(uid)
        self._usage.started(key, node_name, alloc, now=self.clock.now, pending=len(self.queue))

    # -- report ------------------------------------------------------------------------------------

    async def _report(self) -> dict[str, Any]:
        await self.settle()  # explain reads the scheduler's caches
        outcomes, demands = pod_outcomes(
            self._input,
            self._keys,
            cached_pod=self._cached_pod,
            reasons_of=self._reasons_of,
            errors=self._retries.errors,
            explain=self._explain if self.options.explain else None,
            vendors=self.process.vendors,
        )
        return build_report(
            outcomes, device_states(self.process.state.ledger), demands=demands,
            makespan=self._usage.makespan, timeline=self._usage.timeline, end=self.end,
        )

    def _explain(self, namespace: str, name: str) -> dict[str, Any] | None:
        explanation = self.process.explain(namespace, name)
        return explanation.to_json() if explanation is not None else None

    def _reasons_of(self, key: str) -> dict[str, str]:
        reasons = self._reasons.get(key)
        return reasons.merged() if reasons is not None else {}


async def simulate(
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    *,
    existing: Iterable[Mapping[str, Any]] = (),
    added_nodes: Sequence[Mapping[str, Any]] = (),
    options: SimulationOptions | None = None,
    endpoint: ExtenderEndpoint | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimulationResult:
    """Run one simulation to the end (in-process extender unless `endpoint` is given)."""
    sim = Simulation(
        nodes, pods, existing=existing, added_nodes=added_nodes, options=options, progress=progress
    )
    try:
        await sim.start()
        if endpoint is not None:
            sim.endpoint = endpoint
        # The fleet and the informers' caches live for the whole run: full collections walking
        # them cost seconds at 1,000 nodes and free nothing.
        with collector_settled():
            return await sim.run()
    finally:
        await sim.close()


_T = TypeVar("_T")


def run_to_result(coro: Coroutine[Any, Any, _T]) -> _T:
    """`asyncio.run(coro)` for a coroutine with a large result. On Python 3.11 asyncio.run formats
    the finished main task (its result's full repr) twice while it restores the SIGINT handler:
    ~0.2 s for a 10,000-pod simulation's result. The task it runs here returns None."""
    kept: list[_T] = []

    async def keep() -> None:
        kept.append(await coro)

    asyncio.run(keep())
    return kept[0]
