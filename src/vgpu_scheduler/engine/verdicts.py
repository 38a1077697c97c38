"""Cache of per-node "does not fit" verdicts, reused across filters of the same (or an identical) pod.

When no node fits, the decision must evaluate every node for its exact reason string (§5.3, §5.7
FailedNodes), and kube-scheduler retries such pods on every cluster event. Between two retries most
nodes did not change, so their verdict did not either. A verdict is a pure function of

* the pod's *fit fingerprint* (`pod_fingerprint`): everything of the pod that `evaluate_node` reads
  — the per-container requests, the number of init containers and the `PodFitContext` fields
  (namespace, GPU policy, numa-bind, each vendor's type/uuid/mode filters, scoring weights);
* the node's inventory, cordon and usage, summarised by the ledger's node *generation*;
* the namespace's quota limits and usage (ResourceQuotaNotFit), summarised by `quota_token`:
  the quota manager's namespace generation, or None when the namespace has no managed limit (then
  `fits` is always true and the usage is irrelevant, so churn in the namespace keeps the verdicts).

Entries are grouped per fingerprint: group -> node -> (node generation, reason). A group whose
quota token changed is emptied, which is the same as keying entries by (fingerprint + token, node,
generation) without leaving dead groups behind. A stale entry (older node generation) is simply
overwritten. Only not-fit verdicts are stored: a fit ends the decision anyway.

The size is bounded. Eviction is scan-resistant: pending pods are retried in a fixed cycle, and
plain LRU would throw out exactly the group needed next. When the cache is full, the least recently
used group is evicted only if it sat idle through two whole rounds of group accesses (its pod was
scheduled or deleted); otherwise the new verdict is simply not cached, and the groups in use keep
theirs.
"""

from __future__ import annotations

import sys
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar, cast

from vgpu_scheduler.devices.protocol import Pinned
from vgpu_scheduler.engine.fit import NodeJudge, PodFitContext
from vgpu_scheduler.engine.pinned import ElsewhereCache
from vgpu_scheduler.engine.quota import QuotaManager
from vgpu_scheduler.engine.ranking import Ranking
from vgpu_scheduler.model import ContainerRequests

DEFAULT_MAX_ENTRIES = 500_000



class PodFingerprint(tuple[Hashable, ...]):
    """A tuple that hashes its items once: it keys the verdict groups on every decision of a
    waiting pod, and its items (request dataclasses, filters) hash in Python."""

    _hash: int

    def __new__(cls, items: Iterable[Hashable]) -> PodFingerprint:
        self = super().__new__(cls, items)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self) -> int:
        return self._hash

V = TypeVar("V")
"""What is cached per node: a not-fit reason here, a fit's node score in `engine/fitcache.py`."""
H = TypeVar("H", bound=Hashable)


def pod_fingerprint(requests: Sequence[ContainerRequests], n_init: int, ctx: PodFitContext) -> PodFingerprint:
    """Everything of a pod that a node's fit verdict depends on (two pods with equal fingerprints
    get the same verdict on the same node state). Vendor order within a container is kept: it
    decides which request fails first. Each requested vendor contributes its selection filters
    (`Vendor.pod_filters`); a vendor that is not registered contributes nothing (the fit fails the
    same way for every pod asking for it)."""
    filters = []
    for creq in requests:
        for key in creq:
            vendor = ctx.vendors.get(key)
            if vendor is not None:
                filters.append((key, ctx.filters(vendor)))
    return PodFingerprint((
        tuple(tuple(creq.items()) for creq in requests),
        n_init,
        ctx.namespace,
        ctx.policy,
        ctx.numa_bind,
        tuple(filters),
        ctx.weights,
        ctx.n_init,
        ctx.quota is not None,
    ))


def quota_token(quota: QuotaManager, namespace: str) -> int | None:
    """What the namespace's quota state contributes to a verdict (see module doc)."""
    return quota.generation(namespace) if quota.has_limits(namespace) else None


FITS = ""
"""`Snapshot.verdicts` value of a node the pod fits on (a reason text is never empty)."""


class Snapshot:
    """The verdict of one fingerprint on *every* node of one candidate list, as of ledger tick
    `tick`: a reason text, or FITS. A node whose generation did not move since `tick` has the same
    verdict (see module doc), so a later decision over the same candidates re-evaluates only the
    nodes the ledger lists as changed since then (`DeviceLedger.changed_since`)."""

    __slots__ = ("_lent", "candidates", "counts", "fitting", "rendered", "tick", "verdicts")

    def __init__(self, candidates: list[str], verdicts: dict[str, str], tick: int) -> None:
        self.candidates = candidates
        self.verdicts = verdicts
        self.fitting: set[str] = set()
        """The nodes whose verdict is FITS."""
        self.counts: dict[str, int] = dict(Counter(verdicts.values()))
        """How many nodes have each reason text (no FITS, no zero)."""
        self.tick = tick
        self.rendered: bytes | None = None
        """A caller's encoding of `verdicts` (the filter's FailedNodes answer), kept until a
        verdict changes: a pod that fits nowhere is retried on every cluster event, and most
        retries find the same reasons."""
        self._lent = False

    def lend(self) -> tuple[dict[str, str], dict[str, int]]:
        """`verdicts` and `counts` for an answer, without copying them: they are not changed
        afterwards (the next change works on copies), so an answer keeps what it was given."""
        self._lent = True
        return self.verdicts, self.counts

    def set(self, node: str, verdict: str) -> None:
        counts = self.counts
        old = self.verdicts.get(node)
        if old == verdict:
            return
        if self._lent:
            self.verdicts, self.counts = dict(self.verdicts), dict(counts)
            counts = self.counts
            self._lent = False
        self.rendered = None
        self.verdicts[node] = verdict
        if old is not None and old != FITS:
            left = counts[old] - 1
            if left:
                counts[old] = left
            else:
                del counts[old]
        if verdict == FITS:
            self.fitting.add(node)
        else:
            self.fitting.discard(node)
            counts[verdict] = counts.get(verdict, 0) + 1


class VerdictGroup(Generic[V]):
    """The cached not-fit reasons (or other per-node values) of one pod fingerprint, per node."""

    __slots__ = (
        "_cache", "_judge", "_pins", "entries", "key", "last_used", "quota_token", "ranking", "snapshot"
    )

    def __init__(self, cache: VerdictCache[V], token: int | None, key: Hashable = None) -> None:
        # None once evicted or cleared: later puts are dropped so the cache's size stays exact.
        self._cache: VerdictCache[V] | None = cache
        self.key = key
        """The fingerprint object the group is stored under (`VerdictCache.canonical`)."""
        self.quota_token = token
        self.entries: dict[str, tuple[int, V]] = {}
        self.last_used = 0
        self.snapshot: Snapshot | None = None
        self.ranking: Ranking | None = None
        """Fit-score groups: the visit order of the pod's decisions (`engine/ranking.py`)."""
        self._judge: tuple[NodeJudge | None] | None = None
        self._pins: tuple[Pinned | None] | None = None

    def judge(self, make: Callable[[], NodeJudge | None]) -> NodeJudge | None:
        """The pods' node judge (`engine.fit.node_judge`), made once per group: what it reads of a
        pod is part of the fingerprint, so every pod of the group has the same one."""
        if self._judge is None:
            self._judge = (make(),)
        return self._judge[0]

    def pins(self, make: Callable[[], Pinned | None]) -> Pinned | None:
        """The pods' pinned devices (`engine.fit.node_pins`), made once per group like `judge`."""
        if self._pins is None:
            self._pins = (make(),)
        return self._pins[0]

    def get(self, node: str, generation: int) -> V | None:
        """The value cached for `node` at `generation`, else None."""
        entry = self.entries.get(node)
        if entry is not None and entry[0] == generation:
            return entry[1]
        return None

    def put(self, node: str, generation: int, value: V) -> None:
        entries = self.entries
        if node not in entries:
            cache = self._cache
            if cache is None or not cache._make_room(self):
                return  # evicted, or this group alone fills the cache: keep what it has
            cache._size += 1
        # Interned: a no-fit pod stores the same few reason texts for thousands of nodes.
        entries[node] = (generation, cast(V, sys.intern(value)) if isinstance(value, str) else value)


class VerdictCache(Generic[V]):
    """Bounded LRU of `VerdictGroup`s by pod fingerprint (or any hashable key); owned by
    `SchedulerState`."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._groups: OrderedDict[Hashable, VerdictGroup[V]] = OrderedDict()
        self._size = 0
        self._tick = 0
        self.setups: dict[str, object] = {}
        """The decisions' per-pod setup by pod uid (`engine.decide`; it bounds it), kept with the
        state it was worked out for."""
        self.elsewhere = ElsewhereCache()
        """Pinned pods' verdicts on the nodes holding none of their devices (`engine/pinned.py`)."""

    def canonical(self, fingerprint: H) -> H:
        """`fingerprint`, or the equal object its group is stored under: a pod setup keeping that
        one finds the group by identity on each decision, where an equal copy was compared item by
        item (request dataclasses, device id sets; ~2 % of a 5,000-node simulation's py-spy samples)."""
        group = self._groups.get(fingerprint)
        return cast(H, group.key) if group is not None else fingerprint

    def group(self, fingerprint: Hashable, token: int | None) -> VerdictGroup[V]:
        """The group of a pod fingerprint (made most recently used), emptied if the quota moved."""
        self._tick += 1
        group = self._groups.get(fingerprint)
        if group is None:
            group = VerdictGroup[V](self, token, fingerprint)
            group.last_used = self._tick
            self._groups[fingerprint] = group
            return group
        group.last_used = self._tick
        self._groups.move_to_end(fingerprint)
        if group.quota_token != token:
            self._size -= len(group.entries)
            group.entries.clear()
            group.snapshot = None
            group.ranking = None
            group.quota_token = token
        return group

    def drop_node(self, node: str) -> None:
        """Forget every verdict about `node` (it was removed from the cluster)."""
        for group in self._groups.values():
            group.snapshot = None
            group.ranking = None
            if group.entries.pop(node, None) is not None:
                self._size -= 1

    def clear(self) -> None:
        self.elsewhere.clear()
        for group in self._groups.values():
            group._cache = None
            group.snapshot = None
            group.ranking = None
        self._groups.clear()
        self._size = 0

    def __len__(self) -> int:
        """Number of cached (node, verdict) entries over all groups."""
        return self._size

    def _make_room(self, keep: VerdictGroup[V]) -> bool:
        """Evict idle least recently used groups (never `keep`) until one more entry fits."""
        while self._size >= self.max_entries:
            fingerprint, oldest = next(iter(self._groups.items()))
            if oldest is keep or self._tick - oldest.last_used <= 2 * len(self._groups):
                return False  # every cached group is in use: keep them, skip this verdict
            del self._groups[fingerprint]
            oldest._cache = None
            self._size -= len(oldest.entries)
        return True
