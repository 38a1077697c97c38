"""The walk bounded by score, for a pod asking a vendor whose ScoreNode is not always 0.

With a vendor whose ScoreNode depends on the node and the devices taken (Ascend 910, Metax), the
node score depends on the pod, so the first fit in policy order is not the best. Each such vendor
bounds its ScoreNode (`Vendor.score_bound`, `engine/bounds.py`) from above under binpack, from
below under spread; nodes are visited by that bound (in an order kept between the pod shape's
decisions, `engine/ranking.py`) and the visit stops once no unvisited node can beat the best fit
found — the same node, devices and score as evaluating every node (`walk_all`).

A pod whose vendors score nodes also reuses the total scores of its fits (`engine/fitcache.py`): a
node whose generation did not move is ranked by its known total instead of a bound and not fitted
again, the chosen node once more for the pod's own allocation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from vgpu_scheduler.engine.bounds import ScoreBounds, score_bounds
from vgpu_scheduler.engine.choice import BINPACK, NODE_UNREGISTERED, _chosen
from vgpu_scheduler.engine.decision_input import DecisionInput, Need
from vgpu_scheduler.engine.ledger import DeviceLedger
from vgpu_scheduler.engine.outcome import Decision, NoFit
from vgpu_scheduler.engine.podinfo import pod_key
from vgpu_scheduler.engine.ranking import Ranking, Run, score_runs
from vgpu_scheduler.engine.verdicts import VerdictGroup
from vgpu_scheduler.engine.walk_all import Outcomes
from vgpu_scheduler.engine.walk_common import may_fit, ordered, registered

log = logging.getLogger("vgpu_scheduler.engine.decide")  # the logger name these errors always had

KeyOf = Callable[[str], float | None]
"""A node's rank key (policy-signed), or None when it cannot fit."""


def walk(inp: DecisionInput) -> Decision:
    """The best fitting node, visiting nodes best bound first (see `_decide_bounded`)."""
    candidates, unregistered = registered(inp.state, inp.node_names)
    return _decide_bounded(inp, candidates, dict.fromkeys(unregistered, NODE_UNREGISTERED), cached=True)


def _decide_bounded(
    inp: DecisionInput, candidates: list[str], failed: dict[str, str], *, cached: bool
) -> Decision:
    """`walk_all`'s answer for a pod whose vendors score nodes, visiting nodes best bound first.

    Among the fitting nodes `walk_all` takes the least (deprioritized, policy-signed total
    score, name). A node's bound key puts the vendors' `score_bound` in place of their ScoreNode
    (or is its cached total), so it never ranks the node better than its total does. Nodes are
    visited in key order, deprioritized ones after the others: with one bound for every node
    (`ScoreBounds.constant`, or `ScoreBounds.common` from the eligible nodes' bound classes) the
    key follows the default score, so the ledger's score index of the nodes with the devices asked
    is that order, in runs of one score (`ranking.score_runs`); with bounds per node, the pod
    shape's ranking (`engine/ranking.py`), one run. Each pass stops at the first key above the best
    total found (every later node's is too); an equal key with a later name ends its run, sorted by
    (key, name), but not the pass (two scores may give one key, so a later run may hold an earlier
    name). Nodes that cannot fit (`nodes_with`: no device of a vendor the pod asks; `may_fit`: a
    summary that rules the fit out; a cached reason, in a ranking) are not visited; when no node
    fits, every candidate's reason is listed (and, as a guard, a candidate that does fit is ranked
    with the rest). `Chosen.scores` and `failed` hold the nodes visited. `failed`: the
    unregistered candidates' reasons."""
    state = inp.state
    ledger = state.ledger
    sign = -1.0 if inp.policy == BINPACK else 1.0
    outcomes = Outcomes(inp, cached=cached)
    runs, ranking = _runs(inp, outcomes, candidates, sign)
    scores: dict[str, float] = {}
    visited: list[tuple[str, float | None]] = []
    visit = _Visit(inp, outcomes, sign=sign, failed=failed, scores=scores, visited=visited)
    deferred: list[list[tuple[float, str]]] = []
    chosen = visit(runs, deferred)
    if chosen is None and deferred:
        chosen = visit(deferred, None)
    if ranking is not None:
        for node, key in visited:  # their outcomes are cached now: rank them by them next time
            ranking.set(node, key)
    unregistered = {n: r for n, r in failed.items() if r == NODE_UNREGISTERED}
    if chosen is None:
        chosen = _unvisited_fit(inp, outcomes, candidates, failed=failed, scores=scores, sign=sign)
        if chosen is None:
            # Every candidate's reason, in candidate order as `walk_all` lists them.
            return NoFit({**unregistered, **{node: failed[node] for node in candidates}})
    fit = outcomes.fit_of(chosen)
    if fit is None:
        state.verdicts.clear()
        state.fits.clear()
        return _decide_bounded(inp, candidates, unregistered, cached=False)
    return _chosen(chosen, fit, scores[chosen], scores, failed=failed, now=inp.now,
                   vendors=inp.setup.ctx.vendors, pod=inp.pod, ledger=ledger)


def _unvisited_fit(
    inp: DecisionInput,
    outcomes: Outcomes,
    candidates: list[str],
    *,
    failed: dict[str, str],
    scores: dict[str, float],
    sign: float,
) -> str | None:
    """No visited node fits: every other candidate's reason, or (a guard: cannot happen if the
    bounds and summaries are right) the best of those that fit after all."""
    deprioritized = inp.deprioritized
    for node in candidates:
        if node in failed:
            continue
        outcome = outcomes(node)
        if isinstance(outcome, str):
            failed[node] = outcome
            continue
        log.error("node %s was ruled out but fits pod %s; ranking it", node, pod_key(inp.pod)[2])
        scores[node] = outcome
    if not scores:
        return None
    return min(scores, key=lambda n: (
        int(deprioritized is not None and deprioritized(n)), sign * scores[n], n))


class _Visit:
    """One decision's visit of runs of (key, node): the least-ranked fitting node, each outcome
    noted in `failed` or `scores` and `visited`."""

    __slots__ = ("deprioritized", "failed", "ledger", "needs", "outcomes", "scores", "sign", "visited")

    def __init__(
        self,
        inp: DecisionInput,
        outcomes: Outcomes,
        *,
        sign: float,
        failed: dict[str, str],
        scores: dict[str, float],
        visited: list[tuple[str, float | None]],
    ) -> None:
        self.deprioritized, self.needs, self.ledger = inp.deprioritized, inp.setup.needs, inp.state.ledger
        self.outcomes, self.sign = outcomes, sign
        self.failed, self.scores, self.visited = failed, scores, visited

    def __call__(self, runs: Iterable[Run], deferred: list[list[tuple[float, str]]] | None) -> str | None:
        """The least-ranked fitting node of `runs` (deprioritized ones set aside in `deferred`)."""
        deprioritized = self.deprioritized if deferred is not None else None
        needs: tuple[Need, ...] = self.needs
        summary, outcomes, sign = self.ledger.summary, self.outcomes, self.sign
        failed, scores, visited = self.failed, self.scores, self.visited
        best: tuple[float, str] | None = None
        for run in runs:
            later: list[tuple[float, str]] | None = None
            for rank in run:
                if best is not None and best < rank:
                    if best[0] < rank[0]:
                        return best[1]  # every later key is greater
                    break  # an equal key with a later name: so is the rest of the run, not a later run
                node = rank[1]
                if deprioritized is not None and deprioritized(node):
                    assert deferred is not None
                    if later is None:
                        later = []
                        deferred.append(later)
                    later.append(rank)
                    continue
                if needs and not may_fit(needs, summary(node)):
                    continue
                outcome = outcomes(node)
                if isinstance(outcome, str):
                    failed[node] = outcome
                    visited.append((node, None))
                    continue
                scores[node] = outcome
                visited.append((node, sign * outcome))
                if best is None or (sign * outcome, node) < best:
                    best = (sign * outcome, node)
        return None if best is None else best[1]


# ---------------------------------------------------------------------------------------------
# The visit order


def _runs(
    inp: DecisionInput, outcomes: Outcomes, candidates: list[str], sign: float
) -> tuple[Iterable[Run], Ranking | None]:
    """The runs of (key, node) to visit, and the pod shape's ranking when they come from one."""
    ledger, setup, policy, eligible = inp.state.ledger, inp.setup, inp.policy, inp.eligible
    ctx = setup.ctx
    bounds = score_bounds(setup.requests, ctx.vendors, pod_annotations=ctx.annotations, policy=policy)
    constant = bounds.constant
    asked = setup.asked
    if constant is None:  # one bound on every eligible node when their bound classes say so
        constant = bounds.common(ledger.classes_with(asked), ledger.view)
    score = ledger.score
    unknown = not outcomes.any_known()  # a pod shape's first decision: skip the cache lookups
    if constant is not None:
        # One bound for every node: the key follows the node default score, so the ledger's score
        # index is the visit order, in runs of one score (equal keys not always by name, see walk).
        scored: Iterable[tuple[float, str]]
        if len(candidates) == len(ledger):  # every registered node: those with the devices asked
            scored = ledger.by_score_with(asked, policy == BINPACK)
        else:
            scored = ((score(node), node) for node in ordered(ledger, candidates, policy == BINPACK))
        return score_runs(scored, eligible, sign, constant), None

    def bound_key_of(node: str) -> float | None:
        view = ledger.view(node) if node in eligible else None
        return None if view is None else sign * (score(node) + bounds.of(view))

    def shared() -> VerdictGroup[float] | None:
        """Where pods with equal bounds on every node (and the same vendors asked) keep their
        ranking by bounds alone: the fit-score cache, under a key of its own."""
        if bounds.key is None:
            return None
        return inp.state.fits.group(("score bounds", asked, bounds.key), None)

    key_of = _key_of(inp, outcomes, bounds, sign=sign, unknown=unknown)
    ranking = _ranking(outcomes, ledger, candidates, eligible=eligible, key_of=key_of,
                       bounds=bounds, bound_key_of=bound_key_of, sign=sign, unknown=unknown,
                       shared=shared)
    return (ranking.order,), ranking


def _key_of(
    inp: DecisionInput, outcomes: Outcomes, bounds: ScoreBounds, *, sign: float, unknown: bool
) -> KeyOf:
    """A node's key in the pod shape's ranking: its known total, else its bound (None: a known
    reason, or a node that cannot fit)."""
    ledger, eligible = inp.state.ledger, inp.eligible
    score, generation = ledger.score, ledger.generation

    def key_of(node: str) -> float | None:
        if node not in eligible:
            return None
        known = None if unknown else outcomes.known(node, generation(node))
        if isinstance(known, str):
            return None
        if known is not None:
            return sign * known
        view = ledger.view(node)
        if view is None:  # removed
            return None
        return sign * (score(node) + bounds.of(view))

    return key_of


def _ranking(
    outcomes: Outcomes,
    ledger: DeviceLedger,
    candidates: list[str],
    *,
    eligible: frozenset[str],
    key_of: Callable[[str], float | None],
    bounds: ScoreBounds,
    bound_key_of: Callable[[str], float | None],
    sign: float,
    unknown: bool,
    shared: Callable[[], VerdictGroup[float] | None],
) -> Ranking:
    """The pod shape's visit order, kept from its previous decision and re-keyed where the ledger
    changed since, or made afresh: from the bounds alone (a copy of the ranking kept in `shared()`
    for every pod with the same bounds when there is one), with the outcomes known of the shape."""
    ranking = outcomes.group.ranking if outcomes.cached else None
    changed = None
    if ranking is not None and ranking.candidates == candidates:
        changed = ledger.changed_since(ranking.tick)
    if ranking is None or changed is None or len(changed) > len(candidates):
        def build() -> list[tuple[float, str]]:
            return _bound_order(ledger, candidates, eligible, bounds=bounds, sign=sign)

        known = set() if unknown else outcomes.known_nodes()
        group = shared() if outcomes.cached and len(known) * 4 <= len(candidates) else None
        if group is not None:
            # The shared ranking by bounds, re-keyed where an outcome is cached: the keys a fresh
            # build gives (`key_of`: the known total, or left out on a known reason, else the bound).
            ranking = _kept(group, ledger, candidates, key_of=bound_key_of, build=build).copy()
            members = ranking.members
            for node in known:
                if node in members:
                    ranking.set(node, key_of(node))
        elif unknown:  # no cache lookups
            ranking = Ranking(candidates, ledger.tick, build())
        else:
            order = []
            for node in _pool(ledger, candidates, eligible):
                key = key_of(node)
                if key is not None:
                    order.append((key, node))
            ranking = Ranking(candidates, ledger.tick, order)
    else:
        _rekey(ranking, ledger, changed, key_of)
    if outcomes.cached:
        outcomes.group.ranking = ranking
    return ranking


def _pool(ledger: DeviceLedger, candidates: list[str], eligible: frozenset[str]) -> Iterable[str]:
    """The candidates that may fit. Every registered node a candidate (the usual call): the
    eligible ones, without a pass over the candidates."""
    return eligible if len(candidates) == len(ledger) else [n for n in candidates if n in eligible]


def _bound_order(ledger: DeviceLedger, candidates: list[str], eligible: frozenset[str], *,
                 bounds: ScoreBounds, sign: float) -> list[tuple[float, str]]:
    """(bound key, node) of every candidate that may fit, unsorted."""
    return bounds.keyed(ledger.scored_views(_pool(ledger, candidates, eligible)), sign)


def _rekey(ranking: Ranking, ledger: DeviceLedger, changed: list[str],
           key_of: Callable[[str], float | None]) -> None:
    """Re-key the candidates among `changed` and bring the ranking to the ledger's tick."""
    members = ranking.members
    for node in set(changed):
        if node in members:
            ranking.set(node, key_of(node))
    ranking.tick = ledger.tick


def _kept(shared: VerdictGroup[float], ledger: DeviceLedger, candidates: list[str], *,
          key_of: Callable[[str], float | None], build: Callable[[], list[tuple[float, str]]]) -> Ranking:
    """The ranking by bounds `shared` keeps, brought up to date (re-keyed where the ledger changed
    since, made afresh when the candidates differ or most nodes changed)."""
    ranking = shared.ranking
    changed = None
    if ranking is not None and ranking.candidates == candidates:
        changed = ledger.changed_since(ranking.tick)
    if ranking is None or changed is None or len(changed) > len(candidates):
        ranking = shared.ranking = Ranking(candidates, ledger.tick, build())
    else:
        _rekey(ranking, ledger, changed, key_of)
    return ranking
