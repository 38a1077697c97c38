"""kube-scheduler's classic node priorities (0..100 each), for the simulated scheduling loop.

All three look at cpu and memory only, counting the pod being scheduled plus the pods already on the
node, with kube-scheduler's "non-zero" defaults (100m cpu, 200 MiB memory for containers that request
nothing), against `status.allocatable`. The HAMi extender has no prioritize verb (§9.1), so
in the real deployment these are what orders the nodes the extender is *not* asked about; in the
simulation they break ties between nodes the extender would accept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.simulate.predicates import CPU, MEMORY, NodeInfo, pod_resources

MAX_NODE_SCORE = 100

PriorityFunction = Callable[[Mapping[str, Any], Mapping[str, Any], NodeInfo], int]


@dataclass(slots=True, frozen=True)
class WeightedPriority:
    name: str
    function: PriorityFunction
    weight: int = 1


def _usage(pod: Mapping[str, Any], node_info: NodeInfo) -> tuple[tuple[int, int], tuple[int, int]]:
    """((cpu requested, cpu allocatable), (memory requested, memory allocatable)), pod included."""
    res = pod_resources(pod)
    cpu = node_info.non_zero_requested[CPU] + res.non_zero_cpu
    mem = node_info.non_zero_requested[MEMORY] + res.non_zero_memory
    return (cpu, node_info.allocatable.get(CPU, 0)), (mem, node_info.allocatable.get(MEMORY, 0))


def _least(requested: int, capacity: int) -> int:
    if capacity <= 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def _most(requested: int, capacity: int) -> int:
    if capacity <= 0 or requested > capacity:
        return 0
    return requested * MAX_NODE_SCORE // capacity


def least_requested(pod: Mapping[str, Any], node: Mapping[str, Any], node_info: NodeInfo) -> int:
    """Mean over cpu and memory of (allocatable - requested) * 100 / allocatable: favours empty nodes."""
    del node
    (cpu, cpu_cap), (mem, mem_cap) = _usage(pod, node_info)
    return (_least(cpu, cpu_cap) + _least(mem, mem_cap)) // 2


def most_requested(pod: Mapping[str, Any], node: Mapping[str, Any], node_info: NodeInfo) -> int:
    """Mean over cpu and memory of requested * 100 / allocatable: packs nodes so that others can be
    scaled down (the cluster-autoscaler-friendly choice)."""
    del node
    (cpu, cpu_cap), (mem, mem_cap) = _usage(pod, node_info)
    return (_most(cpu, cpu_cap) + _most(mem, mem_cap)) // 2


def balanced_resource_allocation(
    pod: Mapping[str, Any], node: Mapping[str, Any], node_info: NodeInfo
) -> int:
    """(1 - |cpu fraction - memory fraction|) * 100; 0 once either fraction reaches 1. Favours nodes
    whose cpu and memory would be used in the same proportion."""
    del node
    (cpu, cpu_cap), (mem, mem_cap) = _usage(pod, node_info)
    if cpu_cap <= 0 or mem_cap <= 0:
        return 0
    cpu_fraction = cpu / cpu_cap
    mem_fraction = mem / mem_cap
    if cpu_fraction >= 1 or mem_fraction >= 1:
        return 0
    return int((1 - abs(cpu_fraction - mem_fraction)) * MAX_NODE_SCORE)


def pod_score_key(pod: Mapping[str, Any]) -> tuple[int, int]:
    """Everything the priorities read from `pod` (its non-zero cpu and memory): pods with equal keys
    get equal scores on every node. A priority reading more of the pod must extend this."""
    res = pod_resources(pod)
    return res.non_zero_cpu, res.non_zero_memory


PRIORITY_FUNCTIONS: Mapping[str, PriorityFunction] = {
    "LeastRequestedPriority": least_requested,
    "MostRequestedPriority": most_requested,
    "BalancedResourceAllocation": balanced_resource_allocation,
}


def weighted(name: str, weight: int = 1) -> WeightedPriority:
    try:
        function = PRIORITY_FUNCTIONS[name]
    except KeyError:
        valid = ", ".join(sorted(PRIORITY_FUNCTIONS))
        raise KeyError(f"unknown priority {name!r}; valid names: {valid}") from None
    return WeightedPriority(name, function, weight)


def score_node(
    priorities: tuple[WeightedPriority, ...] | list[WeightedPriority],
    pod: Mapping[str, Any],
    node: Mapping[str, Any],
    node_info: NodeInfo,
) -> int:
    """Σ weight * score over the priorities."""
    return sum(p.weight * p.function(pod, node, node_info) for p in priorities)
