"""The decision's per-pod setup (`engine.decide._pod_setup`) is kept per pod version: reused while
the pod, its requests object, the GPU policy default and the namespace's quota role stay, redone
on any change, kept only while the pod fits nowhere, and bounded."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import device, gpu_quota, placed_pod, pod
from tests.builders import gpu_container as ctr
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine import decide as decide_module
from vgpu_scheduler.engine.decide import Chosen, Decision, NoFit, decide
from vgpu_scheduler.engine.requests import PodRequestsMemo
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.wire import keys

VENDORS = build()
NOW = 1764400000


def cluster() -> SchedulerState:
    """Two nodes; one device in use, so binpack and spread choose other devices."""
    s = SchedulerState(VENDORS)
    s.set_node_devices("n1", [device("GPU-1", devmem=8000), device("GPU-2", devmem=8000)])
    s.set_node_devices("n2", [device("GPU-3", devmem=8000)])
    s.on_pod(placed_pod("busy", "n1", "GPU-1,NVIDIA,2000,10:;", namespace="other", uid="uid-busy"))
    return s


def pending(rv: str | None, annotations: dict[str, str] | None = None, mem: int = 1000) -> dict[str, Any]:
    return pod("p", namespace="team", uid="uid-p", resource_version=rv, annotations=annotations or {},
               containers=[ctr(mem=mem)], phase="Pending")


def outcome(d: Decision) -> tuple[str, Any]:
    if isinstance(d, Chosen):
        return "chosen", (d.node, d.devices)
    assert isinstance(d, NoFit)
    return "nofit", dict(d.failed)


def run(s: SchedulerState, p: dict[str, Any], memo: PodRequestsMemo, gpu_policy: str = "spread") -> Decision:
    return decide(p, ["n1", "n2"], s, default_node_policy="binpack", default_gpu_policy=gpu_policy,
                  now=NOW, requests=memo(p), walk_failed=False)


def fresh(p: dict[str, Any], gpu_policy: str = "spread", quota: bool = False) -> tuple[str, Any]:
    """The decision of a state that never saw the pod (no setup kept)."""
    s = cluster()
    if quota:
        s.on_quota(gpu_quota(mem=500))
    return outcome(decide(p, ["n1", "n2"], s, default_node_policy="binpack",
                          default_gpu_policy=gpu_policy, now=NOW))


def test_a_pod_filtered_again_reuses_its_setup() -> None:
    s, memo = cluster(), PodRequestsMemo(VENDORS)
    p = pending("1", {keys.USE_GPUUUID: "GPU-9"})
    run(s, p, memo)
    (kept,) = s.verdicts.setups.values()
    run(s, {**p}, memo)  # a copy of the same version, as an informer may hand out
    assert s.verdicts.setups["uid-p"] is kept


def test_no_resource_version_no_setup_kept() -> None:
    s, memo = cluster(), PodRequestsMemo(VENDORS)
    run(s, pending(None), memo)
    assert not s.verdicts.setups


VERSIONS = st.lists(
    st.tuples(
        st.sampled_from([None, "GPU-1", "GPU-3", "GPU-9"]),  # use-gpuuuid
        st.sampled_from([1000, 7000, 9000]),  # memory asked
        st.sampled_from(["spread", "binpack"]),  # default GPU policy of the call
        st.booleans(),  # a quota in the namespace
        st.booleans(),  # a new resourceVersion for this call (else the previous pod again)
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(calls=VERSIONS)
def test_every_decision_is_that_of_a_state_without_kept_setups(
    calls: list[tuple[str | None, int, str, bool, bool]],
) -> None:
    """Pod versions, policies and quota changes in any order: each decision equals the one a
    fresh state makes (no stale setup); a pod keeps one setup while it waits."""
    s, memo = cluster(), PodRequestsMemo(VENDORS)
    rv = 1
    p = pending(str(rv))
    quota_on = False
    for uuid, mem, gpu_policy, quota, new_version in calls:
        if new_version:
            rv += 1
            p = pending(str(rv), {keys.USE_GPUUUID: uuid} if uuid else {}, mem=mem)
        if quota != quota_on:
            if quota:
                s.on_quota(gpu_quota(mem=500))
            else:
                s.on_quota_deleted(gpu_quota(mem=500))
            quota_on = quota
        got = run(s, p, memo, gpu_policy)
        assert outcome(got) == fresh(p, gpu_policy, quota_on)
        s.forget("uid-p")  # not bound: the next call starts from the same usage
        # Kept while it fits nowhere (it waits); dropped once it fits (it is bound).
        assert len(s.verdicts.setups) == (1 if isinstance(got, NoFit) else 0)


def test_setups_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decide_module, "MAX_POD_SETUPS", 5)
    s, memo = cluster(), PodRequestsMemo(VENDORS)
    for i in range(20):
        p = pod(f"p{i}", namespace="team", uid=f"uid-{i}", resource_version="1",
                containers=[ctr(mem=9000)], phase="Pending")
        run(s, p, memo)
        assert len(s.verdicts.setups) <= 5
    assert "uid-19" in s.verdicts.setups


def test_pods_of_one_shape_share_their_groups_fingerprint_object() -> None:
    # Each pod's setup has its own fingerprint; keeping the group's own (an equal object) makes the
    # group lookup of every later decision an identity check rather than an item-by-item compare.
    s, memo = cluster(), PodRequestsMemo(VENDORS)
    big = {"mem": 9000}
    first = pod("a", namespace="team", uid="uid-a", resource_version="1", containers=[ctr(**big)])
    second = pod("b", namespace="team", uid="uid-b", resource_version="1", containers=[ctr(**big)])
    assert isinstance(run(s, first, memo), NoFit) and isinstance(run(s, second, memo), NoFit)
    setup_a, setup_b = s.verdicts.setups["uid-a"], s.verdicts.setups["uid-b"]
    assert isinstance(setup_a, decide_module._PodSetup) and isinstance(setup_b, decide_module._PodSetup)
    assert setup_b.fingerprint is setup_a.fingerprint
