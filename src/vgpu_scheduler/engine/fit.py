"""Per-device fit and per-node evaluation for NVIDIA (§5.3, §5.4).

`fit_request` is HAMi's `Fit` (one container x one vendor request over the node's devices in
policy order), `evaluate_node` is HAMi's per-node evaluation (init containers each on a fresh
copy, app containers sequentially on one copy, allocation list init-first and padded per vendor).

Performance notes (the decision runs for thousands of nodes per Filter): per-pod constants
(annotation filters, policy flags, weights) live in `PodFitContext`, built once per Filter; the
node's usage is copied on write per device, so a container that does not fit — or the last
container of a pod — never copies a NodeView; containers whose outcome cannot depend on the
device order skip the ordered walk (`simple_outcomes`); `node_verdict` answers fit/no-fit
(with the exact reason) without scoring or sorting for the common single-container pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.engine import reasons as R
from vgpu_scheduler.engine.migfit import MIG_MODE, mig_feasible, placement_capacity, select_mig
from vgpu_scheduler.engine.nodeview import DeviceUsage, NodeView, QuotaCheck
from vgpu_scheduler.engine.policy import (
    DEFAULT_GPU_POLICY,
    MUTEX,
    TOPOLOGY_AWARE,
    parse_go_bool,
    policy_contains,
    sort_key,
)
from vgpu_scheduler.engine.scores import (
    DEFAULT_WEIGHTS,
    Weights,
    pod_scoring_weights,
    request_terms,
    score_of,
)
from vgpu_scheduler.engine.topology import best_combination, worst_single
from vgpu_scheduler.model import (
    NVIDIA,
    PERCENTAGE_UNSET,
    ContainerDevice,
    ContainerDeviceRequest,
    ContainerDevices,
    ContainerRequests,
    DeviceInfo,
    MigAllocation,
    PodDevices,
    PodSingleDevice,
)
from vgpu_scheduler.wire import keys, objects

DEVICE_TYPE_NOT_FOUND = "Device type not found"
_MIG_ALLOCATION_FAILED = "MIG profile and placement allocation failed"
"""HAMi's failure text for a request whose vendor has no backend."""


# --------------------------------------------------------------------------------------------
# Per-pod constants


def _type_list(value: str | None) -> tuple[str, ...] | None:
    """use/nouse-gputype members upper-cased; None = no constraint (absent or blank)."""
    if value is None or not value.strip():
        return None
    return tuple(m.strip().upper() for m in value.split(",") if m.strip())


def _uuid_set(value: str | None) -> frozenset[str] | None:
    """use/nouse-gpuuuid members trimmed; None = no constraint (absent or blank)."""
    if value is None or not value.strip():
        return None
    return frozenset(m.strip() for m in value.split(","))


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


@dataclass(slots=True)
class PodFitContext:
    """Everything fit needs from the pod, computed once per Filter (not per node)."""

    namespace: str = ""
    policy: str = DEFAULT_GPU_POLICY
    numa_bind: bool = False
    mutex: bool = False
    topology: bool = False
    use_types: tuple[str, ...] | None = None
    nouse_types: tuple[str, ...] | None = None
    use_uuids: frozenset[str] | None = None
    nouse_uuids: frozenset[str] | None = None
    vgpu_mode: str | None = None
    weights: Weights = DEFAULT_WEIGHTS
    quota: QuotaCheck | None = None
    n_init: int = 0
    _plans: list[tuple[Sequence[ContainerRequests], int, ContainerPlan]] = field(
        default_factory=list, repr=False
    )

    def plan(self, requests: Sequence[ContainerRequests], n_init: int) -> ContainerPlan:
        """Which containers ask for devices (cached: the same requests are fitted on every node)."""
        for reqs, n, plan in self._plans:
            if reqs is requests and n == n_init:
                return plan
        plan = ContainerPlan.of(requests, n_init)
        self._plans.append((requests, n_init, plan))
        return plan

    def type_ok(self, dev: DeviceInfo) -> bool:
        """Type filters (case-insensitive substring) and `nvidia.com/vgpu-mode` (substring)."""
        if self.use_types is not None or self.nouse_types is not None:
            model = dev.type.upper()
            if self.use_types is not None and not any(t in model for t in self.use_types):
                return False
            if self.nouse_types is not None and any(t in model for t in self.nouse_types):
                return False
        return self.vgpu_mode is None or dev.mode in self.vgpu_mode

    def uuid_ok(self, uuid: str) -> bool:
        if self.use_uuids is not None and uuid not in self.use_uuids:
            return False
        return self.nouse_uuids is None or uuid not in self.nouse_uuids

    @property
    def mig_allowed(self) -> bool:
        """Pods whose vgpu-mode annotation lacks "mig" never count as MIG requests."""
        return self.vgpu_mode is None or MIG_MODE in self.vgpu_mode


def pod_fit_context(
    pod: Mapping[str, Any],
    *,
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
        namespace=objects.namespace(pod),
        policy=policy,
        numa_bind=numa is not None and parse_go_bool(numa),
        mutex=policy_contains(policy, MUTEX),
        topology=policy_contains(policy, TOPOLOGY_AWARE),
        use_types=_type_list(annos.get(keys.USE_GPUTYPE)),
        nouse_types=_type_list(annos.get(keys.NOUSE_GPUTYPE)),
        use_uuids=_uuid_set(annos.get(keys.USE_GPUUUID)),
        nouse_uuids=_uuid_set(annos.get(keys.NOUSE_GPUUUID)),
        vgpu_mode=annos.get(keys.VGPU_MODE),
        weights=pod_scoring_weights(annos) if weights is None else weights,
        quota=quota,
        n_init=objects.init_container_count(pod) if n_init is None else n_init,
    )


# --------------------------------------------------------------------------------------------
# Fit of one request


@dataclass(slots=True)
class FitResult:
    ok: bool
    devices: ContainerDevices = field(default_factory=list)
    """Chosen devices (Usedmem = resolved memreq; MIG devices get profile values when applied)."""
    positions: list[int] = field(default_factory=list)
    """Node positions of `devices`."""
    reason: str = ""
    """GenReason string on failure ("" on success)."""


def vendor_positions(devices: Sequence[DeviceInfo], vendor: str = NVIDIA) -> list[int]:
    """Positions of the node's devices that belong to `vendor` (`getNodeResources`)."""
    needle = vendor.lower()
    # Registered NVIDIA types start with "NVIDIA", so the case-sensitive test usually decides.
    return [i for i, d in enumerate(devices) if vendor in d.type or needle in d.type.lower()]


def _trunc_div(a: int, b: int) -> int:
    """Go integer division (truncates toward zero)."""
    q = abs(a) // b
    return q if a >= 0 else -q


def _quota_usage(
    allocated: Sequence[ContainerDevices],
    n_init: int,
    current: Sequence[tuple[str, int, int]],
) -> tuple[int, int]:
    """Whole-pod hypothetical NVIDIA (memory, cores), init containers collapsed (§5.8).

    `allocated` is the allocation list being built (HAMi passes its own list: during the init
    phase the init entries so far, during the app phase the app entries so far — so app
    container j counts as an init container when j < n_init, as in HAMi); `current` is this
    container's collected devices plus the candidate, at index len(allocated).
    """
    acc: dict[str, list[int]] = {}  # uuid -> [init peak mem, init peak cores, app mem, app cores]
    for ci, ctr in enumerate(allocated):
        for dev in ctr:
            a = acc.setdefault(dev.uuid, [0, 0, 0, 0])
            if ci < n_init:
                a[0] = max(a[0], dev.usedmem)
                a[1] = max(a[1], dev.usedcores)
            else:
                a[2] += dev.usedmem
                a[3] += dev.usedcores
    init = len(allocated) < n_init
    for uuid, mem, cores in current:
        a = acc.setdefault(uuid, [0, 0, 0, 0])
        if init:
            a[0] = max(a[0], mem)
            a[1] = max(a[1], cores)
        else:
            a[2] += mem
            a[3] += cores
    return sum(max(a[0], a[2]) for a in acc.values()), sum(max(a[1], a[3]) for a in acc.values())


def fit_request(
    request: ContainerDeviceRequest,
    devices: Sequence[DeviceInfo],
    usage: Sequence[DeviceUsage],
    order: Sequence[int],
    *,
    ctx: PodFitContext,
    cordoned: frozenset[str] = frozenset(),
    allocated: Sequence[ContainerDevices] = (),
) -> FitResult:
    """HAMi NVIDIA `Fit`: examine `order` (sorted device positions) from the END.

    The first failing check of a device counts one reason and skips it; the reason total is
    len(order).
    """
    origin = request.nums
    remaining = origin
    coresreq = request.coresreq
    pct = request.mem_percentage_req
    req_mem = request.memreq
    topology = ctx.topology
    mutex = ctx.mutex
    numa_bind = ctx.numa_bind
    type_is_nvidia = request.type == NVIDIA
    reasons: dict[str, int] = {}
    collected: list[tuple[int, int, int]] = []  # (position, memreq, cores)
    prevnuma = -1
    quota = ctx.quota

    i = len(order) - 1
    while i >= 0:
        pos = order[i]
        i -= 1
        dev = devices[pos]
        u = usage[pos]
        reason: str | None = None
        if not dev.health or u.mig_conflict:
            reason = R.CARD_NOT_HEALTH
        elif dev.id in cordoned:
            reason = R.CARD_CORDONED
        elif not type_is_nvidia or not ctx.type_ok(dev):
            reason = R.CARD_TYPE_MISMATCH
        if reason is not None:
            reasons[reason] = reasons.get(reason, 0) + 1
            continue
        if numa_bind and prevnuma != dev.numa:
            # A new NUMA group: what the previous group collected cannot be used together.
            if remaining != origin:
                reasons[R.NUMA_NOT_FIT] = reasons.get(R.NUMA_NOT_FIT, 0) + len(collected)
            remaining = origin
            prevnuma = dev.numa
            collected = []
        if not ctx.uuid_ok(dev.id):
            reason = R.CARD_UUID_MISMATCH
        elif dev.count <= u.used:
            reason = R.CARD_TIME_SLICING_EXHAUSTED
        elif mutex and u.used > 0:
            reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
        else:
            if coresreq > 100:
                coresreq = 100  # HAMi logs and clamps; the clamp sticks for later devices
            memreq = 0
            if req_mem > 0:
                memreq = req_mem
            if pct != PERCENTAGE_UNSET and req_mem == 0:
                memreq = _trunc_div(dev.devmem * pct, 100)
            if quota is not None:
                current = [(devices[p].id, m, c) for p, m, c in collected]
                current.append((dev.id, memreq, coresreq))
                mem_total, core_total = _quota_usage(allocated, ctx.n_init, current)
                if not quota.fits(ctx.namespace, NVIDIA, mem_total, core_total):
                    reason = R.RESOURCE_QUOTA_NOT_FIT
            if reason is not None:
                pass
            elif dev.devmem - u.usedmem < memreq:
                reason = R.CARD_INSUFFICIENT_MEMORY
            elif dev.devcore - u.usedcores < coresreq:
                reason = R.CARD_INSUFFICIENT_CORE
            elif dev.devcore == 100 and coresreq == 100 and u.used > 0:
                # Coresreq 100 asks for the whole card.
                reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            elif dev.devcore != 0 and u.usedcores == dev.devcore and coresreq == 0:
                reason = R.CARD_COMPUTE_UNITS_EXHAUSTED
            elif dev.mode == MIG_MODE and not mig_feasible(
                dev.mig_profiles,
                [pl for _, pl in u.mig_taken],
                [m for p, m, _ in collected if p == pos],
                memreq,
            ):
                reason = R.CARD_MIG_TOPOLOGY_INFEASIBLE
            else:
                if remaining > 0:
                    if not topology:
                        remaining -= 1
                    collected.append((pos, memreq, coresreq))
                if remaining == 0 and not topology:
                    return _success(devices, collected)
                if dev.mode == MIG_MODE:
                    # Several MIG instances of one container may share this GPU: look again
                    # (until the look that fails and counts its reason). Bounded by the
                    # placements so a malformed inventory cannot loop forever.
                    taken_here = sum(1 for c in collected if c[0] == pos)
                    if taken_here <= placement_capacity(dev.mig_profiles):
                        i += 1
                continue
        reasons[reason] = reasons.get(reason, 0) + 1

    if topology:
        if len(collected) == origin:
            return _success(devices, collected)
        if len(collected) > origin:
            uuids = [devices[p].id for p, _, _ in collected]
            scores = {uid: devices[p].pair_scores for uid, (p, _, _) in zip(uuids, collected, strict=True)}
            if origin == 1:
                chosen = [collected[worst_single(uuids, scores)]]
            else:
                chosen = [collected[k] for k in best_combination(uuids, origin, scores)]
            return _success(devices, chosen)
    if collected:
        reasons[R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(collected)
    return FitResult(False, reason=R.gen_reason(reasons, len(order)))


def simple_outcomes(
    request: ContainerDeviceRequest,
    devices: Sequence[DeviceInfo],
    usage: Sequence[DeviceUsage],
    positions: Sequence[int],
    *,
    ctx: PodFitContext,
    cordoned: frozenset[str],
) -> tuple[dict[int, int], dict[str, int]]:
    """Per-device Fit checks in any order: ({position: memreq} of passing devices, reasons).

    Valid without topology-aware (collect-all), numa-bind (groups), quota (depends on what was
    collected) and MIG devices (re-examination, placements): then every device is checked
    against the same request on its own and Fit stops only once Nums devices passed. So a node
    fits iff at least Nums devices pass, and a failing node's reason is the per-device tally —
    no scores or sorting needed. Cores above 100 are clamped up front: in Fit the clamp happens
    before any check that uses the cores.
    """
    passing: dict[int, int] = {}
    reasons: dict[str, int] = {}
    coresreq = min(request.coresreq, 100)
    pct = request.mem_percentage_req
    req_mem = request.memreq
    by_pct = pct != PERCENTAGE_UNSET and req_mem == 0
    fixed_mem = max(req_mem, 0)
    mutex = ctx.mutex
    type_is_nvidia = request.type == NVIDIA
    filters = ctx.use_types is not None or ctx.nouse_types is not None or ctx.vgpu_mode is not None
    uuid_filters = ctx.use_uuids is not None or ctx.nouse_uuids is not None
    for pos in positions:
        dev = devices[pos]
        u = usage[pos]
        used = u.used
        if not dev.health or u.mig_conflict:
            reason = R.CARD_NOT_HEALTH
        elif cordoned and dev.id in cordoned:
            reason = R.CARD_CORDONED
        elif not type_is_nvidia or (filters and not ctx.type_ok(dev)):
            reason = R.CARD_TYPE_MISMATCH
        elif uuid_filters and not ctx.uuid_ok(dev.id):
            reason = R.CARD_UUID_MISMATCH
        elif dev.count <= used:
            reason = R.CARD_TIME_SLICING_EXHAUSTED
        elif mutex and used > 0:
            reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
        else:
            memreq = _trunc_div(dev.devmem * pct, 100) if by_pct else fixed_mem
            devcore = dev.devcore
            if dev.devmem - u.usedmem < memreq:
                reason = R.CARD_INSUFFICIENT_MEMORY
            elif devcore - u.usedcores < coresreq:
                reason = R.CARD_INSUFFICIENT_CORE
            elif devcore == 100 and coresreq == 100 and used > 0:
                reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            elif devcore != 0 and u.usedcores == devcore and coresreq == 0:
                reason = R.CARD_COMPUTE_UNITS_EXHAUSTED
            else:
                passing[pos] = memreq
                continue
        reasons[reason] = reasons.get(reason, 0) + 1
    return passing, reasons


def _simple_failure(passing: Mapping[int, int], reasons: dict[str, int], total: int) -> str:
    if passing:
        reasons[R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(passing)
    return R.gen_reason(reasons, total)


def _success(devices: Sequence[DeviceInfo], chosen: Sequence[tuple[int, int, int]]) -> FitResult:
    out = [ContainerDevice(devices[p].id, NVIDIA, m, c, devices[p].index) for p, m, c in chosen]
    return FitResult(True, out, [p for p, _, _ in chosen])


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
    devices: Sequence[DeviceInfo],
    usage: _Usage,
    result: FitResult,
    *,
    container_index: int,
    migs: list[MigAllocation],
) -> str:
    """Add the chosen devices to the node usage (HAMi `AddResourceUsage`); "" or an error text.

    MIG devices get a concrete profile + placement now: the entry's Usedmem/Usedcores become the
    profile's memory/cores and a MigAllocation is recorded.
    """
    for k, pos in enumerate(result.positions):
        dev = devices[pos]
        entry = result.devices[k]
        u = usage.writable(pos)
        if dev.mode == MIG_MODE:
            chosen = select_mig(dev.mig_profiles, [pl for _, pl in u.mig_taken], entry.usedmem)
            if chosen is None:
                return f"AddResourceUsage failed for device {dev.id}: {_MIG_ALLOCATION_FAILED}"
            profile, placement = chosen
            entry = ContainerDevice(entry.uuid, entry.type, profile.memory_mb, profile.core, entry.idx)
            result.devices[k] = entry
            u.mig_taken.append((profile.name, placement))
            migs.append(MigAllocation(container_index, k, dev.id, profile.name, placement))
        u.used += 1
        u.usedcores += entry.usedcores
        u.usedmem += entry.usedmem
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


@dataclass(slots=True)
class _ContainerFit:
    ok: bool
    devices: dict[str, ContainerDevices] = field(default_factory=dict)
    reason: str = ""
    order: list[int] = field(default_factory=list)


def _fit_container(
    requests: ContainerRequests,
    devices: Sequence[DeviceInfo],
    usage: _Usage,
    order: list[int],
    *,
    ctx: PodFitContext,
    cordoned: frozenset[str],
    allocated: Sequence[ContainerDevices],
    container_index: int,
    migs: list[MigAllocation],
    apply: bool,
    has_mig: bool | None = None,
) -> _ContainerFit:
    """HAMi `fitInDevices` for one container: score, sort, pre-check, Fit, add usage.

    When the outcome does not depend on the order (see `simple_outcomes`), a failing container
    is decided without scores or sorting, and a fitting one takes the last Nums passing devices
    of the sorted order — exactly what Fit would take.
    """
    if any(vendor != NVIDIA for vendor in requests):
        return _ContainerFit(False, reason=DEVICE_TYPE_NOT_FOUND)
    if has_mig is None:
        has_mig = any(devices[p].mode == MIG_MODE for p in order)
    simple = not (has_mig or ctx.topology or ctx.numa_bind or ctx.quota is not None)
    passing: dict[int, int] = {}
    if simple:
        for req in requests.values():
            if req.nums > len(order):
                return _ContainerFit(False, reason=R.NODE_INSUFFICIENT_DEVICE)
            passing, reasons = simple_outcomes(req, devices, usage.items, order, ctx=ctx, cordoned=cordoned)
            if len(passing) < req.nums:
                return _ContainerFit(False, reason=_simple_failure(passing, reasons, len(order)))
    scores = _scores_for(devices, usage.items, order, requests=requests, weights=ctx.weights)
    out = _ContainerFit(True)
    for vendor, req in requests.items():
        order = sorted(order, key=sort_key(ctx.policy, ctx.numa_bind, devices=devices, usage=usage.items,
            scores=scores))
        if req.nums > len(order) and not (
            ctx.mig_allowed and req.type == NVIDIA and any(devices[p].mode == MIG_MODE for p in order)
        ):
            return _ContainerFit(False, reason=R.NODE_INSUFFICIENT_DEVICE)
        if simple:
            cores = min(req.coresreq, 100)
            chosen: list[tuple[int, int, int]] = []
            for p in reversed(order):
                if p in passing:
                    chosen.append((p, passing[p], cores))
                    if len(chosen) == req.nums:
                        break
            result = _success(devices, chosen)
        else:
            result = fit_request(req, devices, usage.items, order, ctx=ctx, cordoned=cordoned,
                allocated=allocated)
        if not result.ok:
            return _ContainerFit(False, reason=result.reason)
        if apply or any(devices[p].mode == MIG_MODE for p in result.positions):
            error = _apply(devices, usage, result, container_index=container_index, migs=migs)
            if error:
                return _ContainerFit(False, reason=error)
        out.devices[vendor] = result.devices
    out.order = order
    return out


def fit_container(
    request: ContainerDeviceRequest,
    node: NodeView,
    ctx: PodFitContext,
    *,
    order: Sequence[int] | None = None,
    allocated: Sequence[ContainerDevices] = (),
    container_index: int = 0,
) -> tuple[FitResult, list[MigAllocation]]:
    """Fit one container's NVIDIA request on `node` (a mutable copy: its usage is updated).

    `order` is the incoming device order (positions; default inventory order of the NVIDIA
    devices), `allocated` the pod's NVIDIA allocation list built so far (for quota).
    """
    positions = list(order) if order is not None else vendor_positions(node.devices)
    usage = _Usage(node.usage)
    migs: list[MigAllocation] = []
    res = _fit_container(
        {NVIDIA: request},  # keyed by vendor: another request type fails Fit's type check
        node.devices,
        usage,
        positions,
        ctx=ctx,
        cordoned=node.cordoned,
        allocated=allocated,
        container_index=container_index,
        migs=migs,
        apply=True,
    )
    node.usage[:] = usage.items
    if not res.ok:
        return FitResult(False, reason=res.reason), migs
    devs = res.devices.get(NVIDIA, [])
    by_id = {d.id: p for p, d in enumerate(node.devices)}
    return FitResult(True, devs, [by_id[d.uuid] for d in devs]), migs


# --------------------------------------------------------------------------------------------
# Per-node evaluation


def _nvidia_entries(
    fitted: Mapping[int, Mapping[str, ContainerDevices]], start: int, end: int
) -> PodSingleDevice:
    empty: ContainerDevices = []
    return [fitted[j].get(NVIDIA, empty) if j in fitted else empty for j in range(start, end)]


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
    default_policy: str = DEFAULT_GPU_POLICY,
    weights: Weights | None = None,
    quota: QuotaCheck | None = None,
) -> NodeFit | NodeFailure:
    """Fit every container of a pod on `node` (never mutated) — §5.4.

    Pass a prebuilt `ctx` (from `pod_fit_context`) when evaluating many nodes for one pod; else
    it is built from `pod` and the keyword arguments. `requests` is `pod_requests(...)`: one entry
    per container, the first `n_init` being init containers.
    """
    if ctx is None:
        ctx = pod_fit_context(
            pod or {}, default_policy=default_policy, weights=weights, quota=quota, n_init=n_init
        )
    plan = ctx.plan(requests, n_init)
    devices = node.devices
    base_order = vendor_positions(devices)
    has_mig = any(devices[p].mode == MIG_MODE for p in base_order)
    cordoned = node.cordoned
    with_quota = ctx.quota is not None
    fitted: dict[int, dict[str, ContainerDevices]] = {}
    migs: list[MigAllocation] = []

    # Init containers run one after another: each sees only the pre-existing usage.
    for i in plan.init:
        # HAMi hands Fit the allocation list being built: here the init entries so far.
        allocated = _nvidia_entries(fitted, 0, i) if with_quota else ()
        res = _fit_container(
            requests[i],
            devices,
            _Usage(node.usage),
            base_order,
            ctx=ctx,
            cordoned=cordoned,
            allocated=allocated,
            container_index=i,
            migs=migs,
            apply=False,
            has_mig=has_mig,
        )
        if not res.ok:
            return NodeFailure(res.reason)
        fitted[i] = res.devices

    # App containers run together: fit them one after another on one copy, in place order.
    usage = _Usage(node.usage)
    order = base_order
    for i in plan.app:
        # ... and here the app entries so far, which start at index 0 (as in HAMi).
        allocated = _nvidia_entries(fitted, n_init, i) if with_quota else ()
        res = _fit_container(
            requests[i], devices, usage, order, ctx=ctx, cordoned=cordoned, allocated=allocated,
            container_index=i, migs=migs, apply=i != plan.app[-1], has_mig=has_mig,
        )
        if not res.ok:
            return NodeFailure(res.reason)
        order = res.order
        fitted[i] = res.devices

    n = len(requests)
    return NodeFit(
        {v: [fitted[i].get(v, []) if i in fitted else [] for i in range(n)] for v in plan.vendors}, migs
    )


def node_verdict(
    requests: Sequence[ContainerRequests],
    n_init: int,
    node: NodeView,
    ctx: PodFitContext,
) -> NodeFailure | None:
    """None when the pod fits on `node`, else the same NodeFailure `evaluate_node` returns.

    Cheaper than `evaluate_node` for the common pod — one container asking for NVIDIA devices,
    no topology-aware, numa-bind, quota or MIG device: fitting then does not depend on the
    device order (see `simple_outcomes`), so no scores, sorting or allocation are computed.
    Other pods fall back to `evaluate_node`. Use it to filter many nodes, then call
    `evaluate_node` for the chosen one.
    """
    plan = ctx.plan(requests, n_init)
    if len(plan.init) + len(plan.app) == 1 and not (ctx.topology or ctx.numa_bind or ctx.quota is not None):
        creq = requests[(plan.init or plan.app)[0]]
        req = creq.get(NVIDIA)
        devices = node.devices
        order = vendor_positions(devices)
        if req is not None and len(creq) == 1 and not any(devices[p].mode == MIG_MODE for p in order):
            if req.nums > len(order):
                return NodeFailure(R.NODE_INSUFFICIENT_DEVICE)
            passing, reasons = simple_outcomes(req, devices, node.usage, order, ctx=ctx,
                cordoned=node.cordoned)
            if len(passing) >= req.nums:
                return None
            return NodeFailure(_simple_failure(passing, reasons, len(order)))
    result = evaluate_node(requests, n_init, node, ctx=ctx)
    return result if isinstance(result, NodeFailure) else None
