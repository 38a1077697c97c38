"""The filter decision: pick one node and concrete devices for a pod (§5.7, §4.1).

HAMi evaluates every candidate node, then takes the best node score among the nodes that fit
(binpack: highest, spread: lowest). `decide` works out the pod's setup (`_pod_setup`, kept while the
pod waits), builds the decision's input (`engine/decision_input.py`) and hands it to one of three
walks, each `walk(input) -> Decision`, that all choose the node an all-nodes evaluation would:

* `walk_first_fit` (the usual pod): nodes in policy order, the first that fits wins; nodes that
  cannot fit are skipped by their summaries, and a pod that fits nowhere is answered from the
  snapshot of its verdicts, re-checked only where nodes changed;
* `walk_bounded` (a pod asking a vendor whose ScoreNode is not always 0: Ascend 910, Metax): nodes
  by a bound of their total score, stopping once no unvisited node can beat the best fit found;
* `walk_all` (`evaluate_all=True`, and GPU policy `best-fit`): every node's outcome, then the best
  score, or for best-fit the cheapest placement.

Not-fit verdicts are cached across decisions (`engine/verdicts.py`, owned by the state), and the
total scores of fits for pods whose vendors score nodes (`engine/fitcache.py`); the caches only
replace evaluations by their earlier results, so the decision (and the order of FailedNodes) is the
same as without them. The chosen node is touched (new generation) once the vendors'
PatchAnnotations ran, as they may note state a later fit there reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vgpu_scheduler.engine import walk_all, walk_bounded, walk_first_fit
from vgpu_scheduler.engine.choice import BINPACK as BINPACK
from vgpu_scheduler.engine.choice import NODE_UNREGISTERED as NODE_UNREGISTERED
from vgpu_scheduler.engine.choice import SPREAD as SPREAD
from vgpu_scheduler.engine.choice import filter_annotations as filter_annotations
from vgpu_scheduler.engine.choice import node_policy as node_policy
from vgpu_scheduler.engine.decision_input import DecisionInput, PodSetup
from vgpu_scheduler.engine.fit import pod_fit_context as pod_fit_context

# The no-ledger path: in `nodes_only`, re-exported here.
from vgpu_scheduler.engine.nodes_only import decide_on_nodes as decide_on_nodes
from vgpu_scheduler.engine.nodes_only import node_view_from_object as node_view_from_object

# Results: in `outcome`, re-exported here.
from vgpu_scheduler.engine.outcome import Chosen as Chosen
from vgpu_scheduler.engine.outcome import Decision as Decision
from vgpu_scheduler.engine.outcome import Error as Error
from vgpu_scheduler.engine.outcome import NoFit as NoFit
from vgpu_scheduler.engine.outcome import NoRequest as NoRequest
from vgpu_scheduler.engine.podinfo import init_container_count, pod_key
from vgpu_scheduler.engine.policy import BEST_FIT
from vgpu_scheduler.engine.requests import pod_has_device_requests
from vgpu_scheduler.engine.requests import pod_requests as pod_requests
from vgpu_scheduler.engine.scores import ScoringWeightsError
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.engine.verdicts import pod_fingerprint
from vgpu_scheduler.engine.walk_common import asked, needs_of
from vgpu_scheduler.engine.walk_common import scoring_vendors as _scoring_vendors
from vgpu_scheduler.model import ContainerRequests
from vgpu_scheduler.wire import objects

_PodSetup = PodSetup  # the name the tests know it by

MAX_POD_SETUPS = 4096
"""Pods whose setup is kept (the pending ones are retried on every cluster event)."""


def _pod_setup(
    pod: Mapping[str, Any], requests: Sequence[ContainerRequests], state: SchedulerState, gpu_policy: str
) -> PodSetup | Error:
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
        isinstance(known, PodSetup) and known.requests is requests
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
    return PodSetup(
        requests=requests, resource_version=rv if type(rv) is str else "",
        gpu_policy=gpu_policy, quota=quota, uid=uid, name=name, n_init=n_init, ctx=ctx,
        fingerprint=state.verdicts.canonical(pod_fingerprint(requests, n_init, ctx)),
        needs=needs_of(requests, vendors),
        asked=asked(requests), scored=bool(_scoring_vendors(requests, vendors)),
        best_fit=ctx.policy == BEST_FIT and not ctx.numa_bind,
    )


def _keep(setup: PodSetup, state: SchedulerState, decision: Decision) -> Decision:
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
    ranking every node (`walk_first_fit._decide_from_snapshot`). The chosen node is the same either way.

    `evaluate_all=True` runs the fit on every node (`walk_all`).

    Side effect (§5.2): the pod's own earlier allocation or reservation is dropped from `state`
    first, so a pod filtered again is never counted twice. The decision itself is not recorded:
    the caller calls `state.reserve(pod, chosen)` and then patches the pod.
    """
    if requests is None:
        requests = pod_requests(pod, state.vendors)
    if not pod_has_device_requests(requests):
        return NoRequest()
    setup = _pod_setup(pod, requests, state, default_gpu_policy)
    if isinstance(setup, Error):
        return setup
    state.forget(setup.uid)
    if setup.best_fit and observe:
        state.demand.observe(requests)
    inp = DecisionInput(
        pod=pod, node_names=node_names, state=state, setup=setup,
        policy=node_policy(setup.ctx.annotations, default_node_policy),
        eligible=state.ledger.nodes_with(setup.asked), now=now, deprioritized=deprioritized,
        walk_failed=walk_failed,
    )
    if evaluate_all or setup.best_fit:
        return _keep(setup, state, walk_all.walk(inp))
    if setup.scored:
        return _keep(setup, state, walk_bounded.walk(inp))
    return _keep(setup, state, walk_first_fit.walk(inp))
