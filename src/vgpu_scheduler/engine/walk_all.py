"""The walk over every node: each candidate's outcome, then the best total score wins (HAMi's
approach), or with GPU policy `best-fit` the cheapest placement (`engine.placement.cheapest`).

`decide(..., evaluate_all=True)` takes it (for the event listing all fitting nodes, and for the
tests proving every path chooses the same node and devices), and so does every best-fit pod.
`Outcomes` (each node's total score or reason, from the caches while the node's generation holds)
is shared with the bounded walk (`walk_bounded`).
"""

from __future__ import annotations

import logging

from vgpu_scheduler.engine.choice import BINPACK, NODE_UNREGISTERED, _best, _chosen, _vendor_score
from vgpu_scheduler.engine.decision_input import DecisionInput
from vgpu_scheduler.engine.fit import NodeFit, evaluate_node, node_judge
from vgpu_scheduler.engine.fitcache import fit_key
from vgpu_scheduler.engine.outcome import Decision, NoFit
from vgpu_scheduler.engine.placement import cheapest
from vgpu_scheduler.engine.podinfo import pod_key
from vgpu_scheduler.engine.verdicts import quota_token

log = logging.getLogger("vgpu_scheduler.engine.decide")  # the logger name these errors always had


class Outcomes:
    """Each candidate's outcome for one pod — its total score (node default score plus the
    vendors' ScoreNode) when the pod fits, else the reason — from the caches when the node's
    generation is the one it was computed at (`engine/fitcache.py`), else by running the fit."""

    __slots__ = ("_pod", "_verdicts", "cached", "ctx", "fits", "group", "judge", "ledger", "n_init",
                 "policy", "refit", "requests", "scored")

    def __init__(self, inp: DecisionInput, *, cached: bool, refit: bool = False) -> None:
        setup, state = inp.setup, inp.state
        requests, n_init, ctx = setup.requests, setup.n_init, setup.ctx
        self.requests, self.n_init, self._pod, self.ctx = requests, n_init, inp.pod, ctx
        self.refit = refit
        """Fit every fitting node again (cached failures still count): best-fit's choice reads
        each fit, and depends on the demand seen, which no cache key holds."""
        self.ledger = state.ledger
        self.policy = policy = inp.policy
        self.cached = cached
        self.scored = setup.scored
        fingerprint = setup.fingerprint
        token = quota_token(state.quota, ctx.namespace)
        self._verdicts = state.verdicts.group(fingerprint, token)
        self.group = state.fits.group(
            fit_key(fingerprint, node_policy=policy, annotations=ctx.annotations, scored=self.scored), token
        )
        self.fits: dict[str, NodeFit] = {}
        """The fits run in this decision."""
        self.judge = self._verdicts.judge(lambda: node_judge(ctx, requests, n_init))

    def any_known(self) -> bool:
        """Some outcome of this pod shape is cached (at some generation)."""
        return self.cached and bool(self.group.entries or self._verdicts.entries)

    def known_nodes(self) -> set[str]:
        """The nodes with an outcome cached at some generation (`known` tells which is current)."""
        if not self.cached:
            return set()
        return self.group.entries.keys() | self._verdicts.entries.keys()

    def known(self, node: str, gen: int) -> float | str | None:
        """The outcome at generation `gen` when a cache holds it."""
        if not self.cached:
            return None
        score = None if self.refit else self.group.get(node, gen)
        if score is not None:
            return score
        return self._verdicts.get(node, gen)

    def __call__(self, node: str) -> float | str:
        gen = self.ledger.generation(node)
        known = self.known(node, gen)
        if known is not None:
            return known
        view = self.ledger.view(node)
        assert view is not None
        if self.judge is not None:  # most nodes do not fit: their reason without evaluate_node's setup
            reason = self.judge(view)
            if reason:
                self._verdicts.put(node, gen, reason)
                return reason
        result = evaluate_node(self.requests, self.n_init, view, self._pod, ctx=self.ctx)
        if isinstance(result, NodeFit):
            self.fits[node] = result
            score = self.ledger.score(node)
            if self.scored:
                score += _vendor_score(result, view, self.ctx.vendors, self.policy)
            self.group.put(node, gen, score)
            return score
        self._verdicts.put(node, gen, result.reason)
        return result.reason

    def fit_of(self, node: str) -> NodeFit | None:
        """The chosen node's fit for this very pod: its score may come from the cache, then it is
        fitted again (its allocation entries may carry the pod's own annotations). None when that
        refit fails, which a complete cache key rules out."""
        fit = self.fits.get(node)
        if fit is not None:
            return fit
        view = self.ledger.view(node)
        assert view is not None
        again = evaluate_node(self.requests, self.n_init, view, self._pod, ctx=self.ctx)
        if isinstance(again, NodeFit):
            return again
        log.error("cached fit of node %s no longer fits pod %s; deciding uncached", node,
                  pod_key(self._pod)[2])
        return None


def walk(inp: DecisionInput) -> Decision:
    """Every candidate's outcome; the best wins (see module doc)."""
    candidates, unregistered = inp.state.ledger.partition(inp.node_names)
    return _decide_all(inp, candidates, dict.fromkeys(unregistered, NODE_UNREGISTERED), cached=True)


def _decide_all(
    inp: DecisionInput, candidates: list[str], failed: dict[str, str], *, cached: bool
) -> Decision:
    """Every candidate's outcome (`Outcomes`), then the best score wins, or with best-fit (cached
    failures, but every fitting node fitted again) the cheapest placement. `failed`: the
    unregistered candidates' reasons."""
    state = inp.state
    outcomes = Outcomes(inp, cached=cached, refit=inp.setup.best_fit)
    scores: dict[str, float] = {}
    unregistered = dict(failed)
    for node in candidates:
        outcome = outcomes(node)
        if isinstance(outcome, str):
            failed[node] = outcome
        else:
            scores[node] = outcome
    if not scores:
        return NoFit(failed)
    best = _best_of(inp, outcomes, scores)
    fit = outcomes.fit_of(best)
    if fit is None:
        state.verdicts.clear()
        state.fits.clear()
        return _decide_all(inp, candidates, unregistered, cached=False)
    return _chosen(best, fit, scores[best], scores, failed=failed, now=inp.now, vendors=inp.setup.ctx.vendors,
                   pod=inp.pod, ledger=state.ledger)


def _best_of(inp: DecisionInput, outcomes: Outcomes, scores: dict[str, float]) -> str:
    """The best of the fitting nodes `scores` (the deprioritized ones only if no other fits)."""
    preferred = scores
    deprioritized = inp.deprioritized
    if deprioritized is not None:
        free = {node: score for node, score in scores.items() if not deprioritized(node)}
        preferred = free or scores
    if inp.setup.best_fit:
        state = inp.state
        ledger = state.ledger
        views = {node: view for node in preferred if (view := ledger.view(node)) is not None}
        return cheapest(
            preferred, outcomes.fits, views, state.demand, ledger=ledger, descending=inp.policy == BINPACK
        )
    return _best(preferred, inp.policy == BINPACK)
