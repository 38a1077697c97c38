"""The first answer for a pod pinned to some devices (`Vendor.pinned_devices`), without a walk.

A pinned pod (`nvidia.com/use-gpuuuid`) fits at most the few nodes holding its devices. Everywhere
else its verdict reads only the node's inventory, and is the same for every pinned request of one
*class* (`Pinned.elsewhere`: the count and type filters, not the uuids). Each pinned pod is its own
verdict group, though, so before this every new one walked the whole fleet for its NoFit reasons
(at 5,000 nodes, tens of thousands of node judgements per pod shape, most of the simulator's time).

Here each class keeps the verdicts on the nodes judged so far as of a ledger tick; a node leaves
them when its inventory changes (`DeviceLedger.inventory_changed_since`). A new pinned pod's answer
is that map over its candidates, the nodes missing from it judged by the pod's own judge (on a node
holding none of the pod's devices it gives the class verdict), and the pod's own holders judged by
`verdict_of` on top. When a holder fits, the caller walks as for any pod (the node is chosen there).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import cast

from vgpu_scheduler.engine.fit import NodeFit, NodeJudge
from vgpu_scheduler.engine.ledger import DeviceLedger

MAX_CLASSES = 64
"""Classes whose verdicts are kept (few recur: a class is a device count and type filters)."""


class ClassVerdicts:
    """The verdicts of one class on the nodes judged so far, valid as of ledger tick `tick`."""

    __slots__ = ("tick", "verdicts")

    def __init__(self, tick: int) -> None:
        self.tick = tick
        self.verdicts: dict[str, str] = {}


class ElsewhereCache:
    """`ClassVerdicts` per class key (least recently used first), owned by the verdict cache."""

    def __init__(self, max_classes: int = MAX_CLASSES) -> None:
        self.max_classes = max_classes
        self._classes: OrderedDict[Hashable, ClassVerdicts] = OrderedDict()

    def current(self, key: Hashable, ledger: DeviceLedger) -> ClassVerdicts:
        """The class's verdicts without those of nodes whose inventory changed since they were
        judged (all of them when the ledger no longer knows)."""
        known = self._classes.get(key)
        if known is None:
            if len(self._classes) >= self.max_classes:
                self._classes.popitem(last=False)
            known = self._classes[key] = ClassVerdicts(ledger.tick)
            return known
        self._classes.move_to_end(key)
        changed = ledger.inventory_changed_since(known.tick)
        if changed is None:
            known.verdicts.clear()
        else:
            for node in changed:
                known.verdicts.pop(node, None)
        known.tick = ledger.tick
        return known

    def clear(self) -> None:
        self._classes.clear()


def pinned_verdicts(
    known: ClassVerdicts,
    candidates: Sequence[str],
    holders: frozenset[str],
    *,
    ledger: DeviceLedger,
    judge: NodeJudge,
    verdict_of: Callable[[str], NodeFit | str | None],
) -> dict[str, str] | None:
    """Every candidate's reason (all registered) for a pinned pod whose devices `holders` hold,
    its class verdicts `known` completed on the way; None when a holder fits or a verdict is not
    a reason (the caller walks)."""
    verdicts = known.verdicts
    wanted = set(candidates)
    for node in wanted.difference(verdicts):
        if node in holders:
            continue  # judged below; its class verdict is not the pod's
        view = ledger.view(node)
        reason = judge(view) if view is not None else None
        if not reason:
            return None
        verdicts[node] = reason
    # Every non-holder is known now, and every holder is set below.
    out = cast(dict[str, str], dict(zip(candidates, map(verdicts.get, candidates), strict=True)))
    for node in holders.intersection(wanted):
        result = verdict_of(node)
        if not isinstance(result, str):
            return None
        out[node] = result
    return out
