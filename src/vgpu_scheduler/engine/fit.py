"""Per-node evaluation of a pod (§5.4) over the vendors' fits (§5.3).

`evaluate_node` is HAMi's per-node evaluation: init containers each on a fresh copy of the node's
usage, app containers one after another on one copy, the allocation list init-first and padded
per vendor. For each container `_fit_container` is HAMi's `fitInDevices`: score the devices, sort
them by the GPU policy, then per request the vendor's pre-check, `Fit` and `AddResourceUsage`.
The vendor is found by the request's key in the pod's vendor set; the engine never names one.
Every vendor fit gets the devices the pod's earlier containers took (`SoFar`, HAMi's `devinput`),
whichever path decides: `_fit_container` and `check_device` are the only callers of `Vendor.fit`.

Performance notes (the decision runs for thousands of nodes per Filter): per-pod constants live
in `PodFitContext`, built once per Filter; the node's usage is copied on write per device, so a
container that does not fit never copies a NodeView; a container whose outcome cannot depend on
the device order is first judged by the vendors' `quick_verdict` (no scores, no sorting), so a
node that does not fit costs one pass over its devices; `node_judge` is that verdict with the pod's
part worked out once (`Vendor.quick_judge`), for a caller judging many nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.devices.protocol import FitResult as FitResult
from vgpu_scheduler.devices.protocol import MemoryShortfall, Pinned, QuotaCheck, UsageError, Vendor, Vendors
from vgpu_scheduler.devices.protocol import PodFitContext as PodFitContext
from vgpu_scheduler.engine.nodeview import NodeView
from vgpu_scheduler.engine.policy import (
    DEFAULT_GPU_POLICY,
    MUTEX,
    TOPOLOGY_AWARE,
    parse_go_bool,
    policy_contains,
    sort_key,
)
from vgpu_scheduler.engine.scores import Weights, pod_scoring_weights, request_terms, score_of
from vgpu_scheduler.model import (
    ContainerDeviceRequest,
    ContainerDevices,
    ContainerRequests,
    DeviceInfo,
    DeviceUsage,
    MigAllocation,
    PodDevices,
    PodSingleDevice,
)
from vgpu_scheduler.wire import keys, objects
from vgpu_scheduler.wire import reasons as R

DEVICE_TYPE_NOT_FOUND = "Device type not found"
"""HAMi's failure text for a request whose vendor has no backend."""

NO_VENDORS = Vendors(())


# --------------------------------------------------------------------------------------------
# Per-pod constants


@dataclass(slots=True, frozen=True)
class ContainerPlan:
    """Indices of the containers with requests (init / app) and the vendors the pod asks for."""

    init: tuple[int, ...]
    app: tuple[int, ...]
    vendors: tuple[str, ...]

    @staticmethod
    def of(requests: Sequence[ContainerRequests], n_init: int) -> ContainerPlan:
        vendors: list[str] = []
        for creq in requests:
            vendors.extend(v for v in creq if v not in vendors)
        n_init = min(n_init, len(requests))
        return ContainerPlan(
            tuple(i for i in range(n_init) if requests[i]),
            tuple(i for i in range(n_init, len(requests)) if requests[i]),
            tuple(vendors),
        )


NodeJudge = Callable[[NodeView], str | None]
"""`quick_verdict(requests, n_init, node, ctx)` of one pod, as a function of the node."""


def plan_of(ctx: PodFitContext, requests: Sequence[ContainerRequests], n_init: int) -> ContainerPlan:
    """Which containers ask for devices (cached: the same requests are fitted on every node)."""
    return _prepared(ctx, requests, n_init).plan


def node_judge(ctx: PodFitContext, requests: Sequence[ContainerRequests], n_init: int) -> NodeJudge | None:
    """`quick_verdict` of the pod as a function of the node, worked out once per pod (cached like
    the plan, on first use); None when that verdict is always None."""
    prepared = _prepared(ctx, requests, n_init)
    if not prepared.judged:
        prepared.judge = _judge(ctx, requests, prepared.plan)
        prepared.judged = True
    return prepared.judge


def node_shortfall(
    ctx: PodFitContext, requests: Sequence[ContainerRequests], n_init: int
) -> tuple[str, int, MemoryShortfall] | None:
    """(vendor key, devices asked, `Vendor.memory_shortfall`) of a pod whose order-free verdict
    judges one request (`node_judge`), when its vendor offers one; else None."""
    single = _single_request(requests, plan_of(ctx, requests, n_init))
    if single is None:
        return None
    key, req = single
    vendor = ctx.vendors.get(key)
    shortfall = None if vendor is None else vendor.memory_shortfall(req, ctx)
    return None if shortfall is None else (key, req.nums, shortfall)


def node_pins(ctx: PodFitContext, requests: Sequence[ContainerRequests], n_init: int) -> Pinned | None:
    """`Vendor.pinned_devices` of a pod whose order-free verdict judges one request (`node_judge`):
    on a node holding none of these ids, the pod's verdict reads only the node's inventory (the
    NodeInsufficientDevice pre-check included); else None."""
    single = _single_request(requests, plan_of(ctx, requests, n_init))
    if single is None:
        return None
    key, req = single
    vendor = ctx.vendors.get(key)
    return None if vendor is None else vendor.pinned_devices(req, ctx)


def _single_request(
    requests: Sequence[ContainerRequests], plan: ContainerPlan
) -> tuple[str, ContainerDeviceRequest] | None:
    """(vendor key, request) of a pod with one container asking one vendor, else None."""
    if len(plan.init) + len(plan.app) != 1:
        return None
    creq = requests[(plan.init or plan.app)[0]]
    if len(creq) != 1:
        return None
    ((key, req),) = creq.items()
    return key, req


class _Prepared:
    """What a pod's requests give once, kept in its context: the plan, and the judge on first use
    (a pod decided from its group's verdicts never needs its own)."""

    __slots__ = ("judge", "judged", "n_init", "plan", "requests")

    def __init__(self, requests: Sequence[ContainerRequests], n_init: int) -> None:
        self.requests = requests
        self.n_init = n_init
        self.plan = ContainerPlan.of(requests, n_init)
        self.judge: NodeJudge | None = None
        self.judged = False


def _prepared(ctx: PodFitContext, requests: Sequence[ContainerRequests], n_init: int) -> _Prepared:
    for prepared in ctx._plans:
        if prepared.requests is requests and prepared.n_init == n_init:
            assert isinstance(prepared, _Prepared)
            return prepared
    prepared = _Prepared(requests, n_init)
    ctx._plans.append(prepared)
    return prepared


def _judge(
    ctx: PodFitContext, requests: Sequence[ContainerRequests], plan: ContainerPlan
) -> NodeJudge | None:
    """The order-free verdict applies to one container asking one vendor (see `quick_verdict`)."""
    single = _single_request(requests, plan)
    if single is None:
        return None
    key, req = single
    vendor = ctx.vendors.get(key)
    if vendor is None:
        return lambda node: DEVICE_TYPE_NOT_FOUND
    judge = vendor.quick_judge(req, ctx)
    nums = req.nums

    def verdict(node: NodeView) -> str | None:
        positions = node._positions.get(key)  # `node.positions(key)`, inline once known
        if positions is None:
            positions = node.positions(key)
        if nums > len(positions) and not vendor.may_exceed_devices(req, node.devices, positions, ctx):
            return R.NODE_INSUFFICIENT_DEVICE  # HAMi's pre-check before Fit
        return None if judge is None else judge(node.devices, node.usage, positions, node.cordoned)

    return verdict


def pod_fit_context(
    pod: Mapping[str, Any],
    *,
    vendors: Vendors,
    default_policy: str = DEFAULT_GPU_POLICY,
    weights: Weights | None = None,
    quota: QuotaCheck | None = None,
    n_init: int | None = None,
) -> PodFitContext:
    """Build the per-pod context. Without `weights` the pod annotation is parsed, which raises
    `ScoringWeightsError` for an invalid value (HAMi then fails the whole Filter)."""
    # A filter body is not validated by an API server: non-string annotation values are dropped.
    annos = objects.annotations(pod)
    policy = annos.get(keys.GPU_SCHEDULER_POLICY, default_policy)
    numa = annos.get(keys.NUMA_BIND)
    return PodFitContext(
        vendors=vendors,
        annotations=annos,
        namespace=objects.namespace(pod),
        policy=policy,
        numa_bind=numa is not None and parse_go_bool(numa),
        mutex=policy_contains(policy, MUTEX),
        topology=policy_contains(policy, TOPOLOGY_AWARE),
        weights=pod_scoring_weights(annos) if weights is None else weights,
        quota=quota,
        n_init=objects.init_container_count(pod) if n_init is None else n_init,
    )


# --------------------------------------------------------------------------------------------
# Usage bookkeeping on a copy-on-write view of the node's usage


class _Usage:
    """The node's usage list, copied per device on first write."""

    __slots__ = ("items", "owned")

    def __init__(self, base: Sequence[DeviceUsage]) -> None:
        self.items: list[DeviceUsage] = list(base)
        self.owned = [False] * len(self.items)

    def writable(self, pos: int) -> DeviceUsage:
        if not self.owned[pos]:
            self.items[pos] = self.items[pos].copy()
            self.owned[pos] = True
        return self.items[pos]


def _apply(
    vendor: Vendor,
    devices: Sequence[DeviceInfo],
    usage: _Usage,
    result: FitResult,
    *,
    container_index: int,
    migs: list[MigAllocation],
) -> str:
    """Add the chosen devices to the node usage (HAMi `AddResourceUsage`); "" or an error text."""
    for k, pos in enumerate(result.positions):
        dev = devices[pos]
        try:
            result.devices[k] = vendor.add_usage(
                dev, usage.writable(pos), result.devices[k], container_index=container_index,
                device_index=k, migs=migs,
            )
        except UsageError as exc:
            return f"AddResourceUsage failed for device {dev.id}: {exc}"
    return ""


def _scores_for(
    devices: Sequence[DeviceInfo],
    usage: Sequence[DeviceUsage],
    positions: Sequence[int],
    *,
    requests: ContainerRequests,
    weights: Weights,
) -> list[float]:
    """Scores indexed by node position (0.0 for positions outside `positions`)."""
    out = [0.0] * len(devices)
    types = {r.type for r in requests.values()}
    for p in positions:
        d = devices[p]
        u = usage[p]
        if d.type in types:
            rn, rc, rm = request_terms(requests, d.type, d.devmem)
            out[p] = score_of(d.count, d.devcore, d.devmem, slots=u.used + rn, cores=u.usedcores + rc,
                mem=u.usedmem + rm, weights=weights
            )
        else:
            out[p] = score_of(d.count, d.devcore, d.devmem, slots=u.used, cores=u.usedcores, mem=u.usedmem,
                weights=weights)
    return out


# --------------------------------------------------------------------------------------------
# The pod's earlier containers


class SoFar:
    """HAMi `fitInDevices`' `devinput` on one node: per vendor key, the devices the pod's earlier
    containers took, per phase (HAMi keeps two lists: an init container sees the init containers
    before it, an app container the app containers before it). It is the only source of a vendor
    fit's `allocated` (`_fit_container` takes nothing else), so no path can leave a rule over the
    pod's earlier containers (Metax GPU, Mthreads) or the quota without them."""

    __slots__ = ("fitted", "n_init")

    def __init__(self, n_init: int) -> None:
        self.n_init = n_init
        self.fitted: dict[int, Mapping[str, ContainerDevices]] = {}

    def add(self, index: int, devices: Mapping[str, ContainerDevices]) -> None:
        """Container `index` took `devices` (per vendor key)."""
        self.fitted[index] = devices

    def before(self, index: int, key: str) -> PodSingleDevice:
        """Vendor `key`'s allocation list as container `index` is fitted: one entry per earlier
        container of its phase, empty where it took none of `key` (padded, as in HAMi)."""
        start = 0 if index < self.n_init else self.n_init
        empty: ContainerDevices = []
        fitted = self.fitted
        return [fitted[j].get(key, empty) if j in fitted else empty for j in range(start, index)]

    def of(self, index: int, key: str) -> ContainerDevices:
        """What container `index` took of vendor `key` ([] when nothing, or not fitted)."""
        devices = self.fitted.get(index)
        return [] if devices is None else devices.get(key, [])


# --------------------------------------------------------------------------------------------
# One container


@dataclass(slots=True)
class _ContainerFit:
    ok: bool
    devices: dict[str, ContainerDevices] = field(default_factory=dict)
    reason: str = ""
    order: list[int] = field(default_factory=list)


def _fit_container(
    requests: ContainerRequests, node: NodeView, usage: _Usage, order: list[int], *, ctx: PodFitContext,
    so_far: SoFar, container_index: int, migs: list[MigAllocation], apply: bool = True, judged: bool = False,
) -> _ContainerFit:
    """HAMi `fitInDevices` for one container: score, sort, pre-check, Fit, add usage.

    `order` is the node's device positions in the order the previous container left them (HAMi
    sorts the node copy in place); each request sorts it again and fits the vendor's devices in that
    order. First, while the vendors can tell without the order, a failing container is decided by
    `quick_verdict` alone. `apply=False`: nothing is fitted after this container, so its usage is
    added only where the vendor's entries change with it. `judged`: the order-free verdict already
    found this lone request fits. Each vendor's fit sees the pod's earlier containers (`so_far`);
    the order-free verdict, which does not, is asked only for a vendor none of them took a device of.
    """
    vendors = ctx.vendors
    devices = node.devices
    cordoned = node.cordoned
    # Several vendors in one container: each sees the usage the previous one added, so only a
    # lone request may be judged out of order.
    quick = len(requests) == 1
    scores: list[float] | None = None
    out = _ContainerFit(True)
    for key, req in requests.items():
        vendor = vendors.get(key)
        if vendor is None:
            return _ContainerFit(False, reason=DEVICE_TYPE_NOT_FOUND)
        positions = node.positions(key)
        if req.nums > len(positions) and not vendor.may_exceed_devices(req, devices, positions, ctx):
            return _ContainerFit(False, reason=R.NODE_INSUFFICIENT_DEVICE)
        allocated = so_far.before(container_index, key)
        if quick and not judged and not any(allocated):
            reason = vendor.quick_verdict(req, devices, usage.items, positions, ctx=ctx, cordoned=cordoned)
            if reason:
                return _ContainerFit(False, reason=reason)
        if scores is None:  # once per container, on the usage before any of its requests
            scores = _scores_for(devices, usage.items, order, requests=requests, weights=ctx.weights)
        order = sorted(order, key=sort_key(ctx.policy, ctx.numa_bind, devices=devices, usage=usage.items,
            scores=scores, request=req))
        if len(positions) == len(devices):
            typed = order
        else:
            mine = set(positions)
            typed = [p for p in order if p in mine]
        result = vendor.fit(req, devices, usage.items, typed, ctx=ctx, cordoned=cordoned, allocated=allocated)
        if not result.ok:
            return _ContainerFit(False, reason=result.reason)
        if apply or result.adjust or not quick:
            error = _apply(vendor, devices, usage, result, container_index=container_index, migs=migs)
            if error:
                return _ContainerFit(False, reason=error)
        out.devices[key] = result.devices
    out.order = order
    return out


def fit_container(
    request: ContainerDeviceRequest,
    node: NodeView,
    ctx: PodFitContext,
    *,
    order: Sequence[int] | None = None,
) -> tuple[FitResult, list[MigAllocation]]:
    """Fit a pod's lone container, asking one request of vendor `request.type`, on `node` (a
    mutable copy: its usage is updated). `order` is the incoming device order (default: inventory
    order)."""
    usage = _Usage(node.usage)
    migs: list[MigAllocation] = []
    res = _fit_container(
        {request.type: request},
        node,
        usage,
        list(order) if order is not None else list(range(len(node.devices))),
        ctx=ctx,
        so_far=SoFar(0),
        container_index=0,
        migs=migs,
    )
    node.usage[:] = usage.items
    if not res.ok:
        return FitResult(False, reason=res.reason), migs
    devs = res.devices.get(request.type, [])
    by_id = {d.id: p for p, d in enumerate(node.devices)}
    return FitResult(True, devs, [by_id[d.uuid] for d in devs]), migs


def check_device(
    key: str,
    request: ContainerDeviceRequest,
    node: NodeView,
    pos: int,
    *,
    ctx: PodFitContext,
    so_far: SoFar,
    container_index: int,
) -> FitResult:
    """Vendor `key`'s fit of `request` on the device at `pos` alone, on the node's usage before
    the pod (explain's per-device checks), seeing the pod's earlier containers as any fit does."""
    vendor = ctx.vendors[key]
    return vendor.fit(request, node.devices, [u.copy() for u in node.usage], [pos], ctx=ctx,
                      cordoned=node.cordoned, allocated=so_far.before(container_index, key))


# --------------------------------------------------------------------------------------------
# Per-node evaluation


@dataclass(slots=True)
class NodeFit:
    """The pod fits: its allocation (init containers first, padded per vendor) and MIG picks."""

    devices: PodDevices
    mig: list[MigAllocation] = field(default_factory=list)


@dataclass(slots=True)
class NodeFailure:
    """The pod does not fit: the first failing container's reason string."""

    reason: str


def evaluate_node(
    requests: Sequence[ContainerRequests],
    n_init: int,
    node: NodeView,
    pod: Mapping[str, Any] | None = None,
    *,
    ctx: PodFitContext | None = None,
    vendors: Vendors | None = None,
    default_policy: str = DEFAULT_GPU_POLICY,
    weights: Weights | None = None,
    quota: QuotaCheck | None = None,
    judged: bool = False,
) -> NodeFit | NodeFailure:
    """Fit every container of a pod on `node` (never mutated) — §5.4.

    Pass a prebuilt `ctx` (from `pod_fit_context`) when evaluating many nodes for one pod; else
    it is built from `pod`, `vendors` and the keyword arguments. `requests` is `pod_requests(...)`:
    one entry per container, the first `n_init` being init containers. `judged`: the caller ran
    the pod's `node_judge` on this node and it gave no reason (it is not run again).
    """
    if ctx is None:
        ctx = pod_fit_context(
            pod or {}, vendors=vendors if vendors is not None else NO_VENDORS, default_policy=default_policy,
            weights=weights, quota=quota, n_init=n_init,
        )
    # Most evaluations are of nodes that do not fit: the order-free verdict first, without copies.
    quick = None if judged else quick_verdict(requests, n_init, node, ctx)
    if quick:
        return NodeFailure(quick)
    return _walk(requests, n_init, node, ctx, so_far=SoFar(n_init), judged=quick == "")


def containers_so_far(
    requests: Sequence[ContainerRequests], n_init: int, node: NodeView, ctx: PodFitContext
) -> SoFar:
    """What each container of the pod takes on `node` as `evaluate_node` fits them, up to the
    first that does not fit (explain's per-device checks see the earlier containers by it)."""
    so_far = SoFar(n_init)
    _walk(requests, n_init, node, ctx, so_far=so_far, judged=False)
    return so_far


def _walk(
    requests: Sequence[ContainerRequests],
    n_init: int,
    node: NodeView,
    ctx: PodFitContext,
    *,
    so_far: SoFar,
    judged: bool,
) -> NodeFit | NodeFailure:
    """HAMi's scoreNode over the containers, each fitted seeing the earlier ones (`so_far`)."""
    plan = plan_of(ctx, requests, n_init)
    base_order = list(range(len(node.devices)))
    migs: list[MigAllocation] = []

    # Init containers run one after another: each sees only the pre-existing usage.
    for i in plan.init:
        res = _fit_container(
            requests[i], node, _Usage(node.usage), base_order, ctx=ctx, so_far=so_far,
            container_index=i, migs=migs, apply=False, judged=judged,
        )
        if not res.ok:
            return NodeFailure(res.reason)
        so_far.add(i, res.devices)

    # App containers run together: fit them one after another on one copy, in place order.
    usage = _Usage(node.usage)
    order = base_order
    for i in plan.app:
        res = _fit_container(
            requests[i], node, usage, order, ctx=ctx, so_far=so_far, container_index=i, migs=migs,
            apply=i != plan.app[-1], judged=judged,
        )
        if not res.ok:
            return NodeFailure(res.reason)
        order = res.order
        so_far.add(i, res.devices)

    n = len(requests)
    return NodeFit({v: [so_far.of(i, v) for i in range(n)] for v in plan.vendors}, migs)


def quick_verdict(
    requests: Sequence[ContainerRequests],
    n_init: int,
    node: NodeView,
    ctx: PodFitContext,
) -> str | None:
    """The reason `evaluate_node` would fail with, found without building its copies, for the
    common pod: one container asking one vendor whose verdict does not depend on the device
    order (the same checks `_fit_container` runs first); "" when such a pod fits, None when
    this cannot tell."""
    judge = node_judge(ctx, requests, n_init)
    return None if judge is None else judge(node)


def node_verdict(
    requests: Sequence[ContainerRequests],
    n_init: int,
    node: NodeView,
    ctx: PodFitContext,
) -> NodeFailure | None:
    """None when the pod fits on `node`, else the NodeFailure `evaluate_node` returns."""
    result = evaluate_node(requests, n_init, node, ctx=ctx)
    return result if isinstance(result, NodeFailure) else None
