from typing import Any

import pytest

from tests import builders
from vgpu_scheduler.simulate.predicates import PREDICATE_ORDER, NodeInfo
from vgpu_scheduler.simulate.providers import (
    CLUSTER_AUTOSCALER_PROVIDER,
    DEFAULT_PROVIDER,
    UnknownProviderError,
    get_provider,
    provider_names,
)


def node(name: str, **spec: Any) -> dict[str, Any]:
    allocatable = {"cpu": "8", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "80"}
    return builders.node(name, labels={}, spec=spec, allocatable=allocatable)


def pod(name: str, cpu: str, memory: str, **extra: Any) -> dict[str, Any]:
    """One container with these limits (`extra`: further resources)."""
    limits = {"cpu": cpu, "memory": memory, **extra}
    return builders.pod(name, containers=[builders.container("c", limits=limits)])


def test_provider_contents() -> None:
    default = get_provider(DEFAULT_PROVIDER)
    autoscaler = get_provider(CLUSTER_AUTOSCALER_PROVIDER)
    assert default.predicate_names == PREDICATE_ORDER == autoscaler.predicate_names
    assert default.priority_names == ("LeastRequestedPriority", "BalancedResourceAllocation")
    assert autoscaler.priority_names == ("MostRequestedPriority", "BalancedResourceAllocation")
    assert provider_names() == ("ClusterAutoscalerProvider", "DefaultProvider")


def test_default_spreads_and_autoscaler_packs() -> None:
    empty, busy = node("empty"), node("busy")
    infos = {"empty": NodeInfo(empty), "busy": NodeInfo(busy)}
    infos["busy"].add_pod(pod("existing", "4", "8Gi"))
    incoming = pod("new", "1", "2Gi", **{"nvidia.com/gpu": 1})

    def best(provider_name: str) -> str:
        provider = get_provider(provider_name)
        fitting = [
            name
            for name, n in (("empty", empty), ("busy", busy))
            if provider.filter(incoming, n, infos[name]) is None
        ]
        assert len(fitting) == 2  # the GPU request is the extender's business, never a filter failure
        nodes = {"empty": empty, "busy": busy}
        return max(fitting, key=lambda name: provider.score(incoming, nodes[name], infos[name]))

    assert best(DEFAULT_PROVIDER) == "empty"
    assert best(CLUSTER_AUTOSCALER_PROVIDER) == "busy"


def test_filter_reports_the_first_failing_predicate() -> None:
    provider = get_provider(DEFAULT_PROVIDER)
    cordoned = node("c", unschedulable=True)
    assert provider.filter(pod("p", "1", "1Gi"), cordoned, NodeInfo(cordoned)) == "node(s) were unschedulable"
    n = node("n")
    assert provider.filter(pod("p", "9", "1Gi"), n, NodeInfo(n)) == "Insufficient cpu"


def test_ignored_resources_are_configurable() -> None:
    provider = get_provider(DEFAULT_PROVIDER, ignored_resources=())
    n = node("n")
    assert provider.filter(pod("p", "1", "1Gi", **{"nvidia.com/gpumem": 4096}), n, NodeInfo(n)) == (
        "Insufficient nvidia.com/gpumem"
    )


def test_unknown_provider_lists_valid_names() -> None:
    with pytest.raises(UnknownProviderError) as err:
        get_provider("MostlyDefault")
    assert str(err.value) == (
        "unknown algorithm provider 'MostlyDefault'; valid names: ClusterAutoscalerProvider, DefaultProvider"
    )
