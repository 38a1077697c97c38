"""The simulated kube-scheduler's node snapshot, with cached predicate verdicts and priority scores.

Each scheduling cycle runs the predicates of one pod on every node. Between two cycles almost
nothing changes: one pod is placed (one NodeInfo changes) and the node lock annotation is written
and removed (the Node object is replaced, but not its labels, taints or schedulability). So:

* every node gets a *generation*, bumped when its NodeInfo changes (a pod added or removed) or when
  what the predicates read from its Node object changes (`node_filter_inputs`);
* verdicts are cached per (pod key, node) with the generation they were computed at, where the pod
  key (`AlgorithmProvider.filter_key`) names everything the predicates read from a pod — so pods with
  the same requests and constraints share the cache, and a retried pod reuses it;
* an `epoch` bumped with any generation lets a cycle in which nothing changed at all (retries of
  unschedulable pods) reuse the whole answer, including the JSON of the feasible node names;
* the predicates that do not read NodeInfo keep their verdict per node until its Node object's
  inputs change (`inputs_generation`): a pod placed or finished reruns PodFitsResources alone.

The verdicts are exactly the provider's: the cache only skips recomputing a function of unchanged
inputs. Nodes are in name order, as the uncached loop had them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import is_, is_not
from typing import Any

import msgspec

from vgpu_scheduler.cluster.store import Store
from vgpu_scheduler.simulate.predicates import NodeInfo, PodResources, Predicate, node_filter_inputs
from vgpu_scheduler.simulate.providers import AlgorithmProvider
from vgpu_scheduler.wire.objects import name as object_name

Obj = dict[str, Any]

_encode = msgspec.json.Encoder().encode

MAX_CACHED_KEYS = 1024
"""Distinct pod keys kept (each costs a few entries per node); beyond it the caches start afresh."""


class NodeSlot:
    """One node: its latest informer object, its NodeInfo and its generations."""

    __slots__ = ("generation", "index", "info", "inputs", "inputs_generation", "name", "node")

    def __init__(self, name: str, node: Obj) -> None:
        self.name = name
        self.node = node
        self.inputs = node_filter_inputs(node)
        self.info = NodeInfo(node)
        self.generation = 0
        """Bumped on any change a verdict or score may depend on."""
        self.inputs_generation = 0
        """Bumped only when `inputs` (what the NodeInfo-free predicates read) change."""
        self.index = -1
        """Position in `NodeTable.order` (-1: not in it)."""


class NodeTable:
    """The informer's nodes in name order, each with a NodeInfo and a generation.

    `store` is the node informer's Store and `store_version` returns its reflector's resourceVersion:
    while that is unchanged the store is too, so `refresh` costs nothing. Otherwise the store's
    journal names the nodes written since the last refresh (a node lock taken or released, mostly),
    so only those are looked at.
    """

    def __init__(self, store: Store, store_version: Callable[[], str]) -> None:
        self._store = store
        self._store_version = store_version
        self._seen_version: str | None = None
        self._seen_writes = -1  # the store's `writes` at the last refresh
        self._names: list[str] = []
        self._objects: list[Obj] = []  # the store's values as last seen (store order)
        self._in_order: set[str] = set()
        self._exact = False
        self._slots: dict[str, NodeSlot] = {}
        self.order: list[NodeSlot] = []
        """The nodes the predicates run on, in name order (refreshed by `refresh`)."""
        self.layout = 0
        """Bumped when `order` changes (a node appears or disappears)."""
        self.epoch = 0
        """Bumped when anything a verdict or score depends on changes."""
        # What each epoch since `_log_start` changed: a position in `order`, or -1 for "anything".
        self._log: list[int] = []
        self._log_start = 0

    def refresh(self) -> None:
        """Catch up with the informer's store."""
        version = self._store_version()
        if version == self._seen_version and len(self._store) == len(self._names):
            return
        self._seen_version = version
        changed = self._store.changed_since(self._seen_writes)
        self._seen_writes = self._store.writes
        if changed is not None and self._exact and self._replace_keys(changed):
            return
        objects = self._store.list()
        if self._exact and len(objects) == len(self._objects) and self._replace_changed(objects):
            return
        self._objects = objects
        if len(self._names) != len(objects):
            self._names = sorted(map(object_name, objects))
        order: list[NodeSlot] = []
        for name in self._names:
            node = self._store.get(None, name)
            if node is not None:
                order.append(self._slot(name, node))
        self._in_order = {slot.name for slot in order}
        # The store holds exactly the ordered nodes: then same size + known names = same node set.
        self._exact = len(order) == len(self._names) == len(objects)
        if order != self.order:
            for slot in self.order:
                slot.index = -1
            for i, slot in enumerate(order):
                slot.index = i
            self.order = order
            self.layout += 1
            self.epoch += 1
            self._log, self._log_start = [], self.epoch

    def _replace_keys(self, keys: list[str]) -> bool:
        """Like `_replace_changed`, for the keys the store's journal names. False, having changed
        nothing, if a node appeared or went (the full refresh rebuilds the order)."""
        nodes = []
        for key in dict.fromkeys(keys):
            node = self._store.get_by_key(key)
            if node is None or key not in self._in_order:
                return False
            nodes.append((key, node))
        for name, node in nodes:
            self._slot(name, node)
        return True

    def _replace_changed(self, objects: list[Obj]) -> bool:
        """The common case: the same nodes, a few of them replaced by a newer version (found by
        identity at C speed). False, having changed nothing, if anything else happened."""
        changed = [i for i in compress(range(len(objects)), map(is_not, objects, self._objects))]
        names = []
        for i in changed:
            name = object_name(objects[i])
            if name not in self._in_order:
                return False  # a node appeared or moved: rebuild the order
            names.append(name)
        self._objects = objects
        for i, name in zip(changed, names, strict=True):
            self._slot(name, objects[i])
        return True

    def _slot(self, name: str, node: Obj) -> NodeSlot:
        slot = self._slots.get(name)
        if slot is None:
            slot = self._slots[name] = NodeSlot(name, node)
            self._changed(-1)
        elif slot.node is not node:
            slot.node = node
            inputs = node_filter_inputs(node)
            if inputs != slot.inputs:
                slot.inputs = inputs
                slot.inputs_generation += 1
                self._bump(slot)
        return slot

    def _bump(self, slot: NodeSlot) -> None:
        slot.generation += 1
        self._changed(slot.index)

    def _changed(self, index: int) -> None:
        self.epoch += 1
        if len(self._log) > 4 * len(self.order) + 64:  # keep it short: older readers rescan all
            self._log, self._log_start = [], self.epoch - 1
        self._log.append(index)

    def changed_since(self, epoch: int) -> set[int] | None:
        """Positions in `order` whose generation may have moved since `epoch`; None: maybe all."""
        if epoch < self._log_start or epoch > self.epoch:
            return None
        changed = set(self._log[epoch - self._log_start :])
        return None if -1 in changed else changed

    def add_pod(
        self, node_name: str, pod: Mapping[str, Any], resources: PodResources | None = None
    ) -> None:
        """Count a pod placed on `node_name` (ignored if the informer does not know the node);
        `resources`: the pod's, when the caller has them."""
        node = self._store.get(None, node_name)
        if node is None:
            return
        slot = self._slot(node_name, node)
        slot.info.add_pod(pod, resources)
        self._bump(slot)

    def remove_pod(self, node_name: str, key: str) -> None:
        slot = self._slots.get(node_name)
        if slot is not None and slot.info.remove_pod(key):
            self._bump(slot)

    def info(self, node_name: str) -> NodeInfo | None:
        slot = self._slots.get(node_name)
        return slot.info if slot is not None else None

    def slot(self, node_name: str) -> NodeSlot | None:
        return self._slots.get(node_name)


class NameSet:
    """Membership in a list of names, its set made on the first question: most cycles never ask
    (a pod that fits nowhere), and a set of thousands of names costs more than the rest of them."""

    __slots__ = ("_set", "names")

    def __init__(self, names: Sequence[str]) -> None:
        self.names = names
        self._set: frozenset[str] | None = None

    def __contains__(self, name: object) -> bool:
        if self._set is None:
            self._set = frozenset(self.names)
        return name in self._set


@dataclass(slots=True)
class FilterResult:
    """One cycle's predicate outcome, shared with the cache: read only (the cache replaces these
    objects when the verdicts change, it never changes them)."""

    feasible: Sequence[str]
    feasible_set: NameSet
    failed: Mapping[str, str]
    positions: Sequence[int] = ()
    """The positions of `feasible` in the table's `order` (ascending, as `feasible` is)."""

    @property
    def names_json(self) -> bytes:
        """`feasible` as a JSON array (what an ExtenderArgs body carries). Encoded on demand: the
        in-process extender takes the names themselves, so most cycles never need it."""
        return _encode(self.feasible)


class _Verdicts:
    """The verdicts of one pod key on every node of one layout, and (per node) the verdict of the
    predicates that do not read NodeInfo, with the node's `inputs_generation` it holds for."""

    __slots__ = (
        "epoch", "failed", "feasible", "feasible_set", "generations", "positions", "reasons", "static",
        "static_generations",
    )

    def __init__(self, n: int) -> None:
        self.epoch = -1
        self.generations = [-1] * n
        self.reasons: list[str | None] = [None] * n
        self.static_generations = [-1] * n
        self.static: list[str | None] = [None] * n
        self.feasible: list[str] = []
        self.positions: list[int] = []
        self.feasible_set = NameSet(self.feasible)
        self.failed: dict[str, str] = {}


class VerdictCache:
    """`provider.filter` of a pod on every node of a NodeTable, recomputed only where it can change."""

    def __init__(self, table: NodeTable, provider: AlgorithmProvider) -> None:
        self.table = table
        self.provider = provider
        self._by_key: dict[Hashable, _Verdicts] = {}
        self._layout = -1
        self._pod_keys: dict[str, tuple[Mapping[str, Any], Hashable | None]] = {}
        self._static, self._rest = provider.split_predicates()
        self._names: list[str] = []
        self._names_layout = -1

    def filter(self, pod: Mapping[str, Any], pod_id: str | None = None) -> FilterResult:
        """The verdicts for `pod` on every node. `pod_id` (namespace/name) remembers the pod's key
        while the same pod object comes back (a retried pod), until `forget(pod_id)`."""
        table = self.table
        table.refresh()
        if self._layout != table.layout or len(self._by_key) >= MAX_CACHED_KEYS:
            self._by_key.clear()
            self._layout = table.layout
        key = self._key(pod, pod_id)
        if key is None:
            entry = _Verdicts(len(table.order))
        else:
            entry = self._by_key.get(key) or self._by_key.setdefault(key, _Verdicts(len(table.order)))
        if entry.epoch != table.epoch:
            self._update(entry, pod)
        return FilterResult(
            entry.feasible, entry.feasible_set, entry.failed, entry.positions
        )

    def _key(self, pod: Mapping[str, Any], pod_id: str | None) -> Hashable | None:
        if pod_id is None:
            return self.provider.filter_key(pod)
        known = self._pod_keys.get(pod_id)
        if known is not None and known[0] is pod:  # the informer replaces objects it updates
            return known[1]
        key = self.provider.filter_key(pod)
        self._pod_keys[pod_id] = (pod, key)
        return key

    def forget(self, pod_id: str) -> None:
        """The pod is placed (or gone): drop its remembered key."""
        self._pod_keys.pop(pod_id, None)

    def _update(self, entry: _Verdicts, pod: Mapping[str, Any]) -> None:
        # provider.filter, split: the NodeInfo-free predicates rerun only when the Node object's
        # inputs changed, the rest (PodFitsResources) when anything did.
        static_checks = self._static
        rest_checks = [_prepared(check, pod) for check in self._rest]
        generations, reasons = entry.generations, entry.reasons
        static_generations, static = entry.static_generations, entry.static
        rebuild = entry.epoch < 0
        moved: list[int] = []  # positions whose reason changed
        order = self.table.order
        positions = None if rebuild else self.table.changed_since(entry.epoch)
        for i in range(len(order)) if positions is None else positions:
            slot = order[i]
            if generations[i] == slot.generation:
                continue
            generations[i] = slot.generation
            node = slot.node
            if static_generations[i] != slot.inputs_generation:
                static_generations[i] = slot.inputs_generation
                reason = None
                for check in static_checks:
                    reason = check(pod, node, slot.info)
                    if reason is not None:
                        break
                static[i] = reason
            reason = static[i]
            if reason is None:
                info = slot.info
                for fit in rest_checks:
                    reason = fit(node, info)
                    if reason is not None:
                        break
            if reason != reasons[i]:
                reasons[i] = reason
                moved.append(i)
        entry.epoch = self.table.epoch
        if not (rebuild or moved):
            return
        # New objects (the old ones may be held by a FilterResult); the per-node work at C speed:
        # with thousands of nodes this runs on most binds, for a reason changed on one node.
        names = self._layout_names()
        if rebuild:
            failed = {name: r for name, r in zip(names, reasons, strict=True) if r is not None}
        else:
            failed = dict(entry.failed)  # names in no particular order: readers sort or look up
            for i in moved:
                reason = reasons[i]
                if reason is None:
                    failed.pop(names[i], None)
                else:
                    failed[names[i]] = reason
        fits = list(compress(range(len(names)), map(is_, reasons, repeat(None))))
        feasible = list(map(names.__getitem__, fits))
        entry.feasible, entry.failed, entry.positions = feasible, failed, fits
        entry.feasible_set = NameSet(feasible)

    def _layout_names(self) -> list[str]:
        """The names of `table.order`, kept per layout."""
        if self._names_layout != self.table.layout:
            self._names = [slot.name for slot in self.table.order]
            self._names_layout = self.table.layout
        return self._names


def _prepared(
    predicate: Predicate, pod: Mapping[str, Any]
) -> Callable[[Mapping[str, Any], NodeInfo], str | None]:
    """`predicate` for one pod, as a function of (node, node_info): its own `prepare(pod)` when it
    has one (work on the pod done once per cycle, not once per node)."""
    prepare = getattr(predicate, "prepare", None)
    if prepare is not None:
        fit: Callable[[Mapping[str, Any], NodeInfo], str | None] = prepare(pod)
        return fit
    return lambda node, node_info: predicate(pod, node, node_info)


class ScoreCache:
    """`provider.score` of a pod on a node, cached per (score key, node generation)."""

    def __init__(self, table: NodeTable, provider: AlgorithmProvider) -> None:
        self.table = table
        self.provider = provider
        self._by_key: dict[Hashable, dict[str, tuple[int, int]]] = {}
        self._aligned: dict[Hashable, _Scores] = {}
        self._aligned_layout = -1

    def best(self, pod: Mapping[str, Any], positions: Sequence[int]) -> int:
        """The position (in the table's `order`) of the highest-scoring of `positions` (ascending),
        the first of equals: what scoring each name in order and keeping strictly better ones
        gives, with the per-node work at C speed (a pod few nodes reject is scored on all)."""
        if len(positions) == 1:
            return positions[0]
        key = self.provider.score_key(pod)
        order = self.table.order
        if key is None:
            provider = self.provider
            return max(positions, key=lambda i: provider.score(pod, order[i].node, order[i].info))
        table = self.table
        if self._aligned_layout != table.layout or len(self._aligned) >= MAX_CACHED_KEYS:
            self._aligned.clear()
            self._aligned_layout = table.layout
        entry = self._aligned.get(key)
        if entry is None:
            entry = self._aligned[key] = _Scores(len(order))
        if entry.epoch != table.epoch:
            changed = None if entry.epoch < 0 else table.changed_since(entry.epoch)
            generations, values, score = entry.generations, entry.values, self.provider.score
            for i in range(len(order)) if changed is None else changed:
                slot = order[i]
                if generations[i] != slot.generation:
                    generations[i] = slot.generation
                    values[i] = score(pod, slot.node, slot.info)
            entry.epoch = table.epoch
        return max(positions, key=entry.values.__getitem__)

    def score(self, pod: Mapping[str, Any], slot: NodeSlot) -> int:
        return self.scorer(pod)(slot)

    def scorer(self, pod: Mapping[str, Any]) -> Callable[[NodeSlot], int]:
        """`score` of `pod` as a function of the slot: the pod's key is computed once for all the
        nodes of a cycle."""
        provider = self.provider
        key = provider.score_key(pod)
        if key is None:
            return lambda slot: provider.score(pod, slot.node, slot.info)
        scores = self._by_key.get(key)
        if scores is None:
            if len(self._by_key) >= MAX_CACHED_KEYS:
                self._by_key.clear()
            scores = self._by_key[key] = {}

        def score(slot: NodeSlot) -> int:
            hit = scores.get(slot.name)
            if hit is not None and hit[0] == slot.generation:
                return hit[1]
            value = provider.score(pod, slot.node, slot.info)
            scores[slot.name] = (slot.generation, value)
            return value

        return score


class _Scores:
    """The scores of one score key on every node of one layout, with the generations they hold for."""

    __slots__ = ("epoch", "generations", "values")

    def __init__(self, n: int) -> None:
        self.epoch = -1
        self.generations = [-1] * n
        self.values = [0] * n
