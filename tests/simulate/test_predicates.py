from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import builders
from vgpu_scheduler.config import DeviceConfig, NvidiaConfig
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.simulate.predicates import (
    DEFAULT_MEMORY_REQUEST,
    PREDICATE_ORDER,
    PREDICATES,
    NodeInfo,
    PodFitsResources,
    check_node_unschedulable,
    compute_pod_resources,
    fit_error_message,
    ignored_resources_for,
    pod_fits_host,
    pod_match_node_selector,
    pod_tolerates_node_taints,
    run_predicates,
)
from vgpu_scheduler.wire.quantity import ResourceError, quantity_units

GI = 1024**3


def node(
    name: str = "n1",
    *,
    labels: dict[str, str] | None = None,
    allocatable: dict[str, Any] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A small node (4 cpus, 8Gi, 3 pods, no GPUs unless `allocatable` says otherwise)."""
    spec: dict[str, Any] = {}
    if taints is not None:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    alloc = {"cpu": "4", "memory": "8Gi", "pods": "3", "nvidia.com/gpu": "0", **(allocatable or {})}
    return builders.node(name, typed=True, labels=labels or {}, spec=spec, allocatable=alloc)


def container(
    limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    return builders.container("c", image="x", limits=limits, requests=requests, **extra)


def pod(name: str = "p", *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A pod of `containers` (one container with no requests by default); `spec`: spec fields."""
    return builders.pod(name, typed=True, containers=list(containers) or [container()], spec=spec)


def info_with(n: dict[str, Any], *pods: dict[str, Any]) -> NodeInfo:
    info = NodeInfo(n)
    for p in pods:
        info.add_pod(p)
    return info


# -- quantities and pod requests -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "raw", "units"),
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", 0.5, 500),
        ("cpu", "1.0001", 1001),  # millicores round up, as MilliValue()
        ("memory", "1Gi", GI),
        ("memory", "100m", 1),  # fractional bytes round up, as Value()
        ("example.com/foo", 3, 3),
    ],
)
def test_quantity_units(resource: str, raw: Any, units: int) -> None:
    assert quantity_units(resource, raw) == units


@pytest.mark.parametrize("raw", [pytest.param("abc", id="letters"), pytest.param(
                                            True,
                                            id="a bool",
                                        ), pytest.param(None, id="null"), pytest.param([1], id="a list")])
def test_quantity_units_rejects_garbage(raw: Any) -> None:
    with pytest.raises(ResourceError, match="cpu"):
        quantity_units("cpu", raw)


def test_pod_request_is_max_of_app_sum_and_init_peak_plus_overhead() -> None:
    p = pod(
        "p",
        container(requests={"cpu": "1", "memory": "1Gi"}),
        container(limits={"cpu": "1", "memory": "1Gi"}),  # requests default to limits
        initContainers=[container(requests={"cpu": "3", "memory": "512Mi"})],
        overhead={"cpu": "250m"},
    )
    res = compute_pod_resources(p)
    assert res.error is None
    assert res.requests == {"cpu": 3250, "memory": 2 * GI}


def test_sidecar_init_container_adds_to_everything_after_it() -> None:
    sidecar = container(requests={"cpu": "1"}, restartPolicy="Always")
    later_init = container(requests={"cpu": "2"})
    p = pod("p", container(requests={"cpu": "1"}), initContainers=[sidecar, later_init])
    # app: 1 + sidecar 1 = 2; init peak: later init 2 + sidecar 1 = 3.
    assert compute_pod_resources(p).requests == {"cpu": 3000}


def test_non_zero_defaults_apply_only_to_absent_requests() -> None:
    p = pod("p", container(requests={"cpu": "0"}), container())
    res = compute_pod_resources(p)
    assert res.non_zero_cpu == 0 + 100
    assert res.non_zero_memory == 2 * DEFAULT_MEMORY_REQUEST


def test_malformed_quantity_makes_only_that_pod_unfit() -> None:
    bad = pod("bad", container(limits={"cpu": "lots"}))
    res = compute_pod_resources(bad)
    assert res.requests == {} and res.error is not None and "lots" in res.error
    fits = PodFitsResources()
    assert fits(bad, node(), NodeInfo(node())) == res.error
    good = pod("good", container(requests={"cpu": "1"}))
    info = info_with(node(), bad)  # counted as a pod with no requests, never raising
    assert info.pod_count == 1
    assert fits(good, node(), info) is None


# -- PodFitsResources ------------------------------------------------------------------------------


FITS = PodFitsResources()


@pytest.mark.parametrize(
    ("existing", "incoming", "allocatable", "reason"),
    [
        pytest.param([], {"cpu": "4"}, {}, None, id="fits on an empty node"),
        pytest.param([{"cpu": "3"}], {"cpu": "2"}, {}, "Insufficient cpu", id="cpu over"),
        pytest.param([{"memory": "7Gi"}], {"memory": "2Gi"}, {}, "Insufficient memory", id="memory over"),
        pytest.param([{}, {}, {}], {}, {}, "Too many pods", id="pod count full"),
        pytest.param(
            [{"cpu": "4"}, {}, {}],
            {"cpu": "1", "memory": "9Gi"},
            {},
            "Too many pods, Insufficient cpu, Insufficient memory",
            id="every failure, in order",
        ),
        pytest.param([], {"ephemeral-storage": "1Gi"}, {}, "Insufficient ephemeral-storage",
                     id="ephemeral storage absent"),
        pytest.param([], {"example.com/fpga": "1"}, {}, "Insufficient example.com/fpga",
                     id="extended resource absent"),
        pytest.param([{"example.com/fpga": "1"}], {"example.com/fpga": "1"}, {"example.com/fpga": "2"}, None,
                     id="extended resource fits"),
        # extender-managed resources are ignored even though the node has none of them
        pytest.param(
            [],
            {
                "nvidia.com/gpu": "1",
                "nvidia.com/gpumem": "4096",
                "nvidia.com/gpucores": "30",
                "nvidia.com/gpumem-percentage": "50",
            },
            {},
            None,
            id="extender-managed resources ignored",
        ),
        # a zero request never fails, even on an over-committed node
        pytest.param([{"cpu": "5"}], {"cpu": "0"}, {}, None, id="zero request on an over-committed node"),
    ],
)
def test_pod_fits_resources(
    existing: list[dict[str, str]], incoming: dict[str, str], allocatable: dict[str, str], reason: str | None
) -> None:
    n = node(allocatable=allocatable)
    info = info_with(n, *(pod(f"e{i}", container(requests=r)) for i, r in enumerate(existing)))
    incoming_pod = pod("new", container(requests=incoming))
    assert FITS(incoming_pod, n, info) == reason
    assert FITS.prepare(incoming_pod)(n, info) == reason  # the per-cycle form agrees


def test_prepared_form_of_a_pod_with_malformed_requests_gives_its_error() -> None:
    bad = pod("bad", container(requests={"cpu": "lots"}))
    reason = FITS(bad, node(), NodeInfo(node()))
    assert reason is not None and reason.startswith("invalid resources")
    assert FITS.prepare(bad)(node(), NodeInfo(node())) == reason


def test_pod_count_missing_from_allocatable_means_zero_pods() -> None:
    n = node()
    del n["status"]["allocatable"]["pods"]
    assert FITS(pod(), n, NodeInfo(n)) == "Too many pods"


def test_custom_ignored_resources() -> None:
    strict = PodFitsResources(ignored_resources=())
    p = pod("p", container(limits={"nvidia.com/gpu": 1}))
    assert strict(p, node(), NodeInfo(node())) == "Insufficient nvidia.com/gpu"
    cfg = NvidiaConfig(resource_count_name="example.com/vgpu")
    assert "example.com/vgpu" in ignored_resources_for(build(DeviceConfig(cfg)))


def test_malformed_allocatable_entry_counts_as_zero() -> None:
    n = node(allocatable={"cpu": "four"})
    info = NodeInfo(n)
    assert info.invalid_allocatable == ("cpu",)
    assert FITS(pod("p", container(requests={"cpu": "1"})), n, info) == "Insufficient cpu"
    assert FITS(pod("p2", container(requests={"memory": "1Gi"})), n, info) is None


# -- NodeInfo --------------------------------------------------------------------------------------


def test_node_info_add_remove_is_incremental_and_idempotent() -> None:
    n = node()
    a = pod("a", container(requests={"cpu": "1", "memory": "1Gi"}))
    b = pod("b", container(requests={"cpu": "500m"}))
    info = info_with(n, a, b)
    info.add_pod(a)  # the same pod again replaces, never double counts
    assert info.pod_count == 2
    assert info.requested == {"cpu": 1500, "memory": GI}
    assert info.remove_pod("default/a")
    assert not info.remove_pod(a)
    assert info.requested == {"cpu": 500}
    assert info.non_zero_requested == {"cpu": 500, "memory": DEFAULT_MEMORY_REQUEST}
    assert info.remove_pod(b)
    assert info.requested == {} and info.pod_count == 0


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 4000), st.booleans()), max_size=40))
def test_node_info_matches_a_recount_after_any_add_remove_sequence(ops: list[tuple[int, int, bool]]) -> None:
    n = node()
    info = NodeInfo(n)
    placed: dict[int, dict[str, Any]] = {}
    for ident, milli, add in ops:
        if add:
            placed[ident] = pod(f"p{ident}", container(requests={"cpu": f"{milli}m"}))
            info.add_pod(placed[ident])
        else:
            assert info.remove_pod(f"default/p{ident}") == (placed.pop(ident, None) is not None)
    fresh = info_with(n, *placed.values())
    assert info.requested == fresh.requested
    assert info.non_zero_requested == fresh.non_zero_requested
    assert info.pod_count == fresh.pod_count


# -- PodMatchNodeSelector --------------------------------------------------------------------------


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


LABELS = {"gpu": "on", "zone": "a", "cores": "64"}
MISMATCH = "node(s) didn't match Pod's node affinity/selector"


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        pytest.param({}, None, id="no selector"),
        pytest.param({"nodeSelector": {"gpu": "on"}}, None, id="selector matches"),
        pytest.param({"nodeSelector": {"gpu": "on", "zone": "b"}}, MISMATCH, id="selector value differs"),
        pytest.param({"nodeSelector": {"missing": ""}}, MISMATCH, id="selector key missing"),
        pytest.param({"affinity": affinity({"matchExpressions": [expr("zone", "In", "a", "b")]})}, None,
                     id="In matches"),
        pytest.param({"affinity": affinity({"matchExpressions": [expr("zone", "In", "b")]})}, MISMATCH,
                     id="In misses"),
        pytest.param({"affinity": affinity({"matchExpressions": [expr("zone", "NotIn", "b")]})}, None,
                     id="NotIn matches"),
        pytest.param({"affinity": affinity({"matchExpressions": [expr("absent", "NotIn", "b")]})}, None,
                     id="NotIn on an absent key"),
        pytest.param({"affinity": affinity({"matchExpressions": [expr("zone", "NotIn", "a")]})}, MISMATCH,
                     id="NotIn misses"),
        pytest.param({"affinity": affinity({"matchExpressions": [expr("gpu", "Exists")]})}, None,
                     id="Exists"),
        pytest.param({"affinity": affinity({"matchExpressions": [expr("absent", "Exists")]})}, MISMATCH,
                     id="Exists on an absent key"),
        pytest.param({"affinity": affinity({"matchExpressions": [expr("absent", "DoesNotExist")]})}, None,
                     id="DoesNotExist on an absent key"),
        pytest.param({"affinity": affinity({"matchExpressions": [expr("gpu", "DoesNotExist")]})}, MISMATCH,
                     id="DoesNotExist on a present key"),
        pytest.param({"affinity": affinity({"matchExpressions": [expr("cores", "Gt", "32")]})}, None,
                     id="Gt matches"),
        pytest.param({"affinity": affinity({"matchExpressions": [expr("cores", "Gt", "64")]})}, MISMATCH,
                     id="Gt misses on equal"),
        pytest.param({"affinity": affinity({"matchExpressions": [expr("cores", "Lt", "65")]})}, None,
                     id="Lt matches"),
        # not an int
        pytest.param({"affinity": affinity({"matchExpressions": [expr("zone", "Lt", "5")]})}, MISMATCH,
                     id="Lt on a non-integer label"),
        pytest.param({"affinity": affinity({"matchExpressions": [expr("gpu", "Like", "on")]})}, MISMATCH,
                     id="unknown operator"),
        # terms are ORed, expressions inside a term ANDed
        pytest.param(
            {
                "affinity": affinity(
                    {"matchExpressions": [expr("zone", "In", "b")]},
                    {"matchExpressions": [expr("gpu", "In", "on"), expr("zone", "In", "a")]},
                )
            },
            None,
            id="terms ORed",
        ),
        pytest.param(
            {"affinity": affinity({"matchExpressions": [expr("gpu", "In", "on"), expr("zone", "In", "b")]})},
            MISMATCH,
            id="expressions ANDed",
        ),
        pytest.param({"affinity": affinity({"matchFields": [expr("metadata.name", "In", "n1")]})}, None,
                     id="matchFields name In"),
        pytest.param(
            {"affinity": affinity({"matchFields": [expr("metadata.name", "NotIn", "n1")]})}, MISMATCH,
            id="matchFields name NotIn",
        ),
        # an empty term selects nothing
        pytest.param({"affinity": affinity({})}, MISMATCH, id="empty term selects nothing"),
        pytest.param({"affinity": affinity()}, MISMATCH, id="no terms select nothing"),
        # nodeSelector and affinity must both hold
        pytest.param(
            {
                "nodeSelector": {"zone": "b"},
                "affinity": affinity({"matchExpressions": [expr("gpu", "Exists")]}),
            },
            MISMATCH,
            id="selector and affinity both needed",
        ),
    ],
)
def test_pod_match_node_selector(spec: dict[str, Any], reason: str | None) -> None:
    n = node(labels=LABELS)
    assert pod_match_node_selector(pod("p", **spec), n, NodeInfo(n)) == reason


# -- PodToleratesNodeTaints ------------------------------------------------------------------------


def taint(key: str, value: str, effect: str) -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


DEDICATED = taint("dedicated", "gpu", "NoSchedule")


@pytest.mark.parametrize(
    ("taints", "tolerations", "reason"),
    [
        pytest.param([], [], None, id="no taints"),
        pytest.param([DEDICATED], [], "node(s) had untolerated taint {dedicated: gpu}",
                     id="NoSchedule taint untolerated"),
        pytest.param([taint("x", "", "NoExecute")], [], "node(s) had untolerated taint {x: }",
                     id="NoExecute taint untolerated"),
        pytest.param([taint("soft", "1", "PreferNoSchedule")], [], None, id="PreferNoSchedule ignored"),
        pytest.param(
            [DEDICATED],
            [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            None,
            id="Equal toleration",
        ),
        pytest.param([DEDICATED], [{"key": "dedicated", "value": "gpu"}], None,
                     id="operator defaults to Equal"),
        pytest.param(
            [DEDICATED],
            [{"key": "dedicated", "operator": "Equal", "value": "cpu"}],
            "node(s) had untolerated taint {dedicated: gpu}",
            id="Equal with another value",
        ),
        pytest.param([DEDICATED], [{"key": "dedicated", "operator": "Exists"}], None, id="Exists toleration"),
        pytest.param(
            [DEDICATED],
            [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}],
            "node(s) had untolerated taint {dedicated: gpu}",
            id="Exists with another effect",
        ),
        # tolerates everything
        pytest.param([DEDICATED, taint("b", "1", "NoExecute")], [{"operator": "Exists"}], None,
                     id="empty key with Exists tolerates all"),
        pytest.param(
            [DEDICATED, taint("b", "1", "NoExecute")],
            [{"key": "dedicated", "operator": "Exists"}],
            "node(s) had untolerated taint {b: 1}",
            id="one of two taints untolerated",
        ),
    ],
)
def test_pod_tolerates_node_taints(
    taints: list[dict[str, str]], tolerations: list[dict[str, str]], reason: str | None
) -> None:
    n = node(taints=taints)
    assert pod_tolerates_node_taints(pod("p", tolerations=tolerations), n, NodeInfo(n)) == reason


# -- CheckNodeUnschedulable / PodFitsHost ----------------------------------------------------------


@pytest.mark.parametrize(
    ("unschedulable", "tolerations", "reason"),
    [
        pytest.param(False, [], None, id="schedulable"),
        pytest.param(True, [], "node(s) were unschedulable", id="unschedulable"),
        pytest.param(
            True,
            [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}],
            None,
            id="unschedulable taint tolerated",
        ),
        pytest.param(
            True,
            [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}],
            "node(s) were unschedulable",
            id="toleration with another effect",
        ),
        pytest.param(True, [{"operator": "Exists"}], None, id="tolerates everything"),
    ],
)
def test_check_node_unschedulable(
    unschedulable: bool, tolerations: list[dict[str, str]], reason: str | None
) -> None:
    n = node(unschedulable=unschedulable)
    assert check_node_unschedulable(pod("p", tolerations=tolerations), n, NodeInfo(n)) == reason


def test_pod_fits_host() -> None:
    n = node("n1")
    assert pod_fits_host(pod("p"), n, NodeInfo(n)) is None
    assert pod_fits_host(pod("p", nodeName="n1"), n, NodeInfo(n)) is None
    assert (
        pod_fits_host(pod("p", nodeName="n2"), n, NodeInfo(n))
        == "node(s) didn't match the requested node name"
    )


# -- registry --------------------------------------------------------------------------------------


def test_registry_order_and_first_failure_wins() -> None:
    assert tuple(PREDICATES) == PREDICATE_ORDER
    n = node(unschedulable=True, taints=[DEDICATED])
    p = pod("p", container(requests={"cpu": "100"}))
    assert run_predicates(PREDICATES.values(), p, n, NodeInfo(n)) == "node(s) were unschedulable"
    assert run_predicates(PREDICATES.values(), pod("ok"), node(), NodeInfo(node())) is None


def test_fit_error_message_counts_reasons_like_kube_scheduler() -> None:
    reasons = {"a": "Insufficient cpu", "b": "node(s) were unschedulable", "c": "Insufficient cpu"}
    assert fit_error_message(4, reasons) == (
        "0/4 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu."
    )
