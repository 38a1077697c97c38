"""`Vendor.score_bound` holds for every fit: never below ScoreNode under binpack, never above it
under spread, on any node (from the pod alone) and on the node at hand (from its annotations,
devices and usage). Random Ascend, Metax sGPU and Metax GPU nodes with random usage, random pods;
every node a pod fits is scored by the vendors of its allocation and compared with their bounds.
"""

from __future__ import annotations

from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.engine.test_bounded import NODES, _register, node_spec
from tests.engine.test_fitcache import _pod, _vendors, pod_spec
from vgpu_scheduler.devices.ascend.vendor import NETWORK_WEIGHT
from vgpu_scheduler.devices.metax.sgpu import SCORE_WEIGHT
from vgpu_scheduler.engine.decide import Chosen, decide
from vgpu_scheduler.engine.fit import NodeFit, evaluate_node, pod_fit_context
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import ContainerDeviceRequest

POLICIES = ("binpack", "spread")


def _holds(bound: float | None, score: float, policy: str) -> bool:
    if bound is None:
        return True
    return score <= bound if policy == "binpack" else score >= bound


@settings(max_examples=300, deadline=None)
@given(fleet=st.lists(node_spec, min_size=len(NODES), max_size=len(NODES)),
       usage=st.lists(pod_spec, max_size=4), spec=pod_spec)
def test_every_fit_scores_within_its_vendors_bounds(
    fleet: list[dict[str, Any]], usage: list[dict[str, Any]], spec: dict[str, Any]
) -> None:
    state = SchedulerState(_vendors())
    for name, node in zip(NODES, fleet, strict=True):
        _register(state, name, node)
    for i, earlier in enumerate(usage):  # usage before the pod: earlier pods placed where they fit
        obj = _pod(f"u{i}", earlier)
        placed = decide(obj, NODES, state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
        if isinstance(placed, Chosen):
            state.reserve(obj, placed)
    obj = _pod("p", spec)
    vendors = state.vendors
    requests = pod_requests(obj, vendors)
    ctx = pod_fit_context(obj, vendors=vendors, n_init=0)
    checked = 0
    for name in NODES:
        view = state.ledger.view(name)
        assert view is not None
        fit = evaluate_node(requests, 0, view, obj, ctx=ctx)
        if not isinstance(fit, NodeFit):
            continue
        for key, per_container in fit.devices.items():
            vendor = vendors[key]
            asks = tuple(creq[key] for creq in requests if key in creq)
            for policy in POLICIES:
                score = vendor.score_node(per_container, annotations=view.annotations, devices=view.devices,
                                          previous=view.usage, policy=policy)
                anywhere = vendor.score_bound(asks, pod_annotations=ctx.annotations, policy=policy)
                here = vendor.score_bound(asks, pod_annotations=ctx.annotations, policy=policy,
                                          annotations=view.annotations, devices=view.devices,
                                          previous=view.usage)
                assert _holds(anywhere, score, policy), (key, policy, anywhere, score)
                assert _holds(here, score, policy), (key, policy, here, score)
                if vendor.scores_nodes:
                    checked += 1
                    event(f"{key} {policy}: bound {'tight' if score in (anywhere, here) else 'loose'}")
                else:
                    assert (anywhere, here, score) == (0.0, 0.0, 0.0)
    event(f"scored fits checked: {min(checked, 3)}+")


def _ask(nums: int, cores: int = 0, key: str = "Ascend910B3") -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums=nums, type=key, memreq=0, mem_percentage_req=100, coresreq=cores)


def test_the_bounds_from_the_pod_alone() -> None:
    vendors = _vendors()
    ascend, sgpu, gpu = vendors["Ascend910B3"], vendors["Metax-SGPU"], vendors["Metax-GPU"]
    two = (_ask(1), _ask(2))
    assert ascend.score_bound(two, pod_annotations={}, policy="binpack") == 2 * NETWORK_WEIGHT
    assert ascend.score_bound(two, pod_annotations={}, policy="spread") is None  # per node
    whole = (_ask(3, 100, "Metax-SGPU"),)
    shared = (_ask(3, 50, "Metax-SGPU"),)
    # 3 whole devices: at most 3 same-zone pairs of 10, each counted 11 times.
    assert sgpu.score_bound(whole, pod_annotations={}, policy="binpack") == 330 * SCORE_WEIGHT
    assert sgpu.score_bound(whole, pod_annotations={}, policy="spread") == -330 * SCORE_WEIGHT
    assert sgpu.score_bound(shared, pod_annotations={}, policy="binpack") == 0
    online = {"metax-tech.com/sgpu-app-class": "online"}
    assert sgpu.score_bound(whole, pod_annotations=online, policy="binpack") == 0  # penalties only
    assert gpu.score_bound((_ask(1, key="Metax-GPU"),), pod_annotations={}, policy="binpack") is None
    losses = {"metax-tech.com/gpu.topology.losses": '{"1": 0, "2": 40}'}
    assert gpu.score_bound((_ask(1, key="Metax-GPU"), _ask(1, key="Metax-GPU")), pod_annotations={},
                           policy="binpack", annotations=losses) == 1960.0
    assert vendors["NVIDIA"].score_bound((_ask(1, key="NVIDIA"),), pod_annotations={}, policy="spread") == 0.0


counts = st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=2)


@settings(max_examples=200, deadline=None)
@given(fleet=st.lists(node_spec, min_size=len(NODES), max_size=len(NODES)),
       usage=st.lists(pod_spec, max_size=3), nums=st.tuples(counts, counts),
       other=st.tuples(st.integers(0, 65536), st.integers(0, 100)))
def test_equal_bound_keys_bound_alike_on_every_node(
    fleet: list[dict[str, Any]], usage: list[dict[str, Any]], nums: tuple[list[int], list[int]],
    other: tuple[int, int],
) -> None:
    """`score_bound_key` says when two pods' per-node bounds are equal (the engine then shares
    their ranking): two asks with other counts, memory or cores; equal key, equal bounds. And
    `node_score_bound` (what the engine calls per node) is `score_bound` on the node."""
    state = SchedulerState(_vendors())
    for name, node in zip(NODES, fleet, strict=True):
        _register(state, name, node)
    for i, earlier in enumerate(usage):
        obj = _pod(f"u{i}", earlier)
        placed = decide(obj, NODES, state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
        if isinstance(placed, Chosen):
            state.reserve(obj, placed)
    mem, cores = other
    for key in ("Ascend910B3", "Metax-GPU"):
        vendor = state.vendors[key]
        a = tuple(_ask(n, key=key) for n in nums[0])
        b = tuple(ContainerDeviceRequest(nums=n, type=key, memreq=mem, mem_percentage_req=101, coresreq=cores)
                  for n in nums[1])
        for policy in POLICIES:
            for x in (a, b):  # the per-node form is the same bound
                here = vendor.node_score_bound(x, pod_annotations={}, policy=policy)
                for name in NODES:
                    view = state.ledger.view(name)
                    assert view is not None
                    assert here(view.annotations, view.devices, view.usage) == vendor.score_bound(
                        x, pod_annotations={}, policy=policy, annotations=view.annotations,
                        devices=view.devices, previous=view.usage), (key, policy, name)
            keys = [vendor.score_bound_key(x, pod_annotations={}, policy=policy) for x in (a, b)]
            if keys[0] is None or keys[0] != keys[1]:
                event(f"{key}: keys differ")
                continue
            event(f"{key}: equal keys")
            for name in NODES:
                view = state.ledger.view(name)
                assert view is not None
                bounds = [vendor.score_bound(x, pod_annotations={}, policy=policy,
                                             annotations=view.annotations, devices=view.devices,
                                             previous=view.usage) for x in (a, b)]
                assert bounds[0] == bounds[1], (key, policy, name, bounds)
