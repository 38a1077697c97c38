"""The first-fit walk: visit nodes in policy order and take the first that fits (§5.7, §4.1).

HAMi evaluates every candidate node, then takes the best node score among the nodes that fit
(binpack: highest, spread: lowest). The node score (§5.5 ComputeDefaultScore, plus each allocated
vendor's ScoreNode, which is 0 for the vendors this walk serves) then depends only on the usage
already on the node — never on the pod — and the ledger keeps it up to date. So the same answer is
found by visiting nodes **in policy order** and stopping at the first one that fits:

* binpack: score descending, spread: score ascending; equal scores by node name ascending — the
  deterministic tie-break (HAMi's is goroutine completion order, i.e. random);
* every node before the first fitting one does not fit, and every node after it is worse or equal
  and later by name, so the first fit is exactly the node an all-nodes evaluation would pick;
* a node with no device of some vendor the pod asks (`DeviceLedger.nodes_with`), or whose
  `NodeSummary` shows that some request cannot fit on any of its devices (no free slot, not enough
  free memory or cores anywhere), is skipped without running the fit. Both tests are necessary
  conditions of the per-device checks, so a skipped node never fits; when no node fits, skipped
  nodes are evaluated anyway for their exact reason strings (and, as a guard, the first of them that
  does fit would still be chosen in order). The nodes an earlier walk of the same requests skipped
  and that did not change since are passed over without testing them again
  (`DeviceLedger.ruled_out`).

Not-fit verdicts are cached across decisions (`engine/verdicts.py`, owned by the state): a node whose
generation (ledger) and the pod's fingerprint and namespace quota state are unchanged since an
earlier evaluation gets the same reason string without running the fit again. A node evaluated
is first judged by the pod's order-free verdict (`engine.fit.node_judge`, kept with the verdicts),
which gives most nodes' reasons without the fit's setup. When every candidate was evaluated and
none fits, the verdicts are kept as the fingerprint's snapshot (`_decide_from_snapshot`), which the
next decision re-checks only where nodes changed.

A pod pinned to device uuids (`Vendor.pinned_devices`) fits at most the nodes holding them; on the
others its verdict reads only their inventory. Its snapshot is re-checked against those holders and
the nodes whose inventory changed (`DeviceLedger.inventory_changed_since`), and a new one takes the
verdicts its class shares on the other nodes (`engine/pinned.py`) instead of walking them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from itertools import filterfalse

from vgpu_scheduler.devices.protocol import MemoryShortfall, Pinned
from vgpu_scheduler.engine.choice import BINPACK, NODE_UNREGISTERED, _chosen
from vgpu_scheduler.engine.decision_input import DecisionInput
from vgpu_scheduler.engine.fit import (
    NodeFit,
    NodeJudge,
    evaluate_node,
    node_judge,
    node_pins,
    node_shortfall,
)
from vgpu_scheduler.engine.ledger import DeviceLedger
from vgpu_scheduler.engine.outcome import Decision, NoFit
from vgpu_scheduler.engine.pinned import pinned_verdicts
from vgpu_scheduler.engine.verdicts import FITS, Snapshot, VerdictGroup, quota_token
from vgpu_scheduler.engine.walk_common import may_fit, ordered, registered, same_names

log = logging.getLogger("vgpu_scheduler.engine.decide")  # the logger name these errors always had

VerdictOf = Callable[[str], NodeFit | str | None]
"""A node's fit or reason for the pod; None when the node is not registered (any more)."""


def walk(inp: DecisionInput) -> Decision:
    """The first fitting node in policy order, from the verdict snapshot when there is one."""
    setup, ledger = inp.setup, inp.state.ledger
    ctx, requests, n_init = setup.ctx, setup.requests, setup.n_init
    verdicts = inp.state.verdicts.group(setup.fingerprint, quota_token(inp.state.quota, ctx.namespace))
    judge = verdicts.judge(lambda: node_judge(ctx, requests, n_init))
    pinned = verdicts.pins(lambda: node_pins(ctx, requests, n_init))
    # A pod pinned to some devices: elsewhere, a verdict holds while the node's inventory does.
    holders = ledger.holders(pinned.ids) if pinned is not None else None
    verdict_of = _verdict_reader(inp, verdicts, judge=judge, holders=holders)

    # The snapshot's candidates were registered and distinct: the same names need no partition
    # (a node removed since is in the ledger's changes, and sends the decision to the walk).
    snapshot = verdicts.snapshot
    if snapshot is not None and same_names(snapshot.candidates, inp.node_names):
        answer = _snapshot_answer(inp, snapshot, verdict_of, holders)
        if answer is not None:
            return answer
        verdicts.snapshot = None
    elif pinned is not None and holders is not None and judge is not None:
        answer = _pinned_answer(inp, verdicts, pinned, holders=holders, judge=judge, verdict_of=verdict_of)
        if answer is not None:
            return answer
    return _first_fit(inp, verdicts, verdict_of)


def _verdict_reader(
    inp: DecisionInput,
    verdicts: VerdictGroup[str],
    *,
    judge: NodeJudge | None,
    holders: frozenset[str] | None,
) -> VerdictOf:
    """The decision's `verdict_of`: a cached verdict while it holds, else the judge's reason, else
    the fit (kept for the rest of the decision)."""
    ledger, setup, pod = inp.state.ledger, inp.setup, inp.pod
    requests, n_init, ctx = setup.requests, setup.n_init, setup.ctx
    current, entries, inventory_tick = ledger.current, verdicts.entries, ledger.inventory_tick
    fitted: dict[str, NodeFit] = {}  # fits found in this decision (the snapshot's, then the walk's)

    def verdict_of(node: str) -> NodeFit | str | None:
        known = current(node)
        if known is None:
            return None
        gen, view = known
        entry = entries.get(node)  # `verdicts.get`, inline: this runs for every node changed
        if entry is not None:
            if entry[0] == gen:
                return entry[1]
            if holders is not None and node not in holders and inventory_tick(node) <= entry[0]:
                entries[node] = (gen, entry[1])
                return entry[1]
        fit = fitted.get(node)
        if fit is not None:
            return fit
        if judge is not None:  # most nodes do not fit: their reason without evaluate_node's setup
            reason = judge(view)
            if reason:
                if entry is None:
                    verdicts.put(node, gen, reason)
                else:  # `put` of a node already counted, inline; the judge's texts are interned
                    entries[node] = (gen, reason)
                return reason
        # The group's judge is the pod's (`VerdictGroup.judge`): it was just run, or is None.
        result = evaluate_node(requests, n_init, view, pod, ctx=ctx, judged=True)
        if isinstance(result, NodeFit):
            fitted[node] = result
            return result
        verdicts.put(node, gen, result.reason)
        return result.reason

    return verdict_of


def _chosen_at(inp: DecisionInput, node: str, fit: NodeFit, failed: dict[str, str]) -> Decision:
    """The walk's choice of `node` (touched: the vendors' patch may note state a later fit reads)."""
    ledger = inp.state.ledger
    return _chosen(node, fit, ledger.score(node), {node: ledger.score(node)}, failed=failed, now=inp.now,
                   vendors=inp.state.vendors, pod=inp.pod, ledger=ledger)


def _first_fit(inp: DecisionInput, verdicts: VerdictGroup[str], verdict_of: VerdictOf) -> Decision:
    """Walk the candidates in policy order (see module doc); the first free node that fits wins."""
    state, setup = inp.state, inp.setup
    ledger, needs, eligible, deprioritized = state.ledger, setup.needs, inp.eligible, inp.deprioritized
    descending = inp.policy == BINPACK
    candidates, unregistered = registered(state, inp.node_names)
    failed = dict.fromkeys(unregistered, NODE_UNREGISTERED)
    skipped: list[str] = []
    deferred: list[str] = []

    # The nodes an earlier walk of the same requests found no request can fit, and unchanged
    # since, are passed over at C speed (the ledger keeps them per requests between decisions).
    hopeless = ledger.ruled_out((setup.asked, needs))
    for node in filterfalse(hopeless.__contains__, ordered(ledger, candidates, descending)):
        if node not in eligible or not may_fit(needs, ledger.summary(node)):
            hopeless.add(node)
            skipped.append(node)
            continue
        if deprioritized is not None and deprioritized(node):
            deferred.append(node)
            continue
        result = verdict_of(node)
        assert result is not None  # a candidate: registered
        if isinstance(result, NodeFit):
            return _chosen_at(inp, node, result, failed)
        failed[node] = result
    if len(skipped) < len(hopeless):  # some were passed over: skipped in the walk's order
        skipped = [n for n in ordered(ledger, candidates, descending) if n in hopeless]
    return _set_aside(inp, verdicts, verdict_of, candidates=candidates, failed=failed,
                      deferred=deferred, skipped=skipped)


def _set_aside(
    inp: DecisionInput,
    verdicts: VerdictGroup[str],
    verdict_of: VerdictOf,
    *,
    candidates: list[str],
    failed: dict[str, str],
    deferred: list[str],
    skipped: list[str],
) -> Decision:
    """Nothing free fits: the deferred nodes in the walk's order, then the skipped ones, which still
    need their exact reasons. None fits: the snapshot of every candidate's verdict is kept."""
    ledger, setup = inp.state.ledger, inp.setup
    short = node_shortfall(setup.ctx, setup.requests, setup.n_init) if skipped else None
    for node in deferred + skipped:
        result = (short is not None and _short_of_memory(short, ledger, node)) or verdict_of(node)
        assert result is not None  # a candidate: registered
        if isinstance(result, NodeFit):
            if node in skipped:  # cannot happen if the summary bounds are right
                log.error("node %s was skipped as hopeless but fits pod %s; choosing it", node, setup.name)
            return _chosen_at(inp, node, result, failed)
        failed[node] = result
    # Every candidate was evaluated and none fits: what the next decision of this fingerprint
    # over the same candidates starts from.
    verdicts.snapshot = Snapshot(candidates, {node: failed[node] for node in candidates}, ledger.tick)
    return NoFit(failed)


def _short_of_memory(short: tuple[str, int, MemoryShortfall], ledger: DeviceLedger, node: str) -> str | None:
    """The node's reason from its summary when no usable device has the memory asked and every
    device is usable (`Vendor.memory_shortfall`): what the judge would find device by device,
    without the walk over them. None when the summary does not settle it."""
    key, nums, shortfall = short
    view = ledger.view(node)
    if view is None or view.cordoned:
        return None
    summary = ledger.summary(node)
    devices = len(view.devices)
    if (
        summary.has_mig
        or summary.slot_free_devices != devices
        or summary.max_free_mem >= shortfall.need
        or nums > devices
        or len(view.positions(key)) != devices
    ):
        return None
    return shortfall.text(devices)


# ---------------------------------------------------------------------------------------------
# Answers without the walk


def _pinned_answer(
    inp: DecisionInput,
    verdicts: VerdictGroup[str],
    pinned: Pinned,
    *,
    holders: frozenset[str],
    judge: NodeJudge,
    verdict_of: VerdictOf,
) -> Decision | None:
    """A new pinned pod (or new candidates): its reasons from its class's, if it fits nowhere."""
    state = inp.state
    ledger = state.ledger
    candidates, unregistered = registered(state, inp.node_names)
    found = None if unregistered else pinned_verdicts(
        state.verdicts.elsewhere.current(pinned.elsewhere, ledger), candidates, holders,
        ledger=ledger, judge=judge, verdict_of=verdict_of,
    )
    if found is None:
        return None
    snapshot = verdicts.snapshot = Snapshot(candidates, found, ledger.tick)
    failed, counts = snapshot.lend()
    return NoFit(failed, counts, snapshot)


def _snapshot_answer(
    inp: DecisionInput, snapshot: Snapshot, verdict_of: VerdictOf, holders: frozenset[str] | None
) -> Decision | None:
    """The decision from the fingerprint's snapshot (`_decide_from_snapshot`), or None: walk."""
    ledger = inp.state.ledger
    answer = _decide_from_snapshot(inp, snapshot, verdict_of, _changed_since(ledger, snapshot.tick, holders))
    if isinstance(answer, NoFit):
        failed, counts = snapshot.lend()
        return NoFit(failed, counts, snapshot)
    if answer is None:
        return None
    best, fit = answer
    return _chosen(best, fit, ledger.score(best), {best: ledger.score(best)}, failed={}, now=inp.now,
                   vendors=inp.state.vendors, pod=inp.pod)


def _changed_since(ledger: DeviceLedger, tick: int, holders: frozenset[str] | None) -> Iterable[str] | None:
    """The nodes whose verdict may have changed since `tick` (repeats possible; None when no
    longer known): those whose generation moved, or for a pod pinned to the devices of `holders`,
    the holders whose generation moved and the nodes whose inventory changed."""
    if holders is None:
        return ledger.changed_since(tick)
    changed = ledger.inventory_changed_since(tick)
    if changed is None:
        return None
    generation = ledger.generation
    changed.extend(node for node in holders if generation(node) > tick)
    return changed


def _decide_from_snapshot(
    inp: DecisionInput, snapshot: Snapshot, verdict_of: VerdictOf, changed: Iterable[str] | None
) -> NoFit | tuple[str, NodeFit] | None:
    """The walk's answer from the snapshot of every candidate's verdict, re-evaluating only the
    nodes that changed since it was taken: NoFit (the candidates' reasons), the chosen node and its
    fit, or None when the walk must run (snapshot too old, or a choice the caller wants the walk's
    `failed` for).

    `changed`: the nodes to re-evaluate (`_changed_since`).

    The walk visits free nodes that may fit in policy order, then busy ones, then the skipped
    ones, and takes the first that fits; so among the nodes that fit, the chosen one is the least
    by (that category, policy order), whatever the nodes that do not fit.
    """
    if changed is None:
        return None
    for node in set(changed):
        old = snapshot.verdicts.get(node)  # re-read: `set` may replace a lent dict
        if old is None:
            continue  # not a candidate
        result = verdict_of(node)
        if result is None:
            return None  # removed: the walk names it unregistered
        verdict = FITS if isinstance(result, NodeFit) else result
        if verdict != old:
            snapshot.set(node, verdict)
    ledger = inp.state.ledger
    snapshot.tick = ledger.tick
    if not snapshot.fitting:
        return NoFit(snapshot.verdicts)  # the caller answers with `snapshot.lend()`
    if inp.walk_failed:
        return None
    category, _, node = min(map(_walk_rank(inp), snapshot.fitting))
    if category == 2:  # cannot happen if the summary bounds are right
        log.error("node %s was skipped as hopeless but fits; choosing it", node)
    result = verdict_of(node)
    if not isinstance(result, NodeFit):  # the snapshot disagrees with the verdicts: walk
        return None
    return node, result


def _walk_rank(inp: DecisionInput) -> Callable[[str], tuple[int, float, str]]:
    """A node's place in the walk: (free 0, busy 1, skipped 2; policy-signed score; name)."""
    ledger, needs, eligible = inp.state.ledger, inp.setup.needs, inp.eligible
    deprioritized, descending = inp.deprioritized, inp.policy == BINPACK

    def walk_rank(node: str) -> tuple[int, float, str]:
        if node not in eligible or not may_fit(needs, ledger.summary(node)):
            category = 2
        elif deprioritized is not None and deprioritized(node):
            category = 1
        else:
            category = 0
        score = ledger.score(node)
        return (category, -score if descending else score, node)

    return walk_rank
