"""Bounds of the vendors' node scores for one pod, for the early exit of `walk_bounded`.

A pod asking a vendor whose ScoreNode is not always 0 is placed by the best total score (node
default score + Σ ScoreNode) over every node it fits. Each such vendor bounds its ScoreNode
(`Vendor.score_bound`) — on any node from the pod alone, or on one node from its annotations,
devices and usage — in the direction the node policy prefers: from above under binpack, from
below under spread. The sum of the bounds, taken in the order the decision sums the scores, bounds
the sum of the scores the same way (float addition is monotonic), so a node's default score plus
it bounds the node's total.

A vendor whose per-node bound reads only node annotations classes the nodes by them
(`Vendor.node_bound_class`, grouped by the ledger at registration): when the classes holding the
pod's eligible nodes all give one bound, it is that pod's bound on every such node (`common`), as
if the vendor bounded from the pod alone: no node's bound is worked out, and no ranking kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from vgpu_scheduler.devices.protocol import NodeBound, Vendor, Vendors
from vgpu_scheduler.engine.nodeview import NodeView
from vgpu_scheduler.model import ContainerDeviceRequest, ContainerRequests


@dataclass(slots=True, frozen=True)
class _Scoring:
    vendor: Vendor
    requests: tuple[ContainerDeviceRequest, ...]
    """The pod's requests of this vendor, one per container asking it."""
    anywhere: float | None
    """The vendor's bound on every node, when it has one."""
    here: NodeBound | None
    """Else its bound on one node (`Vendor.node_score_bound`)."""


@dataclass(slots=True, frozen=True)
class ScoreBounds:
    """The pod's bound of Σ ScoreNode: `constant` on every node when each scoring vendor has one
    from the pod alone, else per node (`of`)."""

    policy: str
    pod_annotations: Mapping[str, str]
    scoring: tuple[_Scoring, ...]
    constant: float | None
    key: Hashable | None
    """Equal for two pods whose bounds are equal on every node (`Vendor.score_bound_key`), None
    when some vendor bounding per node gives no key."""

    def of(self, view: NodeView) -> float:
        """The bound on the node of `view`; infinitely favourable when a vendor knows none."""
        total = 0.0
        for s in self.scoring:
            bound = s.anywhere
            if bound is None:
                assert s.here is not None
                bound = s.here(view.annotations, view.devices, view.usage)
                if bound is None:
                    return -math.inf if self.policy == "spread" else math.inf
            total += bound
        return total

    def common(self, classes: Iterable[tuple[Hashable, str]],
               view: Callable[[str], NodeView | None]) -> float | None:
        """The bound on every node of the pod's eligible nodes when it is one value there, from
        their bound classes, each with one of its nodes (`DeviceLedger.classes_with`); None when a
        vendor bounding per node does not class them or two classes differ."""
        per_node = [s.vendor.key for s in self.scoring if s.here is not None]
        found: float | None = None
        for klass, node in classes:
            # A class is `Vendors.bound_class`: (vendor key, class) of each vendor classing the node.
            classed = {entry[0] for entry in klass} if isinstance(klass, tuple) else set()
            if not all(key in classed for key in per_node):
                return None
            some = view(node)
            if some is None:
                return None
            bound = self.of(some)
            if found is None:
                found = bound
            elif bound != found:
                return None
        return found

    def keyed(self, nodes: Iterable[tuple[str, float, NodeView]], sign: float) -> list[tuple[float, str]]:
        """(sign × (node score + `of(view)`), node) for each (node, node score, view): the rank
        keys of a pod shape's first ranking, without a call of `of` per node when one vendor
        bounds per node and no other scores."""
        if len(self.scoring) != 1 or self.scoring[0].here is None:
            of = self.of
            return [(sign * (score + of(view)), node) for node, score, view in nodes]
        here = self.scoring[0].here
        unknown = -math.inf if self.policy == "spread" else math.inf
        out = []
        for node, score, view in nodes:
            bound = here(view.annotations, view.devices, view.usage)
            out.append((sign * (score + (unknown if bound is None else 0.0 + bound)), node))
        return out


def score_bounds(
    requests: Sequence[ContainerRequests],
    vendors: Vendors,
    *,
    pod_annotations: Mapping[str, str],
    policy: str,
) -> ScoreBounds:
    """The bounds for a pod with `requests` under node policy `policy` ("binpack" or "spread"). The
    scoring vendors come in the order the pod first asks them, the order their scores are summed."""
    scoring: list[_Scoring] = []
    seen: set[str] = set()
    for creq in requests:
        for key in creq:
            vendor = vendors.get(key)
            if vendor is None or not vendor.scores_nodes or key in seen:
                continue
            seen.add(key)
            asks = tuple(c[key] for c in requests if key in c)
            anywhere = vendor.score_bound(asks, pod_annotations=pod_annotations, policy=policy)
            here = None if anywhere is not None else vendor.node_score_bound(
                asks, pod_annotations=pod_annotations, policy=policy)
            scoring.append(_Scoring(vendor, asks, anywhere, here))
    constant: float | None = 0.0
    parts: list[tuple[str, bool, Hashable]] | None = []
    for s in scoring:
        if s.anywhere is None or constant is None:
            constant = None
        else:
            constant += s.anywhere
        # The bounds in summing order: equal parts give equal sums on every node.
        part = s.anywhere if s.anywhere is not None else s.vendor.score_bound_key(
            s.requests, pod_annotations=pod_annotations, policy=policy)
        if part is None or parts is None:
            parts = None
        else:
            parts.append((s.vendor.key, s.anywhere is not None, part))
    shared = None if parts is None else (policy, tuple(parts))
    return ScoreBounds(policy, pod_annotations, tuple(scoring), constant, shared)
