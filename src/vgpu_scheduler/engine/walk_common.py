"""What the decision's walks share: the cheap "cannot fit" test of a node's summary (`needs_of`,
`may_fit`), the vendor keys a pod asks (`asked`, `scoring_vendors`), the policy order of the
candidates (`ordered`), and the candidates registered (`registered`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.engine.decision_input import Need
from vgpu_scheduler.engine.ledger import DeviceLedger, NodeSummary
from vgpu_scheduler.engine.ranking import Ranking
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import PERCENTAGE_UNSET, ContainerRequests

# ---------------------------------------------------------------------------------------------
# Cheap "cannot fit" test


def needs_of(requests: Sequence[ContainerRequests], vendors: Vendors) -> tuple[Need, ...]:
    """The requests the node summary may bound: those of vendors whose requests are lower bounds
    of what one device needs (`Vendor.prefilter`)."""
    out = []
    for creq in requests:
        for key, r in creq.items():
            vendor = vendors.get(key)
            if vendor is not None and vendor.prefilter:
                out.append(Need(r.nums, r.memreq, r.mem_percentage_req, min(r.coresreq, 100)))
    return tuple(out)


def scoring_vendors(requests: Sequence[ContainerRequests], vendors: Vendors) -> list[str]:
    """Keys of the requested vendors whose ScoreNode may be non-zero (the node score then depends
    on the pod, so every node must be evaluated)."""
    out: list[str] = []
    for creq in requests:
        for key in creq:
            vendor = vendors.get(key)
            if vendor is not None and vendor.scores_nodes and key not in out:
                out.append(key)
    return out


def asked(requests: Sequence[ContainerRequests]) -> tuple[str, ...]:
    """The vendor keys the pod asks, sorted (the key of `DeviceLedger.nodes_with`)."""
    return tuple(sorted({key for creq in requests for key in creq}))


def may_fit(needs: tuple[Need, ...], s: NodeSummary) -> bool:
    """False only when some request cannot be met by any device of the node (see `walk_first_fit`).

    Each container is checked against the pre-existing usage alone, which every container of the
    pod must at least satisfy (§5.3 steps 6, 11, 12 on a usable device; memory from a percentage
    is at least that percentage of the smallest usable device).
    """
    for need in needs:
        if s.slot_free_devices == 0:
            return False
        if not s.has_mig and need.nums > s.slot_free_devices:
            return False
        memreq = need.memreq
        if memreq <= 0 and need.pct != PERCENTAGE_UNSET:
            memreq = s.min_devmem * need.pct // 100
        if memreq > s.max_free_mem or need.cores > s.max_free_cores:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Candidates


def ordered(ledger: DeviceLedger, candidates: list[str], descending: bool) -> Iterator[str]:
    """`candidates` (all registered) in policy order, without sorting when they are most nodes."""
    if len(candidates) == len(ledger):  # every registered node (the usual nodeCacheCapable call)
        return ledger.names_by_score(descending)
    if len(candidates) * 4 >= len(ledger):
        # Walking the ledger's score index beats sorting when the candidates are most nodes.
        wanted = set(candidates)
        return filter(wanted.__contains__, ledger.names_by_score(descending))
    score = ledger.score
    if descending:
        return iter(sorted(candidates, key=lambda n: (-score(n), n)))
    return iter(sorted(candidates, key=lambda n: (score(n), n)))


LAST_CANDIDATES = ("bounded decisions' candidates",)
"""The fit-score cache group whose ranking (of no node) keeps the last walked or bounded decision's
candidates."""


def same_names(known: Sequence[str], node_names: Sequence[str]) -> bool:
    """`known == node_names`, at once when they are one list: a caller that keeps its candidate
    list passes the same object call after call (the simulator), and comparing 5,000 names item by
    item on each decision was ~2 % of a 5,000-node run's py-spy samples."""
    return known is node_names or known == node_names


def registered(state: SchedulerState, node_names: Sequence[str]) -> tuple[list[str], list[str]]:
    """`ledger.partition(node_names)`, without the pass over every name (~20 us for 500) when they
    are the last such decision's candidates (registered and distinct then) and no node was
    removed since: kube-scheduler sends the same node list call after call."""
    ledger = state.ledger
    group = state.fits.group(LAST_CANDIDATES, None)
    last = group.ranking
    if last is not None and same_names(last.candidates, node_names):
        changed = ledger.changed_since(last.tick)
        if changed is not None and ledger.all_registered(changed):
            last.tick = ledger.tick
            return last.candidates, []
    candidates, unregistered = ledger.partition(node_names)
    if not unregistered and isinstance(node_names, list) and len(candidates) == len(node_names):
        # The caller's own list (the same names): its next call with it is recognised at once.
        candidates = node_names
    group.ranking = Ranking(candidates, ledger.tick, []) if not unregistered else None
    return candidates, unregistered
