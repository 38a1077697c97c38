"""The filter decision: pick one node and concrete devices for a pod (§5.7, §4.1).

HAMi evaluates every candidate node, then takes the best node score among the nodes that fit
(binpack: highest, spread: lowest). The node score (§5.5 ComputeDefaultScore, plus each allocated
vendor's ScoreNode, which is 0 for most vendors) then depends only on the usage already on the
node — never on the pod — and the ledger keeps it up to date. So the same answer is found by
visiting nodes **in policy order** and stopping at the first one that fits (a pod asking a vendor
whose ScoreNode is not always 0 visits nodes by a bound of their total score instead, see below):

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

With a vendor whose ScoreNode depends on the node and the devices taken (Ascend 910, Metax), each
such vendor bounds its ScoreNode (`Vendor.score_bound`, `engine/bounds.py`) from above under
binpack, from below under spread; nodes are visited by that bound (`_decide_bounded`, in an order
kept between the pod shape's decisions, `engine/ranking.py`) and the visit stops once no unvisited
node can beat the best fit found — the same node, devices and score as evaluating every node.

Not-fit verdicts are cached across decisions (`engine/verdicts.py`, owned by the state): a node whose
generation (ledger) and the pod's fingerprint and namespace quota state are unchanged since an
earlier evaluation gets the same reason string without running the fit again. A node evaluated
is first judged by the pod's order-free verdict (`engine.fit.node_judge`, kept with the verdicts),
which gives most nodes' reasons without the fit's setup. This is what makes a
pod that fits nowhere cheap to retry; the cache only replaces evaluations by their earlier results,
so the decision (and the order of FailedNodes) is the same as without it. A pod whose vendors score
nodes also reuses the total scores of its fits (`engine/fitcache.py`): a node whose generation did
not move is ranked by its known total instead of a bound and not fitted again, the chosen node once
more for the pod's own allocation. The chosen
node is touched (new generation) once the vendors' PatchAnnotations ran, as they may note state a
later fit there reads.

A pod pinned to device uuids (`Vendor.pinned_devices`) fits at most the nodes holding them; on the
others its verdict reads only their inventory. Its snapshot is re-checked against those holders and
the nodes whose inventory changed (`DeviceLedger.inventory_changed_since`), and a new one takes the
verdicts its class shares on the other nodes (`engine/pinned.py`) instead of walking them.

`evaluate_all=True` runs the fit on every node (for the event listing all fitting nodes, and for the
tests proving both paths choose the same node and devices).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import filterfalse
from typing import Any

from vgpu_scheduler.devices.protocol import MemoryShortfall, QuotaCheck, Vendors
from vgpu_scheduler.engine.bounds import ScoreBounds, score_bounds
from vgpu_scheduler.engine.choice import BINPACK as BINPACK
from vgpu_scheduler.engine.choice import NODE_UNREGISTERED as NODE_UNREGISTERED
from vgpu_scheduler.engine.choice import SPREAD as SPREAD
from vgpu_scheduler.engine.choice import _best, _chosen, _vendor_score
from vgpu_scheduler.engine.choice import filter_annotations as filter_annotations
from vgpu_scheduler.engine.choice import node_policy as node_policy
from vgpu_scheduler.engine.fit import (
    NodeFit,
    PodFitContext,
    evaluate_node,
    node_judge,
    node_pins,
    node_shortfall,
    pod_fit_context,
)
from vgpu_scheduler.engine.fitcache import fit_key
from vgpu_scheduler.engine.ledger import DeviceLedger, NodeSummary

# The no-ledger path: in `nodes_only`, re-exported here.
from vgpu_scheduler.engine.nodes_only import decide_on_nodes as decide_on_nodes
from vgpu_scheduler.engine.nodes_only import node_view_from_object as node_view_from_object
from vgpu_scheduler.engine.outcome import Chosen as Chosen
from vgpu_scheduler.engine.outcome import Decision as Decision
from vgpu_scheduler.engine.outcome import Error as Error
from vgpu_scheduler.engine.outcome import NoFit as NoFit
from vgpu_scheduler.engine.outcome import NoRequest as NoRequest
from vgpu_scheduler.engine.pinned import pinned_verdicts
from vgpu_scheduler.engine.placement import cheapest
from vgpu_scheduler.engine.podinfo import init_container_count, pod_key
from vgpu_scheduler.engine.policy import BEST_FIT
from vgpu_scheduler.engine.ranking import Ranking, Run, score_runs
from vgpu_scheduler.engine.requests import pod_has_device_requests, pod_requests
from vgpu_scheduler.engine.scores import ScoringWeightsError
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.engine.verdicts import (
    FITS,
    PodFingerprint,
    Snapshot,
    VerdictGroup,
    pod_fingerprint,
    quota_token,
)
from vgpu_scheduler.model import PERCENTAGE_UNSET, ContainerRequests
from vgpu_scheduler.wire import objects

log = logging.getLogger(__name__)



# Results: in `outcome`, re-exported here.


# ---------------------------------------------------------------------------------------------
# Cheap "cannot fit" test


@dataclass(slots=True, frozen=True)
class _Need:
    nums: int
    memreq: int
    pct: int
    cores: int


def _needs(requests: Sequence[ContainerRequests], vendors: Vendors) -> tuple[_Need, ...]:
    """The requests the node summary may bound: those of vendors whose requests are lower bounds
    of what one device needs (`Vendor.prefilter`)."""
    out = []
    for creq in requests:
        for key, r in creq.items():
            vendor = vendors.get(key)
            if vendor is not None and vendor.prefilter:
                out.append(_Need(r.nums, r.memreq, r.mem_percentage_req, min(r.coresreq, 100)))
    return tuple(out)


def _scoring_vendors(requests: Sequence[ContainerRequests], vendors: Vendors) -> list[str]:
    """Keys of the requested vendors whose ScoreNode may be non-zero (the node score then depends
    on the pod, so every node must be evaluated)."""
    out: list[str] = []
    for creq in requests:
        for key in creq:
            vendor = vendors.get(key)
            if vendor is not None and vendor.scores_nodes and key not in out:
                out.append(key)
    return out


def _asked(requests: Sequence[ContainerRequests]) -> tuple[str, ...]:
    """The vendor keys the pod asks, sorted (the key of `DeviceLedger.nodes_with`)."""
    return tuple(sorted({key for creq in requests for key in creq}))


def _may_fit(needs: tuple[_Need, ...], s: NodeSummary) -> bool:
    """False only when some request cannot be met by any device of the node (see module doc).

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
# Per-pod setup


@dataclass(slots=True, frozen=True)
class _PodSetup:
    """What a decision works out of the pod alone, kept per pod object version (`_pod_setup`)."""

    requests: Sequence[ContainerRequests]
    resource_version: str
    gpu_policy: str
    quota: QuotaCheck | None
    uid: str
    name: str
    n_init: int
    ctx: PodFitContext
    fingerprint: PodFingerprint
    needs: tuple[_Need, ...]
    asked: tuple[str, ...]
    scored: bool
    """Some vendor asked may score nodes (`_scoring_vendors`)."""
    best_fit: bool


MAX_POD_SETUPS = 4096
"""Pods whose setup is kept (the pending ones are retried on every cluster event)."""


def _pod_setup(
    pod: Mapping[str, Any], requests: Sequence[ContainerRequests], state: SchedulerState, gpu_policy: str
) -> _PodSetup | Error:
    """The pod's setup (fit context, fingerprint, needs). The one kept (`_keep`) serves while the
    caller passes the pod at the same uid and resourceVersion (so the same content: the objects
    may be copies) with the same `requests` object (`PodRequestsMemo`'s, a new one when the pod
    changes), and the namespace's quota role is the same. A pod filtered again while it waits
    (~40 us of setup per decision) reuses it; a caller computing `requests` afresh never does."""
    meta = pod.get("metadata")
    rv = uid = None
    if isinstance(meta, dict):  # a Mapping of another kind: not kept
        rv, uid = meta.get("resourceVersion"), meta.get("uid")
    namespace = objects.namespace(pod)
    # A namespace without a managed limit fits any amount: no quota step, and the verdict may come
    # from the order-free check (`Vendor.quick_verdict`).
    quota = state.quota if state.quota.has_limits(namespace) else None
    known = state.verdicts.setups.get(uid) if type(uid) is str and type(rv) is str else None
    if (
        isinstance(known, _PodSetup) and known.requests is requests
        and known.resource_version == rv and known.gpu_policy == gpu_policy and known.quota is quota
    ):
        return known
    vendors = state.vendors
    uid, _, name = pod_key(pod)
    n_init = init_container_count(pod)
    try:
        ctx = pod_fit_context(pod, vendors=vendors, default_policy=gpu_policy, quota=quota, n_init=n_init)
    except ScoringWeightsError as exc:
        return Error(f"calcScore failed {exc} for pod {name}")
    return _PodSetup(
        requests=requests, resource_version=rv if type(rv) is str else "",
        gpu_policy=gpu_policy, quota=quota, uid=uid, name=name, n_init=n_init, ctx=ctx,
        fingerprint=state.verdicts.canonical(pod_fingerprint(requests, n_init, ctx)),
        needs=_needs(requests, vendors),
        asked=_asked(requests), scored=bool(_scoring_vendors(requests, vendors)),
        best_fit=ctx.policy == BEST_FIT and not ctx.numa_bind,
    )


def _keep(setup: _PodSetup, state: SchedulerState, decision: Decision) -> Decision:
    """`decision`, keeping the setup of a pod that fits nowhere: it waits, and is filtered again on
    every cluster event. A pod that fits is bound: its setup is dropped."""
    memo = state.verdicts.setups
    if not isinstance(decision, NoFit):
        if memo:
            memo.pop(setup.uid, None)
    elif setup.resource_version and setup.uid and memo.get(setup.uid) is not setup:
        if setup.uid not in memo and len(memo) >= MAX_POD_SETUPS:
            del memo[next(iter(memo))]  # the oldest: insertion order
        memo[setup.uid] = setup
    return decision


# ---------------------------------------------------------------------------------------------
# Live path


def _ordered(ledger: DeviceLedger, candidates: list[str], descending: bool) -> Iterator[str]:
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


def decide(
    pod: Mapping[str, Any],
    node_names: Sequence[str],
    state: SchedulerState,
    *,
    default_node_policy: str,
    default_gpu_policy: str,
    now: int,
    evaluate_all: bool = False,
    deprioritized: Callable[[str], bool] | None = None,
    requests: Sequence[ContainerRequests] | None = None,
    walk_failed: bool = True,
    observe: bool = True,
) -> Decision:
    """Choose a node among `node_names` for `pod` using the live ledger and quotas.

    `node_names` may be kept for the next decisions (a list passed again is then recognised by
    identity): the caller must not edit it afterwards, only pass a new one.

    `deprioritized(node)` true ranks a node after every other fitting node (lock-aware placement:
    its node lock is held, so a bind there would wait or fail); among themselves such nodes keep
    the policy order. With no such node the choice is exactly HAMi's.

    `requests`: the pod's `pod_requests(pod, state.vendors)` when the caller has computed them.

    GPU policy `best-fit` (ours, opt-in) fits every candidate and chooses by `engine.placement`;
    `observe=False` (a dry run) keeps its decision out of the demand it learns from.

    `walk_failed=False`: the caller does not read `Chosen.failed` beyond the unregistered nodes
    (it reports no FilteringSucceed event), so a choice may come from the verdict snapshot without
    ranking every node (see `_decide_from_snapshot`). The chosen node is the same either way.

    Side effect (§5.2): the pod's own earlier allocation or reservation is dropped from `state`
    first, so a pod filtered again is never counted twice. The decision itself is not recorded:
    the caller calls `state.reserve(pod, chosen)` and then patches the pod.
    """
    vendors = state.vendors
    if requests is None:
        requests = pod_requests(pod, vendors)
    if not pod_has_device_requests(requests):
        return NoRequest()
    setup = _pod_setup(pod, requests, state, default_gpu_policy)
    if isinstance(setup, Error):
        return setup
    state.forget(setup.uid)
    n_init, ctx, name, needs, asked = setup.n_init, setup.ctx, setup.name, setup.needs, setup.asked
    policy = node_policy(ctx.annotations, default_node_policy)
    descending = policy == BINPACK
    ledger = state.ledger

    best_fit = setup.best_fit
    if best_fit and observe:
        state.demand.observe(requests)
    eligible = ledger.nodes_with(asked)
    if evaluate_all or best_fit:
        candidates, unregistered = ledger.partition(node_names)
        return _keep(setup, state, _decide_all(
            requests,
            n_init,
            pod,
            ctx,
            state=state,
            candidates=candidates,
            policy=policy,
            failed=dict.fromkeys(unregistered, NODE_UNREGISTERED),
            now=now,
            deprioritized=deprioritized,
            placement=best_fit,
        ))
    if setup.scored:
        candidates, unregistered = _registered(state, node_names)
        return _keep(setup, state, _decide_bounded(
            requests,
            n_init,
            pod,
            ctx,
            state=state,
            candidates=candidates,
            policy=policy,
            failed=dict.fromkeys(unregistered, NODE_UNREGISTERED),
            now=now,
            deprioritized=deprioritized,
            eligible=eligible,
            needs=needs,
        ))

    verdicts = state.verdicts.group(setup.fingerprint, quota_token(state.quota, ctx.namespace))
    skipped: list[str] = []
    deferred: list[str] = []

    fitted: dict[str, NodeFit] = {}  # fits found in this decision (the snapshot's, then the walk's)
    judge = verdicts.judge(lambda: node_judge(ctx, requests, n_init))

    current, entries = ledger.current, verdicts.entries
    pinned = verdicts.pins(lambda: node_pins(ctx, requests, n_init))
    # A pod pinned to some devices: elsewhere, a verdict holds while the node's inventory does.
    holders = ledger.holders(pinned.ids) if pinned is not None else None
    inventory_tick = ledger.inventory_tick

    def verdict_of(node: str) -> NodeFit | str | None:
        """The node's fit or reason; None when it is not registered (any more)."""
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

    # The snapshot's candidates were registered and distinct: the same names need no partition
    # (a node removed since is in the ledger's changes, and sends the decision to the walk).
    snapshot = verdicts.snapshot
    if snapshot is not None and _same_names(snapshot.candidates, node_names):
        answer = _decide_from_snapshot(
            snapshot,
            verdict_of,
            _changed_since(ledger, snapshot.tick, holders),
            ledger=ledger,
            needs=needs,
            eligible=eligible,
            descending=descending,
            deprioritized=deprioritized,
            walk_failed=walk_failed,
        )
        if isinstance(answer, NoFit):
            failed, counts = snapshot.lend()
            return _keep(setup, state, NoFit(failed, counts, snapshot))
        if answer is not None:
            best, fit = answer
            return _keep(setup, state, _chosen(
                best, fit, ledger.score(best), {best: ledger.score(best)}, failed={}, now=now,
                vendors=vendors, pod=pod,
            ))
        verdicts.snapshot = None
    elif pinned is not None and holders is not None and judge is not None:
        # A new pinned pod (or new candidates): its reasons from its class's, if it fits nowhere.
        candidates, unregistered = _registered(state, node_names)
        found = None if unregistered else pinned_verdicts(
            state.verdicts.elsewhere.current(pinned.elsewhere, ledger), candidates, holders,
            ledger=ledger, judge=judge, verdict_of=verdict_of,
        )
        if found is not None:
            snapshot = verdicts.snapshot = Snapshot(candidates, found, ledger.tick)
            failed, counts = snapshot.lend()
            return _keep(setup, state, NoFit(failed, counts, snapshot))

    candidates, unregistered = _registered(state, node_names)
    failed = dict.fromkeys(unregistered, NODE_UNREGISTERED)

    # The nodes an earlier walk of the same requests found no request can fit, and unchanged
    # since, are passed over at C speed (the ledger keeps them per requests between decisions).
    hopeless = ledger.ruled_out((asked, needs))
    for node in filterfalse(hopeless.__contains__, _ordered(ledger, candidates, descending)):
        if node not in eligible or not _may_fit(needs, ledger.summary(node)):
            hopeless.add(node)
            skipped.append(node)
            continue
        if deprioritized is not None and deprioritized(node):
            deferred.append(node)
            continue
        result = verdict_of(node)
        assert result is not None  # a candidate: registered
        if isinstance(result, NodeFit):
            return _keep(setup, state, _chosen(
                node, result, ledger.score(node), {node: ledger.score(node)}, failed=failed, now=now,
                vendors=vendors, pod=pod, ledger=ledger,
            ))
        failed[node] = result
    # Nothing free fits: the deferred nodes in the same order, then the skipped ones, which still
    # need their exact reasons.
    if len(skipped) < len(hopeless):  # some were passed over: skipped in the walk's order
        skipped = [n for n in _ordered(ledger, candidates, descending) if n in hopeless]
    short = node_shortfall(ctx, requests, n_init) if skipped else None
    for node in deferred + skipped:
        result = (short is not None and _short_of_memory(short, ledger, node)) or verdict_of(node)
        assert result is not None  # a candidate: registered
        if isinstance(result, NodeFit):
            if node in skipped:  # cannot happen if the summary bounds are right
                log.error("node %s was skipped as hopeless but fits pod %s; choosing it", node, name)
            return _keep(setup, state, _chosen(
                node, result, ledger.score(node), {node: ledger.score(node)}, failed=failed, now=now,
                vendors=vendors, pod=pod, ledger=ledger,
            ))
        failed[node] = result
    # Every candidate was evaluated and none fits: what the next decision of this fingerprint
    # over the same candidates starts from.
    verdicts.snapshot = Snapshot(candidates, {node: failed[node] for node in candidates}, ledger.tick)
    return _keep(setup, state, NoFit(failed))


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
    snapshot: Snapshot,
    verdict_of: Callable[[str], NodeFit | str | None],
    changed: Iterable[str] | None,
    *,
    ledger: DeviceLedger,
    needs: tuple[_Need, ...],
    eligible: frozenset[str],
    descending: bool,
    deprioritized: Callable[[str], bool] | None,
    walk_failed: bool,
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
    snapshot.tick = ledger.tick
    if not snapshot.fitting:
        return NoFit(snapshot.verdicts)  # the caller answers with `snapshot.lend()`
    if walk_failed:
        return None

    def walk_rank(node: str) -> tuple[int, float, str]:
        if node not in eligible or not _may_fit(needs, ledger.summary(node)):
            category = 2
        elif deprioritized is not None and deprioritized(node):
            category = 1
        else:
            category = 0
        score = ledger.score(node)
        return (category, -score if descending else score, node)

    category, _, node = min(map(walk_rank, snapshot.fitting))
    if category == 2:  # cannot happen if the summary bounds are right
        log.error("node %s was skipped as hopeless but fits; choosing it", node)
    result = verdict_of(node)
    if not isinstance(result, NodeFit):  # the snapshot disagrees with the verdicts: walk
        return None
    return node, result


class _Outcomes:
    """Each candidate's outcome for one pod — its total score (node default score plus the
    vendors' ScoreNode) when the pod fits, else the reason — from the caches when the node's
    generation is the one it was computed at (`engine/fitcache.py`), else by running the fit."""

    __slots__ = ("_pod", "_verdicts", "cached", "ctx", "fits", "group", "judge", "ledger", "n_init",
                 "policy", "refit", "requests", "scored")

    def __init__(
        self,
        requests: Sequence[ContainerRequests],
        n_init: int,
        pod: Mapping[str, Any],
        ctx: PodFitContext,
        *,
        state: SchedulerState,
        policy: str,
        cached: bool,
        refit: bool = False,
    ) -> None:
        self.requests, self.n_init, self._pod, self.ctx = requests, n_init, pod, ctx
        self.refit = refit
        """Fit every fitting node again (cached failures still count): best-fit's choice reads
        each fit, and depends on the demand seen, which no cache key holds."""
        self.ledger = state.ledger
        self.policy = policy
        self.cached = cached
        self.scored = bool(_scoring_vendors(requests, ctx.vendors))
        fingerprint = pod_fingerprint(requests, n_init, ctx)
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


def _decide_all(
    requests: Sequence[ContainerRequests],
    n_init: int,
    pod: Mapping[str, Any],
    ctx: PodFitContext,
    *,
    state: SchedulerState,
    candidates: list[str],
    policy: str,
    failed: dict[str, str],
    now: int,
    deprioritized: Callable[[str], bool] | None = None,
    cached: bool = True,
    placement: bool = False,
) -> Decision:
    """Every candidate's outcome (`_Outcomes`), then the best score wins, or with `placement`
    (best-fit: cached failures, but every fitting node fitted again) the cheapest placement
    (`engine.placement.cheapest`)."""
    outcomes = _Outcomes(
        requests, n_init, pod, ctx, state=state, policy=policy, cached=cached, refit=placement
    )
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
    preferred = scores
    if deprioritized is not None:
        free = {node: score for node, score in scores.items() if not deprioritized(node)}
        preferred = free or scores
    if placement:
        ledger = state.ledger
        views = {node: view for node in preferred if (view := ledger.view(node)) is not None}
        best = cheapest(
            preferred, outcomes.fits, views, state.demand, ledger=ledger, descending=policy == BINPACK
        )
    else:
        best = _best(preferred, policy == BINPACK)
    fit = outcomes.fit_of(best)
    if fit is None:
        state.verdicts.clear()
        state.fits.clear()
        return _decide_all(
            requests, n_init, pod, ctx, state=state, candidates=candidates, policy=policy,
            failed=unregistered, now=now, deprioritized=deprioritized, cached=False, placement=placement,
        )
    return _chosen(best, fit, scores[best], scores, failed=failed, now=now, vendors=ctx.vendors,
                   pod=pod, ledger=state.ledger)


_LAST_CANDIDATES = ("bounded decisions' candidates",)
"""The fit-score cache group whose ranking (of no node) keeps the last walked or bounded decision's
candidates."""


def _same_names(known: Sequence[str], node_names: Sequence[str]) -> bool:
    """`known == node_names`, at once when they are one list: a caller that keeps its candidate
    list passes the same object call after call (the simulator), and comparing 5,000 names item by
    item on each decision was ~2 % of a 5,000-node run's py-spy samples."""
    return known is node_names or known == node_names


def _registered(state: SchedulerState, node_names: Sequence[str]) -> tuple[list[str], list[str]]:
    """`ledger.partition(node_names)`, without the pass over every name (~20 us for 500) when they
    are the last such decision's candidates (registered and distinct then) and no node was
    removed since: kube-scheduler sends the same node list call after call."""
    ledger = state.ledger
    group = state.fits.group(_LAST_CANDIDATES, None)
    last = group.ranking
    if last is not None and _same_names(last.candidates, node_names):
        changed = ledger.changed_since(last.tick)
        if changed is not None and all(node in ledger for node in changed):
            last.tick = ledger.tick
            return last.candidates, []
    candidates, unregistered = ledger.partition(node_names)
    if not unregistered and isinstance(node_names, list) and len(candidates) == len(node_names):
        # The caller's own list (the same names): its next call with it is recognised at once.
        candidates = node_names
    group.ranking = Ranking(candidates, ledger.tick, []) if not unregistered else None
    return candidates, unregistered


def _decide_bounded(
    requests: Sequence[ContainerRequests],
    n_init: int,
    pod: Mapping[str, Any],
    ctx: PodFitContext,
    *,
    state: SchedulerState,
    candidates: list[str],
    policy: str,
    failed: dict[str, str],
    now: int,
    eligible: frozenset[str],
    needs: tuple[_Need, ...],
    deprioritized: Callable[[str], bool] | None = None,
    cached: bool = True,
) -> Decision:
    """`_decide_all`'s answer for a pod whose vendors score nodes, visiting nodes best bound first.

    Among the fitting nodes `_decide_all` takes the least (deprioritized, policy-signed total
    score, name). A node's bound key puts the vendors' `score_bound` in place of their ScoreNode
    (or is its cached total), so it never ranks the node better than its total does. Nodes are
    visited in key order, deprioritized ones after the others: with one bound for every node
    (`ScoreBounds.constant`, or `ScoreBounds.common` from the eligible nodes' bound classes) the
    key follows the default score, so the ledger's score index of the nodes with the devices asked
    is that order, in runs of one score (`ranking.score_runs`); with bounds per node, the pod
    shape's ranking (`engine/ranking.py`), one run. Each pass stops at the first key above the best
    total found (every later node's is too); an equal key with a later name ends its run, sorted by
    (key, name), but not the pass (two scores may give one key, so a later run may hold an earlier
    name). Nodes that cannot fit (`nodes_with`: no device of a vendor the pod asks; `_may_fit`: a
    summary that rules the fit out; a cached reason, in a ranking) are not visited; when no node
    fits, every candidate's reason is listed (and, as a guard, a candidate that does fit is ranked
    with the rest). `Chosen.scores` and `failed` hold the nodes visited."""
    ledger = state.ledger
    sign = -1.0 if policy == BINPACK else 1.0
    outcomes = _Outcomes(requests, n_init, pod, ctx, state=state, policy=policy, cached=cached)
    bounds = score_bounds(requests, ctx.vendors, pod_annotations=ctx.annotations, policy=policy)
    constant = bounds.constant
    asked = _asked(requests)
    if constant is None:  # one bound on every eligible node when their bound classes say so
        constant = bounds.common(ledger.classes_with(asked), ledger.view)
    score, generation = ledger.score, ledger.generation

    unknown = not outcomes.any_known()  # a pod shape's first decision: skip the cache lookups

    def key_of(node: str) -> float | None:
        if node not in eligible:
            return None
        known = None if unknown else outcomes.known(node, generation(node))
        if isinstance(known, str):
            return None
        if known is not None:
            return sign * known
        if constant is not None:
            return sign * (score(node) + constant)
        view = ledger.view(node)
        if view is None:  # removed
            return None
        return sign * (score(node) + bounds.of(view))

    ranking: Ranking | None = None
    runs: Iterable[Run]
    if constant is not None:
        # One bound for every node: the key follows the node default score, so the ledger's score
        # index is the visit order, in runs of one score (equal keys not always by name, see walk).
        scored: Iterable[tuple[float, str]]
        if len(candidates) == len(ledger):  # every registered node: those with the devices asked
            scored = ledger.by_score_with(asked, policy == BINPACK)
        else:
            scored = ((score(node), node) for node in _ordered(ledger, candidates, policy == BINPACK))
        runs = score_runs(scored, eligible, sign, constant)
    else:
        def bound_key_of(node: str) -> float | None:
            view = ledger.view(node) if node in eligible else None
            return None if view is None else sign * (score(node) + bounds.of(view))

        def shared() -> VerdictGroup[float] | None:
            """Where pods with equal bounds on every node (and the same vendors asked) keep their
            ranking by bounds alone: the fit-score cache, under a key of its own."""
            if bounds.key is None:
                return None
            return state.fits.group(("score bounds", _asked(requests), bounds.key), None)

        ranking = _ranking(outcomes, ledger, candidates, eligible=eligible, key_of=key_of,
                           bounds=bounds, bound_key_of=bound_key_of, sign=sign, unknown=unknown,
                           shared=shared)
        runs = (ranking.order,)

    scores: dict[str, float] = {}
    visited: list[tuple[str, float | None]] = []

    def walk(runs: Iterable[Run], deferred: list[list[tuple[float, str]]] | None) -> str | None:
        """The least-ranked fitting node of `runs` (deprioritized ones set aside in `deferred`)."""
        best: tuple[float, str] | None = None
        for run in runs:
            later: list[tuple[float, str]] | None = None
            for rank in run:
                if best is not None and best < rank:
                    if best[0] < rank[0]:
                        return best[1]  # every later key is greater
                    break  # an equal key with a later name: so is the rest of the run, not a later run
                node = rank[1]
                if deferred is not None and deprioritized is not None and deprioritized(node):
                    if later is None:
                        later = []
                        deferred.append(later)
                    later.append(rank)
                    continue
                if needs and not _may_fit(needs, ledger.summary(node)):
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

    deferred: list[list[tuple[float, str]]] = []
    chosen = walk(runs, deferred)
    if chosen is None and deferred:
        chosen = walk(deferred, None)
    if ranking is not None:
        for node, key in visited:  # their outcomes are cached now: rank them by them next time
            ranking.set(node, key)
    unregistered = {n: r for n, r in failed.items() if r == NODE_UNREGISTERED}
    if chosen is None:
        for node in candidates:
            if node in failed:
                continue
            outcome = outcomes(node)
            if isinstance(outcome, str):
                failed[node] = outcome
                continue
            log.error("node %s was ruled out but fits pod %s; ranking it", node, pod_key(pod)[2])
            scores[node] = outcome
        if scores:
            chosen = min(scores, key=lambda n: (
                int(deprioritized is not None and deprioritized(n)), sign * scores[n], n))
        else:
            # Every candidate's reason, in candidate order as `_decide_all` lists them.
            return NoFit({**unregistered, **{node: failed[node] for node in candidates}})
    fit = outcomes.fit_of(chosen)
    if fit is None:
        state.verdicts.clear()
        state.fits.clear()
        return _decide_bounded(
            requests, n_init, pod, ctx, state=state, candidates=candidates, policy=policy,
            failed=unregistered, now=now, eligible=eligible, needs=needs, deprioritized=deprioritized,
            cached=False,
        )
    return _chosen(chosen, fit, scores[chosen], scores, failed=failed, now=now, vendors=ctx.vendors,
                   pod=pod, ledger=ledger)


def _ranking(
    outcomes: _Outcomes,
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
