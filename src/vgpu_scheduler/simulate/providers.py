"""Named algorithm providers: a set of predicates and weighted priorities chosen by name, as
kube-scheduler's `--algorithm-provider` did (DefaultProvider, and ClusterAutoscalerProvider which swaps
LeastRequested for MostRequested so that work is packed and empty nodes can be removed).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.simulate.predicates import (
    DEFAULT_IGNORED_RESOURCES,
    NODE_INFO_PREDICATES,
    PREDICATE_ORDER,
    NodeInfo,
    Predicate,
    make_predicates,
    pod_filter_key,
)
from vgpu_scheduler.simulate.priorities import WeightedPriority, pod_score_key, score_node, weighted

DEFAULT_PROVIDER = "DefaultProvider"

CLUSTER_AUTOSCALER_PROVIDER = "ClusterAutoscalerProvider"


class UnknownProviderError(ValueError):
    """An algorithm provider name that is not registered."""


@dataclass(slots=True, frozen=True)
class AlgorithmProvider:
    name: str
    predicates: tuple[tuple[str, Predicate], ...]
    """(name, predicate) in evaluation order."""
    priorities: tuple[WeightedPriority, ...]
    filter_key: Callable[[Mapping[str, Any]], Hashable | None] = lambda pod: None
    """What `filter` reads from a pod, as a hashable (None: unknown, do not cache): pods with equal
    keys get equal verdicts on a node with the same `node_filter_inputs` and NodeInfo."""
    score_key: Callable[[Mapping[str, Any]], Hashable | None] = lambda pod: None
    """Likewise for `score` (which reads only NodeInfo of the node)."""
    reads_node_info: frozenset[str] | None = None
    """Names of the predicates that read NodeInfo (None: assume all do). The others read only the pod
    and the Node object's `node_filter_inputs`, so a cache may keep their verdict while those are
    unchanged and rerun only the rest when pods come and go on the node."""

    @property
    def predicate_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.predicates)

    @property
    def priority_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.priorities)

    def filter(self, pod: Mapping[str, Any], node: Mapping[str, Any], node_info: NodeInfo) -> str | None:
        """The first failing predicate's reason, or None if the pod fits the node."""
        for _, predicate in self.predicates:
            reason = predicate(pod, node, node_info)
            if reason is not None:
                return reason
        return None

    def split_predicates(self) -> tuple[tuple[Predicate, ...], tuple[Predicate, ...]]:
        """(leading predicates that do not read NodeInfo, the rest), in evaluation order: `filter` is
        the first reason of the first part, else of the second."""
        reads = self.reads_node_info
        n = 0
        while reads is not None and n < len(self.predicates) and self.predicates[n][0] not in reads:
            n += 1
        fns = tuple(p for _, p in self.predicates)
        return fns[:n], fns[n:]

    def score(self, pod: Mapping[str, Any], node: Mapping[str, Any], node_info: NodeInfo) -> int:
        """Σ weight * priority score (each priority 0..100)."""
        return score_node(self.priorities, pod, node, node_info)


# Provider name -> priority names (weight 1 each); every provider uses every predicate.
_PROVIDER_PRIORITIES: Mapping[str, tuple[str, ...]] = {
    DEFAULT_PROVIDER: ("LeastRequestedPriority", "BalancedResourceAllocation"),
    CLUSTER_AUTOSCALER_PROVIDER: ("MostRequestedPriority", "BalancedResourceAllocation"),
}


def provider_names() -> tuple[str, ...]:
    return tuple(sorted(_PROVIDER_PRIORITIES))


def get_provider(
    name: str, *, ignored_resources: Iterable[str] = DEFAULT_IGNORED_RESOURCES
) -> AlgorithmProvider:
    """The provider registered under `name`; `ignored_resources` are the extender-managed resources
    PodFitsResources leaves alone."""
    try:
        priority_names = _PROVIDER_PRIORITIES[name]
    except KeyError:
        raise UnknownProviderError(
            f"unknown algorithm provider {name!r}; valid names: {', '.join(provider_names())}"
        ) from None
    predicates = make_predicates(ignored_resources)
    ignored = frozenset(ignored_resources)
    return AlgorithmProvider(
        name=name,
        predicates=tuple((p, predicates[p]) for p in PREDICATE_ORDER),
        priorities=tuple(weighted(p) for p in priority_names),
        filter_key=lambda pod: pod_filter_key(pod, ignored),
        score_key=pod_score_key,
        reads_node_info=NODE_INFO_PREDICATES,
    )
