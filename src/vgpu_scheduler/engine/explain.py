"""Why a pod is where it is, or why it is pending: per node and per device, the numbers behind it.

HAMi's only answer to "why is my pod pending" is a FilteringFailed event such as
`2/8 CardInsufficientMemory, 6/8 CardTimeSlicingExhausted`, gone within the hour. `explain`
rebuilds the decision for one pod and keeps every number: for each node the verdict and HAMi's
reason string (exactly what the filter answers), for each device of each vendor the pod asks for,
its usage and the first check that failed for each container, with the free amount against the
request. It changes nothing: a pod that holds an allocation or a reservation is reported where it
is, without deciding again (a decision drops the pod's own allocation first, §5.2).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from vgpu_scheduler.devices.protocol import PodFitContext
from vgpu_scheduler.engine.decide import Chosen, Error, NoFit, NoRequest, decide
from vgpu_scheduler.engine.fit import check_device, containers_so_far, pod_fit_context
from vgpu_scheduler.engine.nodeview import NodeView
from vgpu_scheduler.engine.podinfo import init_container_count
from vgpu_scheduler.engine.policy import asked_memory
from vgpu_scheduler.engine.requests import invalid_quantity, pod_requests
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import (
    PERCENTAGE_UNSET,
    ContainerDeviceRequest,
    ContainerRequests,
    DeviceInfo,
    DeviceUsage,
)
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire import reasons as R

FITS = "fits"

PENDING = "pending"
"""No allocation: the fresh decision says where the pod would go, or why nowhere."""
ALLOCATED = "allocated"
"""The pod's devices are counted on a node (bound, or its annotations arrived)."""
RESERVED = "reserved"
"""A filter chose a node; the bind has not confirmed it yet."""
NO_REQUEST = "no device request"


@dataclass(slots=True, frozen=True)
class Ask:
    """What one container asks of one vendor."""

    container: str
    vendor: str
    count: int
    memory: int
    """MiB; 0 with `memory_percent` set means a share of each device."""
    memory_percent: int | None
    cores: int


@dataclass(slots=True, frozen=True)
class Check:
    """One container's request against one device: FITS or the first failing check (§5.3)."""

    container: str
    verdict: str
    detail: str = ""


@dataclass(slots=True)
class DeviceReport:
    uuid: str
    index: int
    vendor: str
    type: str
    healthy: bool
    slots: tuple[int, int]
    """(used, count)."""
    memory: tuple[int, int]
    """(used, total) MiB."""
    cores: tuple[int, int]
    """(used, total)."""
    checks: list[Check] = field(default_factory=list)


@dataclass(slots=True)
class NodeReport:
    node: str
    fits: bool
    reason: str = ""
    """The filter's reason for this node (HAMi's GenReason string), "" when it fits."""
    score: float | None = None
    problem: str = ""
    """Why the node has no usable inventory (not registered, a broken annotation)."""
    lock: str = ""
    """Who holds the node lock, when someone does."""
    devices: list[DeviceReport] = field(default_factory=list)


@dataclass(slots=True)
class QuotaReport:
    resource: str
    used: int
    limit: int


@dataclass(slots=True)
class Explanation:
    pod: str
    """namespace/name."""
    status: str
    node: str | None
    """Where the pod is (allocated, reserved) or would go now (pending); None: nowhere."""
    asks: list[Ask] = field(default_factory=list)
    nodes: list[NodeReport] = field(default_factory=list)
    quota: list[QuotaReport] = field(default_factory=list)
    error: str = ""
    """The decision failed as a whole (e.g. invalid scoring weights): the filter's error text."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n"


def explain_pod(
    pod: Mapping[str, Any],
    node_names: Sequence[str],
    state: SchedulerState,
    *,
    default_node_policy: str,
    default_gpu_policy: str,
    now: int,
    problems: Mapping[str, str] | None = None,
    locks: Mapping[str, str] | None = None,
) -> Explanation:
    """Explain `pod` over `node_names` (the candidates kube-scheduler would send); `problems`:
    node -> why its inventory is unusable; `locks`: node -> who holds its lock. Changes nothing."""
    problems = problems or {}
    locks = locks or {}
    vendors = state.vendors
    out = Explanation(pod=f"{objects.namespace(pod)}/{objects.name(pod)}", status=PENDING, node=None)
    invalid = invalid_quantity(pod, vendors.managed_resources())
    if invalid:  # the filter refuses the pod before any node (its asks would read the value as absent)
        out.error = invalid
        return out
    requests = pod_requests(pod, vendors)
    out.asks = _asks(pod, requests)
    if not out.asks:
        out.status = NO_REQUEST
        return out
    uid = objects.uid(pod)
    placed = state.allocation(uid)
    reserved = state.reserved_node(uid)
    ctx = _context(pod, state, default_gpu_policy)
    out.quota = _quota(state, objects.namespace(pod))
    scores: dict[str, float] = {}
    failed: dict[str, str] = {}
    if placed is not None or reserved is not None:
        out.status = RESERVED if reserved is not None else ALLOCATED
        out.node = reserved if reserved is not None else placed.node if placed is not None else None
    else:
        decision = decide(
            pod, node_names, state, default_node_policy=default_node_policy,
            default_gpu_policy=default_gpu_policy, now=now, evaluate_all=True, requests=requests,
            observe=False,
        )
        if isinstance(decision, Chosen):
            out.node, scores, failed = decision.node, decision.scores, decision.failed
        elif isinstance(decision, NoFit):
            failed = decision.failed
        elif isinstance(decision, Error):
            out.error = decision.message
        elif isinstance(decision, NoRequest):  # pragma: no cover - asks were found above
            out.status = NO_REQUEST
    out.nodes.extend(
        _node_report(node, pod, state, requests=requests, ctx=ctx, scores=scores, failed=failed,
                     problems=problems, locks=locks)
        for node in node_names
    )
    return out


def _node_report(
    node: str,
    pod: Mapping[str, Any],
    state: SchedulerState,
    *,
    requests: Sequence[ContainerRequests],
    ctx: PodFitContext | None,
    scores: Mapping[str, float],
    failed: Mapping[str, str],
    problems: Mapping[str, str],
    locks: Mapping[str, str],
) -> NodeReport:
    """One candidate's line: its outcome in the decision, its problem, lock and devices."""
    report = NodeReport(node, fits=node in scores, reason=failed.get(node, ""), score=scores.get(node),
                        lock=locks.get(node, ""))
    view = state.ledger.view(node)
    if view is None:
        report.problem = problems.get(node) or "no device inventory registered"
    else:
        report.problem = problems.get(node, "")
        report.devices = _devices(view, requests, pod, ctx)
    return report


def _asks(pod: Mapping[str, Any], requests: Sequence[Mapping[str, ContainerDeviceRequest]]) -> list[Ask]:
    names = _container_names(pod)
    out = []
    for i, per_vendor in enumerate(requests):
        container = names[i] if i < len(names) else str(i)
        for vendor, req in per_vendor.items():
            pct = None if req.mem_percentage_req == PERCENTAGE_UNSET or req.memreq else req.mem_percentage_req
            out.append(Ask(container, vendor, req.nums, req.memreq, pct, req.coresreq))
    return out


def _context(pod: Mapping[str, Any], state: SchedulerState, default_gpu_policy: str) -> PodFitContext | None:
    namespace = objects.namespace(pod)
    quota = state.quota if state.quota.has_limits(namespace) else None
    try:
        return pod_fit_context(pod, vendors=state.vendors, default_policy=default_gpu_policy, quota=quota,
                               n_init=init_container_count(pod))
    except ValueError:
        return None  # invalid scoring weights: the decision's error says so


def _quota(state: SchedulerState, namespace: str) -> list[QuotaReport]:
    out = []
    for vendor in state.vendors:
        for resource in (vendor.names.memory, vendor.names.cores):
            limit = state.quota.limit(namespace, resource) if resource else None
            if limit is not None:
                out.append(QuotaReport(resource, state.quota.used(namespace, resource), limit))
    return out


def _devices(
    view: NodeView,
    requests: Sequence[ContainerRequests],
    pod: Mapping[str, Any],
    ctx: PodFitContext | None,
) -> list[DeviceReport]:
    """The devices of the vendors the pod asks for, each checked against each asking container."""
    names = _container_names(pod)
    wanted = {vendor for per_vendor in requests for vendor in per_vendor}
    reports: dict[int, DeviceReport] = {}
    for vendor_key in sorted(wanted):
        for pos in view.positions(vendor_key):
            dev, use = view.devices[pos], view.usage[pos]
            reports.setdefault(pos, _device(dev, use, vendor_key))
    if ctx is None:
        return [reports[pos] for pos in sorted(reports)]
    # What the pod's earlier containers take on this node, as the decision fits them: a rule over
    # them (Metax GPU, Mthreads, the quota) judges each device as the decision does.
    so_far = containers_so_far(requests, ctx.n_init, view, ctx)
    for i, per_vendor in enumerate(requests):
        container = names[i] if i < len(names) else str(i)
        for vendor_key, req in per_vendor.items():
            one = replace(req, nums=1)  # each device on its own: its first failing check
            for pos in view.positions(vendor_key):
                result = check_device(vendor_key, one, view, pos, ctx=ctx, so_far=so_far, container_index=i)
                verdict = FITS if result.ok else _first_reason(result.reason)
                detail = _detail(verdict, view.devices[pos], view.usage[pos], one)
                reports[pos].checks.append(Check(container, verdict, detail))
    return [reports[pos] for pos in sorted(reports)]


def _container_names(pod: Mapping[str, Any]) -> list[str]:
    """Init containers first, as the requests are listed (§5.1)."""
    return [str(c.get("name", "")) for c in [*objects.init_containers(pod), *objects.containers(pod)]]


def _device(dev: DeviceInfo, use: DeviceUsage, vendor: str) -> DeviceReport:
    return DeviceReport(
        uuid=dev.id, index=dev.index, vendor=dev.device_vendor or vendor, type=dev.type, healthy=dev.health,
        slots=(use.used, dev.count), memory=(use.usedmem, dev.devmem), cores=(use.usedcores, dev.devcore),
    )


def _first_reason(reason: str) -> str:
    """`1/1 CardInsufficientMemory` -> `CardInsufficientMemory` (a single device: one entry)."""
    first = reason.split(", ")[0]
    return first.split(" ", 1)[1] if " " in first else first or "unknown"


def _detail(verdict: str, dev: DeviceInfo, use: DeviceUsage, req: ContainerDeviceRequest) -> str:
    """The numbers behind a verdict, in words."""
    if verdict == FITS:
        return (f"free {dev.devmem - use.usedmem} MiB >= {asked_memory(dev, req)} MiB, "
                f"free cores {dev.devcore - use.usedcores} >= {req.coresreq}")
    if verdict == R.CARD_INSUFFICIENT_MEMORY:
        return f"free {dev.devmem - use.usedmem} MiB < {asked_memory(dev, req)} MiB asked"
    if verdict == R.CARD_INSUFFICIENT_CORE:
        return f"free cores {dev.devcore - use.usedcores} < {req.coresreq} asked"
    if verdict == R.CARD_TIME_SLICING_EXHAUSTED:
        return f"{use.used} of {dev.count} shares taken"
    if verdict == R.CARD_COMPUTE_UNITS_EXHAUSTED:
        return f"cores {use.usedcores}/{dev.devcore} used"
    if verdict == R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT:
        return f"asks the whole device ({req.coresreq} cores) but {use.used} pod(s) share it"
    if verdict in (R.CARD_NOT_HEALTH, R.CARD_UNHEALTHY):
        return "the device plugin reports it unhealthy"
    if verdict == R.CARD_TYPE_MISMATCH:
        return f"type {dev.type} (mode {dev.mode}) excluded by the pod's type/mode annotations"
    if verdict == R.CARD_UUID_MISMATCH:
        return f"uuid {dev.id} excluded by the pod's uuid annotations"
    if verdict == R.CARD_CORDONED:
        return "listed in the node's hami.io/device-cordon"
    if verdict == R.RESOURCE_QUOTA_NOT_FIT:
        return "the namespace's ResourceQuota would be exceeded"
    return ""


# -- text -----------------------------------------------------------------------------------------


def render_text(exp: Explanation) -> str:
    """The explanation for people: one block per node, one line per device and container."""
    lines = [f"Pod {exp.pod}: {_headline(exp)}"]
    for ask in exp.asks:
        memory = f"{ask.memory_percent}% of memory" if ask.memory_percent is not None else f"{ask.memory} MiB"
        what = f"{ask.count} x {ask.vendor}, {memory}, {ask.cores} cores"
        lines.append(f"  asks: container {ask.container}: {what}")
    for q in exp.quota:
        lines.append(f"  quota: {q.resource} {q.used}/{q.limit} used")
    if exp.error:
        lines.append(f"  error: {exp.error}")
    for node in exp.nodes:
        lines.append(f"Node {node.node}: {_node_headline(node, exp)}")
        if node.lock:
            lines.append(f"  lock: {node.lock}")
        for dev in node.devices:
            state = "" if dev.healthy else ", UNHEALTHY"
            lines.append(
                f"  {dev.uuid} ({dev.type}, index {dev.index}{state}): shares {dev.slots[0]}/{dev.slots[1]}, "
                f"memory {dev.memory[0]}/{dev.memory[1]} MiB, cores {dev.cores[0]}/{dev.cores[1]}"
            )
            for check in dev.checks:
                detail = f" ({check.detail})" if check.detail else ""
                lines.append(f"    {check.container}: {check.verdict}{detail}")
    return "\n".join(lines) + "\n"


def _headline(exp: Explanation) -> str:
    if exp.error and not exp.nodes:
        return "pending; the filter refuses it on every node (error below)"
    if exp.status == NO_REQUEST:
        return "asks for no device; the scheduler extender leaves it to kube-scheduler"
    if exp.status == ALLOCATED:
        return f"allocated on {exp.node}"
    if exp.status == RESERVED:
        return f"reserved on {exp.node} (bind in flight)"
    if exp.node is not None:
        fitting = sum(n.fits for n in exp.nodes)
        return f"pending; fits on {exp.node} now ({fitting} of {len(exp.nodes)} nodes fit)"
    return f"pending; fits on none of {len(exp.nodes)} nodes"


def _node_headline(node: NodeReport, exp: Explanation) -> str:
    if node.problem and not node.devices:
        return f"no usable devices: {node.problem}"
    if node.fits:
        chosen = " (chosen)" if node.node == exp.node else ""
        text = f"fits, score {node.score:.2f}{chosen}" if node.score is not None else "fits"
    elif node.reason:
        text = f"does not fit: {node.reason}"
    else:
        text = "not evaluated (the pod is already placed)" if exp.status != PENDING else "not evaluated"
    return f"{text}; inventory problem: {node.problem}" if node.problem else text
