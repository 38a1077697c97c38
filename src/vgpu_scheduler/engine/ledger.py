"""The device ledger: live per-device usage of every registered node (§5.2).

HAMi rebuilds usage from every cached pod on every Filter. Here usage is maintained incrementally:
a pod event costs O(devices of that pod), a node (re-)registration costs O(pods on that node). The
result must always equal a from-scratch rebuild (`rebuild_from`), which the property tests check.

Alongside the usage the ledger keeps, per node, the sums behind the node default score (§5.5), a
score-ordered index of the nodes, a lazily refreshed `NodeSummary` that lets the decision skip
nodes that cannot possibly fit, and a per-node *generation*: a number that changes whenever
anything a fit reads on that node may have changed (inventory, cordon/annotations, usage, MIG
placements, conflict flags), so a verdict computed at one generation is still valid at the same one.
A second, sparser log records the *inventory* changes alone (devices and their health, cordon,
registration, and conflict flags flipping; not usage, annotations or touches), for verdicts that
read nothing else on most nodes (`inventory_changed_since`, `holders`).
It also groups the nodes by *bound class* (`bound_classes`): what the vendors' score bounds read of
a node's annotations, worked out once per registration, so a decision bounds each class once
instead of each node (`walk_bounded`). One node's record, and how a pod is counted in or out of
it, are in `engine/ledger_node.py`.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from heapq import merge
from operator import itemgetter

from vgpu_scheduler.engine.ledger_node import EMPTY_SUMMARY, DeviceSnapshot, LedgerNode, apply_pod
from vgpu_scheduler.engine.ledger_node import NodeSummary as NodeSummary
from vgpu_scheduler.engine.nodeview import DeviceUsage, NodeView, has_vendor
from vgpu_scheduler.engine.podinfo import PodAllocation
from vgpu_scheduler.model import DeviceInfo

_Node = LedgerNode  # the name the tests know it by

MAX_CHANGES = 1 << 16
"""Generations remembered for `changed_since`."""

MAX_RULED_OUT = 128
"""`ruled_out` keys kept (one per pod shape's requests recently decided)."""


class DeviceLedger:
    """Per node inventory + usage; pods are added, updated and removed incrementally.

    Views handed out by `view()` are live: callers must not mutate them (a fit works on `copy()`).
    """

    def __init__(self, bound_class: Callable[[Mapping[str, str]], Hashable] | None = None) -> None:
        """`bound_class`: a node's bound class from its annotations (`Vendors.bound_class`); without
        it every node is of class ()."""
        self._nodes: dict[str, LedgerNode] = {}
        self._pods: dict[str, PodAllocation] = {}
        # Node name -> uids of pods placed there, kept even while the node has no inventory so a late
        # registration counts them.
        self._by_node: dict[str, set[str]] = {}
        # (score, name) ascending over registered nodes, and (-score, name) ascending: the binpack
        # walk visits nodes by score descending, names ascending, at C speed.
        self._order: list[tuple[float, str]] = []
        self._desc: list[tuple[float, str]] = []
        # Source of node generations: one counter for all nodes, so a node that is removed and
        # registered again never gets back a generation it had before.
        self._tick = 0
        # The node of each generation handed out after tick `_changes_start` (oldest first), so a
        # reader can ask which nodes changed since a tick it saw (`changed_since`).
        self._changes: list[str] = []
        self._changes_start = 0
        # (tick, node) of each inventory change after `_changes_start`, oldest first.
        self._inventory_log: list[tuple[int, str]] = []
        # Device id -> the registered nodes listing it, and `holders` answers since a node came or went.
        self._by_device: dict[str, set[str]] = {}
        self._holders: dict[frozenset[str], frozenset[str]] = {}
        # Registered nodes grouped by their set of device types (few groups: one per node model),
        # and the answers of `nodes_with` since the groups last changed.
        self._by_types: dict[frozenset[str], set[str]] = {}
        self._with: dict[tuple[str, ...], frozenset[str]] = {}
        # Each group's (score, name) ascending, and the groups of `nodes_with` since they last
        # changed: the score index of the nodes a pod may fit (`by_score_with`).
        self._group_order: dict[frozenset[str], list[tuple[float, str]]] = {}
        self._groups_with: dict[tuple[str, ...], list[list[tuple[float, str]]]] = {}
        self._classify = bound_class
        self._by_class: dict[Hashable, set[str]] = {}
        self._classes_with: dict[tuple[str, ...], list[tuple[Hashable, str]]] = {}
        # `ruled_out` answers per key (least recently used first), as of the tick they were updated at.
        self._ruled: OrderedDict[Hashable, tuple[int, set[str]]] = OrderedDict()

    # -- inventory -------------------------------------------------------------------------------

    def set_node_devices(
        self,
        node_name: str,
        devices: list[DeviceInfo],
        cordoned: frozenset[str] = frozenset(),
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """Register or refresh a node's inventory; usage is recounted only if the devices changed."""
        annotations = dict(annotations or {})
        old = self._nodes.get(node_name)
        if old is not None and old.view.devices == devices:
            recordoned = old.view.cordoned != cordoned
            old.view.cordoned = cordoned
            old.view.annotations = annotations
            old.summary = None
            self._bump(old)
            if recordoned:
                self._log_inventory(old)
            self._reclass(node_name, old)
            return
        view = NodeView(node_name, list(devices), [DeviceUsage() for _ in devices], cordoned, annotations)
        node = LedgerNode(view)
        for uid in self._by_node.get(node_name, ()):
            apply_pod(node, self._pods[uid], +1)
        self._place(node_name, old, node)

    def remove_node(self, node_name: str) -> None:
        """Forget a node's inventory; its pods stay indexed and count again if it comes back."""
        old = self._nodes.get(node_name)
        if old is not None:
            self._place(node_name, old, None)

    def _place(self, name: str, old: LedgerNode | None, new: LedgerNode | None) -> None:
        if old is not None:
            self._unorder(old.score, name)
            del self._nodes[name]
            if new is None:
                # Readers of changed_since and inventory_changed_since learn it is gone.
                self._inventory_log.append((self._log_change(name), name))
            for dev in old.view.devices:
                holding = self._by_device[dev.id]
                holding.discard(name)
                if not holding:
                    del self._by_device[dev.id]
            group = self._by_types[old.types]
            group.discard(name)
            _unorder(self._group_order[old.types], old.score, name)
            if not group:
                del self._by_types[old.types]
                del self._group_order[old.types]
            self._unclass(name, old)
        if new is not None:
            new.score = new.compute_score()
            self._bump(new)
            self._log_inventory(new)
            self._nodes[name] = new
            for dev in new.view.devices:
                self._by_device.setdefault(dev.id, set()).add(name)
            insort(self._order, (new.score, name))
            insort(self._desc, (-new.score, name))
            self._by_types.setdefault(new.types, set()).add(name)
            insort(self._group_order.setdefault(new.types, []), (new.score, name))
            self._reclass(name, new)
        self._with.clear()
        self._groups_with.clear()
        self._classes_with.clear()
        self._holders.clear()

    def _reclass(self, name: str, node: LedgerNode) -> None:
        """Put a registered node in the group of its bound class (after its annotations were set)."""
        klass = self._classify(node.view.annotations) if self._classify is not None else ()
        group = self._by_class.get(node.bound_class)
        if group is not None and name in group:
            if klass == node.bound_class:
                return
            self._unclass(name, node)
        node.bound_class = klass
        self._by_class.setdefault(klass, set()).add(name)
        self._classes_with.clear()

    def _unclass(self, name: str, node: LedgerNode) -> None:
        group = self._by_class.get(node.bound_class)
        if group is not None:
            group.discard(name)
            if not group:
                del self._by_class[node.bound_class]

    def _unorder(self, score: float, name: str) -> None:
        _unorder(self._order, score, name)
        _unorder(self._desc, -score, name)

    # -- pods ------------------------------------------------------------------------------------

    def upsert_pod(self, alloc: PodAllocation) -> PodAllocation | None:
        """Count `alloc`, replacing any earlier allocation of the same uid; returns the replaced one."""
        old = self.remove_pod(alloc.uid)
        self._pods[alloc.uid] = alloc
        self._by_node.setdefault(alloc.node, set()).add(alloc.uid)
        node = self._nodes.get(alloc.node)
        if node is not None:
            flipped = apply_pod(node, alloc, +1)
            self._rescore(alloc.node, node)
            if flipped:
                self._log_inventory(node)
        return old

    def remove_pod(self, uid: str) -> PodAllocation | None:
        """Stop counting a pod; returns its allocation (None if it was not counted)."""
        alloc = self._pods.pop(uid, None)
        if alloc is None:
            return None
        on_node = self._by_node.get(alloc.node)
        if on_node is not None:
            on_node.discard(uid)
            if not on_node:
                del self._by_node[alloc.node]
        node = self._nodes.get(alloc.node)
        if node is not None:
            flipped = apply_pod(node, alloc, -1)
            self._rescore(alloc.node, node)
            if flipped:
                self._log_inventory(node)
        return alloc

    def rebuild_from(self, pods: Iterable[PodAllocation]) -> None:
        """Drop every pod and count `pods` from scratch (relist; reference for the property tests)."""
        self._pods = {}
        self._by_node = {}
        for p in pods:
            self._pods[p.uid] = p
            self._by_node.setdefault(p.node, set()).add(p.uid)
        for name, old in list(self._nodes.items()):
            view = old.view
            fresh = LedgerNode(NodeView(name, view.devices, [DeviceUsage() for _ in view.devices],
                                   view.cordoned, view.annotations))
            for uid in self._by_node.get(name, ()):
                apply_pod(fresh, self._pods[uid], +1)
            self._place(name, old, fresh)

    def touch(self, node_name: str) -> None:
        """Give a node a new generation without changing it: something a fit reads outside the
        ledger (a vendor's own per-device state) may have changed there."""
        node = self._nodes.get(node_name)
        if node is not None:
            self._bump(node)

    def _bump(self, node: LedgerNode) -> None:
        node.gen = self._log_change(node.view.name)

    def _log_inventory(self, node: LedgerNode) -> None:
        """Record the node's latest generation as an inventory change too."""
        node.inventory_tick = node.gen
        self._inventory_log.append((node.gen, node.view.name))

    def _log_change(self, name: str) -> int:
        """A new tick, logged as a change of node `name`."""
        self._tick += 1
        if len(self._changes) >= MAX_CHANGES:  # older readers start afresh (changed_since: None)
            self._changes = []
            self._changes_start = self._tick - 1
            self._inventory_log = []
        self._changes.append(name)
        return self._tick

    def _rescore(self, name: str, node: LedgerNode) -> None:
        """After a change of the node's usage: new generation, summary and score."""
        node.summary = None
        self._bump(node)
        score = node.compute_score()
        if score != node.score:
            self._unorder(node.score, name)
            group = self._group_order[node.types]
            _unorder(group, node.score, name)
            node.score = score
            insort(self._order, (score, name))
            insort(group, (score, name))
            insort(self._desc, (-score, name))

    # -- reads -----------------------------------------------------------------------------------

    def view(self, node_name: str) -> NodeView | None:
        node = self._nodes.get(node_name)
        return node.view if node is not None else None

    def __contains__(self, node_name: object) -> bool:
        return node_name in self._nodes

    def __len__(self) -> int:
        return len(self._nodes)

    def partition(self, names: Iterable[str]) -> tuple[list[str], list[str]]:
        """(registered, unregistered) among `names`, each de-duplicated in first-seen order."""
        unique = dict.fromkeys(names)
        nodes = self._nodes
        if nodes.keys() >= unique.keys():  # the usual case, at C speed
            return list(unique), []
        return [n for n in unique if n in nodes], [n for n in unique if n not in nodes]

    def all_registered(self, names: Iterable[str]) -> bool:
        """Every one of `names` is a registered node (at C speed)."""
        return self._nodes.keys() >= set(names)

    def nodes_with(self, vendors: tuple[str, ...]) -> frozenset[str]:
        """The registered nodes having, for each of `vendors`, some device `NodeView.positions`
        lists: a pod asking a vendor fits no other node (it needs at least one of its devices)."""
        found = self._with.get(vendors)
        if found is None:
            found = self._with[vendors] = frozenset().union(*(
                names for types, names in self._by_types.items()
                if all(has_vendor(types, v) for v in vendors)
            ))
        return found

    def bound_classes(self) -> Mapping[Hashable, set[str]]:
        """Bound class -> the registered nodes of that class (live: do not mutate)."""
        return self._by_class

    def classes_with(self, vendors: tuple[str, ...]) -> list[tuple[Hashable, str]]:
        """The bound classes of the nodes of `nodes_with(vendors)`, each with one of those nodes
        (kept until a node is registered, removed or changes class)."""
        found = self._classes_with.get(vendors)
        if found is None:
            among = self.nodes_with(vendors)
            found = self._classes_with[vendors] = [
                (klass, min(members & among)) for klass, members in self._by_class.items()
                if not members.isdisjoint(among)
            ]
        return found

    def ruled_out(self, key: Hashable) -> set[str]:
        """A set of nodes the caller found ruled out by some test that reads nothing of a node
        able to change without a new generation (its summary and device types qualify), one set
        per `key` (the test): the caller adds the nodes it rules out, and each call drops those
        whose generation moved since the previous call with `key` (the test may answer otherwise
        now), so every node left is still ruled out. Kept for the most recent keys.

        The walk of a decision skips these nodes without a Python step each: most nodes it meets
        first are ones a request cannot fit (the fullest first, under binpack)."""
        ruled = self._ruled
        entry = ruled.get(key)
        changed = None if entry is None else self.changed_since(entry[0])
        if entry is not None and changed is not None:
            out = entry[1]
            if out:
                out.difference_update(changed)
            ruled.move_to_end(key)
        else:
            out = set()
            if entry is None and len(ruled) >= MAX_RULED_OUT:
                ruled.popitem(last=False)
        ruled[key] = (self._tick, out)
        return out

    def node_names(self) -> Iterable[str]:
        return self._nodes.keys()

    def scored_views(self, names: Iterable[str]) -> Iterator[tuple[str, float, NodeView]]:
        """(name, score, view) of each registered node of `names` (one lookup per node)."""
        nodes = self._nodes
        for name in names:
            node = nodes.get(name)
            if node is not None:
                yield name, node.score, node.view

    def score(self, node_name: str) -> float:
        """Node default score (§5.5) of a registered node; 0 for unknown nodes."""
        node = self._nodes.get(node_name)
        return node.score if node is not None else 0.0

    @property
    def tick(self) -> int:
        """The latest generation handed out (to any node)."""
        return self._tick

    def changed_since(self, tick: int) -> list[str] | None:
        """The nodes whose generation moved, or that were removed, after `tick` (repeats
        possible); None when that is no longer known."""
        if tick < self._changes_start or tick > self._tick:
            return None
        return self._changes[tick - self._changes_start :]

    def inventory_changed_since(self, tick: int) -> list[str] | None:
        """The nodes whose inventory changed (see module doc), or that were removed, after `tick`
        (repeats possible); None when that is no longer known."""
        if tick < self._changes_start or tick > self._tick:
            return None
        log = self._inventory_log
        return [name for _, name in log[bisect_left(log, (tick + 1,)):]]

    def inventory_tick(self, node_name: str) -> int:
        """The generation of the node's last inventory change (0 for unknown nodes)."""
        node = self._nodes.get(node_name)
        return node.inventory_tick if node is not None else 0

    def holders(self, ids: frozenset[str]) -> frozenset[str]:
        """The registered nodes with a device of one of `ids` (kept until a node comes or goes)."""
        found = self._holders.get(ids)
        if found is None:
            by_device = self._by_device
            found = self._holders[ids] = frozenset().union(*(by_device.get(i, ()) for i in ids))
        return found

    def current(self, node_name: str) -> tuple[int, NodeView] | None:
        """(generation, live view) of a registered node, in one lookup (see `generation`, `view`)."""
        node = self._nodes.get(node_name)
        return None if node is None else (node.gen, node.view)

    def generation(self, node_name: str) -> int:
        """The node's current generation (0 for unknown nodes; registered nodes are never 0)."""
        node = self._nodes.get(node_name)
        return node.gen if node is not None else 0

    def summary(self, node_name: str) -> NodeSummary:
        node = self._nodes.get(node_name)
        if node is None:
            return EMPTY_SUMMARY
        if node.summary is None:
            node.summary = node.compute_summary()
        return node.summary

    def allocation(self, uid: str) -> PodAllocation | None:
        return self._pods.get(uid)

    def pods(self) -> Iterable[PodAllocation]:
        return self._pods.values()

    def pods_on(self, node_name: str) -> list[PodAllocation]:
        return [self._pods[uid] for uid in self._by_node.get(node_name, ())]

    def by_score(self, descending: bool) -> Iterator[tuple[float, str]]:
        """Registered nodes by score (ascending or descending); equal scores always by name ascending."""
        if not descending:
            return iter(self._order)
        return ((-negated, name) for negated, name in self._desc)

    def names_by_score(self, descending: bool) -> Iterator[str]:
        """The names of `by_score`, without a Python step per node."""
        return map(itemgetter(1), self._desc if descending else self._order)

    def by_score_with(self, vendors: tuple[str, ...], descending: bool) -> Iterator[tuple[float, str]]:
        """`by_score` of the nodes of `nodes_with(vendors)` alone."""
        groups = self._groups_with.get(vendors)
        if groups is None:
            groups = self._groups_with[vendors] = [
                self._group_order[types] for types in self._by_types
                if all(has_vendor(types, v) for v in vendors)
            ]
        if len(groups) == 1:
            return _by_score(groups[0], descending)
        return merge(*(_by_score(g, descending) for g in groups),
                     key=(lambda pair: (-pair[0], pair[1])) if descending else None)

    def snapshot(self) -> dict[str, tuple[float, tuple[DeviceSnapshot, ...]]]:
        """Comparable picture of all usage: node -> (score, per device snapshot), for tests."""
        out: dict[str, tuple[float, tuple[DeviceSnapshot, ...]]] = {}
        for name, node in self._nodes.items():
            devs = tuple(
                (
                    d.id,
                    u.used,
                    u.usedmem,
                    u.usedcores,
                    tuple(sorted(f"{p}@{pl.start}+{pl.size}" for p, pl in u.mig_taken)),
                    u.mig_conflict,
                )
                for d, u in zip(node.view.devices, node.view.usage, strict=True)
            )
            out[name] = (node.score, devs)
        return out


def _unorder(order: list[tuple[float, str]], score: float, name: str) -> None:
    i = bisect_left(order, (score, name))
    if i < len(order) and order[i] == (score, name):
        del order[i]


def _by_score(order: list[tuple[float, str]], descending: bool) -> Iterator[tuple[float, str]]:
    """`order` ascending or descending by score; equal scores always by name ascending."""
    if not descending:
        yield from order
        return
    end = len(order)
    while end > 0:
        score = order[end - 1][0]
        start = bisect_left(order, (score,), 0, end)  # (score,) sorts before (score, any name)
        yield from order[start:end]
        end = start
