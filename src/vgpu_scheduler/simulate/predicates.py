"""kube-scheduler's classic fit predicates, for the simulated scheduling loop.

A predicate is `(pod, node, node_info) -> None | reason`: None means the pod fits, otherwise the reason
string is the one kube-scheduler puts into its FailedScheduling event for that node (e.g.
`Insufficient cpu`). The HAMi extender runs after these, on the nodes they let through, exactly as the
real kube-scheduler calls the extender only with nodes its own plugins accepted.

Resources handed to the extender (`managedResources` with `ignoredByScheduler: true` in the Helm chart,
§9.1) are skipped by PodFitsResources, as kube-scheduler does: nodes do advertise
`nvidia.com/gpu` but the memory/core resources exist only in the extender's bookkeeping.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import msgspec

from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.simulate.queue import pod_key
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire.quantity import ResourceError, quantity_units

Predicate = Callable[[Mapping[str, Any], Mapping[str, Any], "NodeInfo"], "str | None"]

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

# kube-scheduler's defaults for containers that request no cpu/memory, used only for scoring
# (so that nodes full of request-less pods do not look empty).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

DEFAULT_IGNORED_RESOURCES: frozenset[str] = frozenset(
    {"nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage",
     "nvidia.com/priority"}
)
"""The NVIDIA entries of the chart's extender `managedResources` (all `ignoredByScheduler`)."""

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_NAME = "node(s) didn't match the requested node name"
REASON_NODE_SELECTOR = "node(s) didn't match Pod's node affinity/selector"
REASON_TOO_MANY_PODS = "Too many pods"
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"


def ignored_resources_for(vendors: Vendors) -> frozenset[str]:
    """The managed resources of the registered vendors (what the chart lists for the extender)."""
    return vendors.managed_resources()


def extender_interested(pod: Mapping[str, Any], managed: frozenset[str]) -> bool:
    """kube-scheduler's `HTTPExtender.IsInterested`: with `managedResources` configured, the
    extender is called (filter and bind) only for a pod whose containers or init containers name
    one of them in requests or limits; every other pod is filtered and bound by kube-scheduler alone."""
    if not managed:
        return True
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return False
    for field in ("containers", "initContainers"):
        containers = spec.get(field)
        for c in containers if isinstance(containers, list) else ():
            resources = c.get("resources") if isinstance(c, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for kind in ("requests", "limits"):
                names = resources.get(kind)
                if isinstance(names, Mapping) and any(str(n) in managed for n in names):
                    return True
    return False


def _resource_map(raw: object, where: str) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ResourceError(f"{where}: expected a mapping of resource quantities")
    out: dict[str, int] = {}
    for name, q in raw.items():
        try:
            out[str(name)] = quantity_units(str(name), q)
        except ResourceError as exc:
            raise ResourceError(f"{where}: {exc}") from None
    return out


# -- pod requests ----------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class PodResources:
    """What a pod asks of a node, computed once per pod."""

    requests: Mapping[str, int]
    """Effective requests: max(Σ app containers (+ sidecars), peak init container) + overhead."""
    non_zero_cpu: int
    non_zero_memory: int
    """cpu/memory with kube-scheduler's scoring defaults for containers that request none."""
    error: str | None = None
    """Set when a quantity is malformed: the pod then fits nowhere (and counts as 0 when placed)."""


def _container_requests(container: Mapping[str, Any], where: str) -> dict[str, int]:
    resources = container.get("resources")
    if resources is None:
        return {}
    if not isinstance(resources, Mapping):
        raise ResourceError(f"{where}: resources must be a mapping")
    # The API server defaults missing requests to the limits; do the same for raw manifests.
    merged = _resource_map(resources.get("limits"), f"{where}: limits")
    merged.update(_resource_map(resources.get("requests"), f"{where}: requests"))
    return merged


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def _peak(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        if v > into.get(k, 0):
            into[k] = v


def _non_zero(requests: Mapping[str, int]) -> dict[str, int]:
    return {
        CPU: requests.get(CPU, DEFAULT_MILLI_CPU_REQUEST),
        MEMORY: requests.get(MEMORY, DEFAULT_MEMORY_REQUEST),
    }


def _containers(spec: Mapping[str, Any], field: str) -> list[Mapping[str, Any]]:
    raw = spec.get(field) or []
    if not isinstance(raw, list):
        raise ResourceError(f"spec.{field} must be a list")
    for i, c in enumerate(raw):
        if not isinstance(c, Mapping):
            raise ResourceError(f"spec.{field}[{i}] must be a mapping")
    return raw


def compute_pod_resources(pod: Mapping[str, Any]) -> PodResources:
    """kube-scheduler's pod request: app containers summed, init containers as a running peak (a
    restartable init container — a sidecar — keeps running, so it adds to everything after it),
    then `spec.overhead` added."""
    try:
        spec = pod.get("spec")
        if not isinstance(spec, Mapping):
            raise ResourceError("spec must be a mapping")
        total: dict[str, int] = {}
        total_nz: dict[str, int] = {}
        for i, c in enumerate(_containers(spec, "containers")):
            reqs = _container_requests(c, f"container {c.get('name', i)!r}")
            _add(total, reqs)
            _add(total_nz, _non_zero(reqs))
        sidecars: dict[str, int] = {}
        sidecars_nz: dict[str, int] = {}
        init_peak: dict[str, int] = {}
        init_peak_nz: dict[str, int] = {}
        for i, c in enumerate(_containers(spec, "initContainers")):
            reqs = _container_requests(c, f"init container {c.get('name', i)!r}")
            nz = _non_zero(reqs)
            if c.get("restartPolicy") == "Always":
                _add(total, reqs)
                _add(total_nz, nz)
                _add(sidecars, reqs)
                _add(sidecars_nz, nz)
                reqs, nz = dict(sidecars), dict(sidecars_nz)
            else:
                _add(reqs, sidecars)
                _add(nz, sidecars_nz)
            _peak(init_peak, reqs)
            _peak(init_peak_nz, nz)
        _peak(total, init_peak)
        _peak(total_nz, init_peak_nz)
        overhead = _resource_map(spec.get("overhead"), "spec.overhead")
        _add(total, overhead)
        _add(total_nz, {k: v for k, v in overhead.items() if k in (CPU, MEMORY)})
    except ResourceError as exc:
        return PodResources({}, 0, 0, error=f"invalid resources: {exc}")
    return PodResources(total, total_nz.get(CPU, 0), total_nz.get(MEMORY, 0))


POD_CACHE_SIZE = 512
"""Pod objects whose requests `pod_resources` keeps (then it starts afresh)."""


class _PodCache:
    """Requests of recently seen pod objects: the pod being scheduled across the nodes of a cycle,
    and the pods retried cycle after cycle (the informer hands out the same object until the pod
    changes), instead of recomputing them each cycle.

    Keyed by identity and holding a reference, so a different pod can never hit an entry. A pod dict
    whose containers are edited in place between calls must be passed as a new dict (the loop never
    edits resources; the informer replaces the objects it updates).
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Mapping[str, Any], PodResources]] = {}

    def get(self, pod: Mapping[str, Any]) -> PodResources:
        hit = self._entries.get(id(pod))
        if hit is not None and hit[0] is pod:
            return hit[1]
        if len(self._entries) >= POD_CACHE_SIZE:
            self._entries.clear()
        value = compute_pod_resources(pod)
        self._entries[id(pod)] = (pod, value)
        return value


_pod_cache = _PodCache()


def pod_resources(pod: Mapping[str, Any]) -> PodResources:
    return _pod_cache.get(pod)


# -- NodeInfo --------------------------------------------------------------------------------------


class NodeInfo:
    """Per-node aggregate of what the pods placed on it request, updated one pod at a time."""

    __slots__ = ("_pods", "allocatable", "invalid_allocatable", "name", "non_zero_requested", "requested")

    def __init__(self, node: Mapping[str, Any] | None = None) -> None:
        self.name = ""
        self.allocatable: dict[str, int] = {}
        self.invalid_allocatable: tuple[str, ...] = ()
        self.requested: dict[str, int] = {}
        self.non_zero_requested: dict[str, int] = {CPU: 0, MEMORY: 0}
        self._pods: dict[str, PodResources] = {}
        if node is not None:
            self.set_node(node)

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    def set_node(self, node: Mapping[str, Any]) -> None:
        """(Re)read name and `status.allocatable`. A malformed allocatable entry counts as 0, so only
        pods requesting that resource are kept off the node."""
        self.name = objects.name(node)
        raw = objects.status(node).get("allocatable")
        allocatable: dict[str, int] = {}
        invalid: list[str] = []
        if isinstance(raw, Mapping):
            for name, q in raw.items():
                try:
                    allocatable[str(name)] = quantity_units(str(name), q)
                except ResourceError:
                    invalid.append(str(name))
        self.allocatable = allocatable
        self.invalid_allocatable = tuple(sorted(invalid))

    def has_pod(self, key: str) -> bool:
        return key in self._pods

    def add_pod(self, pod: Mapping[str, Any], resources: PodResources | None = None) -> None:
        """Count a pod placed on this node. Adding the same pod (namespace/name) again replaces it.
        `resources`: `compute_pod_resources(pod)` when the caller has it."""
        key = pod_key(pod)
        self.remove_pod(key)
        res = resources if resources is not None else compute_pod_resources(pod)
        self._pods[key] = res
        for k, v in res.requests.items():
            if v:  # keep only non-zero totals, so the aggregate equals a fresh recount
                self.requested[k] = self.requested.get(k, 0) + v
        self.non_zero_requested[CPU] += res.non_zero_cpu
        self.non_zero_requested[MEMORY] += res.non_zero_memory

    def remove_pod(self, pod_or_key: Mapping[str, Any] | str) -> bool:
        """Forget a pod (finished or deleted). True if it was counted here."""
        key = pod_or_key if isinstance(pod_or_key, str) else pod_key(pod_or_key)
        res = self._pods.pop(key, None)
        if res is None:
            return False
        for k, v in res.requests.items():
            left = self.requested.get(k, 0) - v
            if left:
                self.requested[k] = left
            else:
                self.requested.pop(k, None)
        self.non_zero_requested[CPU] -= res.non_zero_cpu
        self.non_zero_requested[MEMORY] -= res.non_zero_memory
        return True


# -- predicates ------------------------------------------------------------------------------------


def resource_checks(res: PodResources, ignored: frozenset[str]) -> tuple[tuple[str, int], ...]:
    """(resource, amount) PodFitsResources compares against a node, in reason order: cpu, memory,
    ephemeral-storage, then extended resources by name, leaving out `ignored` and zero requests."""
    fixed = (CPU, MEMORY, EPHEMERAL_STORAGE)
    extended = sorted(k for k in res.requests if k not in fixed and k != PODS and k not in ignored)
    checks = tuple((k, res.requests.get(k, 0)) for k in (*fixed, *extended))
    return tuple((k, v) for k, v in checks if v > 0)  # a zero request never fails


class PodFitsResources:
    """cpu, memory, ephemeral-storage, pod count and extended resources against allocatable."""

    __slots__ = ("_last", "ignored")

    def __init__(self, ignored_resources: Iterable[str] = DEFAULT_IGNORED_RESOURCES) -> None:
        self.ignored = frozenset(ignored_resources)
        self._last: tuple[PodResources, tuple[tuple[str, int], ...]] | None = None

    def _checks(self, res: PodResources) -> tuple[tuple[str, int], ...]:
        """(resource, amount) to compare, in reason order; computed once per pod, not per node."""
        if self._last is not None and self._last[0] is res:
            return self._last[1]
        checks = resource_checks(res, self.ignored)
        self._last = (res, checks)
        return checks

    def __call__(self, pod: Mapping[str, Any], node: Mapping[str, Any], node_info: NodeInfo) -> str | None:
        res = pod_resources(pod)
        if res.error is not None:
            return res.error
        return _fit_reason(self._checks(res), node_info)

    def prepare(self, pod: Mapping[str, Any]) -> Callable[[Mapping[str, Any], NodeInfo], str | None]:
        """This predicate for one pod, as a function of (node, node_info): the pod's requests are
        looked up once for all the nodes a cycle checks."""
        res = pod_resources(pod)
        error = res.error
        if error is not None:
            return lambda node, node_info: error
        checks = self._checks(res)
        return lambda node, node_info: _fit_reason(checks, node_info)


def _fit_reason(checks: tuple[tuple[str, int], ...], node_info: NodeInfo) -> str | None:
    reasons: list[str] = []
    if node_info.pod_count + 1 > node_info.allocatable.get(PODS, 0):
        reasons.append(REASON_TOO_MANY_PODS)
    allocatable, requested = node_info.allocatable, node_info.requested
    for name, want in checks:
        if want > allocatable.get(name, 0) - requested.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return ", ".join(reasons) if reasons else None


def _expression_matches(expr: Mapping[str, Any], values_by_key: Mapping[str, str]) -> bool:
    key = expr.get("key")
    op = expr.get("operator")
    values = expr.get("values") or []
    if not isinstance(key, str) or not isinstance(values, list):
        return False
    present = key in values_by_key
    actual = values_by_key.get(key)
    if op == "In":
        return present and actual in values
    if op == "NotIn":
        return not present or actual not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            have, bound = int(str(actual)), int(str(values[0]))
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False  # unknown operator: the term cannot match


def _term_matches(term: object, labels: Mapping[str, str], fields: Mapping[str, str]) -> bool:
    if not isinstance(term, Mapping):
        return False
    exprs = term.get("matchExpressions") or []
    field_exprs = term.get("matchFields") or []
    if not isinstance(exprs, list) or not isinstance(field_exprs, list):
        return False
    if not exprs and not field_exprs:
        return False  # an empty term selects nothing
    return all(isinstance(e, Mapping) and _expression_matches(e, labels) for e in exprs) and all(
        isinstance(e, Mapping) and _expression_matches(e, fields) for e in field_exprs
    )


def _is_map(value: object) -> TypeGuard[Mapping[str, Any]]:
    # `type is dict` first: objects are plain dicts almost always and the ABC check is slow.
    return type(value) is dict or isinstance(value, Mapping)


def _node_labels(node: Mapping[str, Any]) -> tuple[str, Mapping[str, str]]:
    meta = node.get("metadata")
    if not _is_map(meta):
        return "", {}
    labels = meta.get("labels")
    return str(meta.get("name", "")), labels if _is_map(labels) else {}


def pod_match_node_selector(
    pod: Mapping[str, Any], node: Mapping[str, Any], node_info: NodeInfo
) -> str | None:
    """`spec.nodeSelector` (all pairs) and required node affinity (any term; all expressions of it)."""
    del node_info
    name, labels = _node_labels(node)
    spec = pod.get("spec")
    spec = spec if _is_map(spec) else {}
    selector = spec.get("nodeSelector") or {}
    if not _is_map(selector) or any(labels.get(k) != v for k, v in selector.items()):
        return REASON_NODE_SELECTOR
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if _is_map(affinity) else None
    required = (
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if _is_map(node_affinity)
        else None
    )
    if required is None:
        return None
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not isinstance(terms, list):
        return REASON_NODE_SELECTOR
    fields = {"metadata.name": name}
    if any(_term_matches(t, labels, fields) for t in terms):
        return None
    return REASON_NODE_SELECTOR


def _tolerations(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec")
    raw = spec.get("tolerations") if _is_map(spec) else None
    return [t for t in raw if isinstance(t, Mapping)] if isinstance(raw, list) else []


def toleration_tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Empty effect matches every effect; empty key with `Exists` matches every taint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    if op == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def _tolerated(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    return any(toleration_tolerates(t, taint) for t in tolerations)


def pod_tolerates_node_taints(
    pod: Mapping[str, Any], node: Mapping[str, Any], node_info: NodeInfo
) -> str | None:
    """Every NoSchedule/NoExecute taint must be tolerated (PreferNoSchedule never blocks)."""
    del node_info
    spec = node.get("spec")
    taints = spec.get("taints") if _is_map(spec) else None
    if not isinstance(taints, list):
        return None
    tolerations = _tolerations(pod)
    for taint in taints:
        if not isinstance(taint, Mapping) or taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not _tolerated(tolerations, taint):
            return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"
    return None


def check_node_unschedulable(
    pod: Mapping[str, Any], node: Mapping[str, Any], node_info: NodeInfo
) -> str | None:
    """A cordoned node (`spec.unschedulable`) takes only pods tolerating its NoSchedule taint."""
    del node_info
    spec = node.get("spec")
    if not (_is_map(spec) and spec.get("unschedulable") is True):
        return None
    taint = {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"}
    return None if _tolerated(_tolerations(pod), taint) else REASON_UNSCHEDULABLE


def pod_fits_host(pod: Mapping[str, Any], node: Mapping[str, Any], node_info: NodeInfo) -> str | None:
    """A pod that names its node (`spec.nodeName`) fits only there."""
    del node_info
    spec = pod.get("spec")
    wanted = spec.get("nodeName") if _is_map(spec) else None
    if not wanted:
        return None
    return None if wanted == _node_labels(node)[0] else REASON_NODE_NAME


PREDICATE_ORDER: tuple[str, ...] = (
    "CheckNodeUnschedulable",
    "PodFitsHost",
    "PodToleratesNodeTaints",
    "PodMatchNodeSelector",
    "PodFitsResources",
)
"""Evaluation order: cheap checks first, as kube-scheduler's default filter plugin order."""

NODE_INFO_PREDICATES: frozenset[str] = frozenset({"PodFitsResources"})
"""The predicates that read NodeInfo; the others read only the pod and `node_filter_inputs`."""


def make_predicates(ignored_resources: Iterable[str] = DEFAULT_IGNORED_RESOURCES) -> dict[str, Predicate]:
    """The predicate registry, in PREDICATE_ORDER."""
    registry: dict[str, Predicate] = {
        "CheckNodeUnschedulable": check_node_unschedulable,
        "PodFitsHost": pod_fits_host,
        "PodToleratesNodeTaints": pod_tolerates_node_taints,
        "PodMatchNodeSelector": pod_match_node_selector,
        "PodFitsResources": PodFitsResources(ignored_resources),
    }
    return {name: registry[name] for name in PREDICATE_ORDER}


PREDICATES: Mapping[str, Predicate] = make_predicates()
"""Registry with the default ignored (extender-managed) resources."""


def run_predicates(
    predicates: Iterable[Predicate], pod: Mapping[str, Any], node: Mapping[str, Any], node_info: NodeInfo
) -> str | None:
    """The first failing predicate's reason, or None when all pass."""
    for predicate in predicates:
        reason = predicate(pod, node, node_info)
        if reason is not None:
            return reason
    return None


def fit_error_message(total_nodes: int, reasons: Mapping[str, str]) -> str:
    """kube-scheduler's FailedScheduling message: `0/3 nodes are available: 1 Insufficient cpu, 2
    node(s) were unschedulable.` (reasons counted per distinct string, sorted as strings)."""
    histogram = Counter(reasons.values())
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    return f"0/{total_nodes} nodes are available: {', '.join(parts)}."


# -- what the predicates read ----------------------------------------------------------------------
#
# The simulation caches verdicts per (pod key, node): these two functions name *everything* the
# predicates above read from a pod and from a Node object (the rest comes from NodeInfo). A predicate
# that starts reading another field must add it here, or the cache would reuse a stale verdict.

_encode_key = msgspec.json.Encoder().encode

PodFilterKey = tuple[bytes, str | None, tuple[tuple[str, int], ...]]


def pod_filter_key(pod: Mapping[str, Any], ignored: frozenset[str]) -> PodFilterKey | None:
    """A hashable summary of what the predicates read from `pod` (placement constraints, requests
    compared by PodFitsResources with `ignored` left out). Two pods with equal keys get the same
    verdict on every node. None when the pod cannot be summarised (it is then evaluated uncached)."""
    spec = pod.get("spec")
    if type(spec) is not dict:
        return None
    res = pod_resources(pod)
    try:
        placement = _encode_key(
            (spec.get("nodeSelector"), spec.get("affinity"), spec.get("tolerations"), spec.get("nodeName"))
        )
    except (TypeError, ValueError, msgspec.EncodeError):
        return None
    return placement, res.error, resource_checks(res, ignored)


def node_filter_inputs(node: Mapping[str, Any]) -> tuple[object, object, object]:
    """What the predicates read from a Node object (name, labels, spec: taints, unschedulable); a
    node whose inputs compare equal gets the same verdicts. Allocatable is NodeInfo's, read once."""
    meta = node.get("metadata")
    if _is_map(meta):
        return meta.get("name"), meta.get("labels"), node.get("spec")
    return meta, None, node.get("spec")
