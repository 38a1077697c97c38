"""The summary-level verdict of a node no usable device of which has the memory asked
(`Vendor.memory_shortfall`, used by `decide` for the nodes its walk found hopeless): over random
nodes (health, cordons, slots, memory used) and requests, every decision equals the one made with
the per-device judge alone, reasons and their order included."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.builders import assigned_annotations, container, device, gpu_container
from tests.builders import pod as pod_object
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine import walk_first_fit
from vgpu_scheduler.engine.decide import Decision, NoFit, decide
from vgpu_scheduler.engine.state import SchedulerState

VENDORS = build()

node_st = st.lists(  # per device: (healthy, slots, devmem, memory used, pods on it)
    st.tuples(st.sampled_from([True, True, True, False]), st.integers(1, 3), st.sampled_from([8000, 16000]),
              st.integers(0, 16000), st.sampled_from([0, 0, 1, 2, 3])),
    min_size=1, max_size=4,
)


def build_state(nodes: list[list[tuple[bool, int, int, int, int]]], cordoned: list[bool]) -> SchedulerState:
    state = SchedulerState(VENDORS)
    for n, (devs, cordon) in enumerate(zip(nodes, cordoned, strict=True)):
        name = f"n{n}"
        infos = [device(f"{name}-g{i}", index=i, count=count, devmem=mem, health=healthy)
                 for i, (healthy, count, mem, _, _) in enumerate(devs)]
        state.set_node_devices(name, infos, frozenset({infos[0].id}) if cordon else frozenset())
        for i, (_, _, mem, used, pods) in enumerate(devs):
            for k in range(pods):
                uid = f"{name}-g{i}-p{k}"
                share = min(used, mem) // max(pods, 1)
                state.on_pod(pod_object(uid, namespace="team", uid=uid, phase="Running",
                    annotations=assigned_annotations(name, f"{name}-g{i},NVIDIA,{share},0:;"),
                    containers=[container("c")]))
    return state


def pending(mem: int, gpus: int) -> dict[str, Any]:
    return pod_object("p", namespace="team", uid="uid-p", phase="Pending",
                      containers=[gpu_container("c", gpus=gpus, mem=mem)])


def count_summary_verdicts(mp: pytest.MonkeyPatch) -> list[str]:
    """The reasons decide takes from node summaries from now on (the list grows)."""
    calls: list[str] = []
    real = walk_first_fit._short_of_memory

    def counted(*args: Any) -> str | None:
        reason = real(*args)
        if reason is not None:
            calls.append(reason)
        return reason

    mp.setattr(walk_first_fit, "_short_of_memory", counted)
    return calls


def run(pod: dict[str, Any], state: SchedulerState, names: list[str]) -> Decision:
    return decide(pod, names, state, default_node_policy="binpack", default_gpu_policy="spread", now=0)


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.lists(node_st, min_size=1, max_size=6),
    cordons=st.lists(st.sampled_from([False, False, False, True]), min_size=6, max_size=6),
    mem=st.sampled_from([1000, 7000, 9000, 15000, 17000, 10**6]),
    gpus=st.integers(1, 3),
)
def test_the_summary_verdict_is_the_judges(
    nodes: list[list[tuple[bool, int, int, int, int]]], cordons: list[bool], mem: int, gpus: int
) -> None:
    names = [f"n{n}" for n in range(len(nodes))]
    with pytest.MonkeyPatch.context() as mp:
        calls = count_summary_verdicts(mp)
        fast = run(pending(mem, gpus), build_state(nodes, cordons[: len(nodes)]), names)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(walk_first_fit, "_short_of_memory", lambda *args: None)
        slow = run(pending(mem, gpus), build_state(nodes, cordons[: len(nodes)]), names)
    event(f"summary verdicts: {bool(calls)}")
    assert fast == slow
    if isinstance(fast, NoFit) and isinstance(slow, NoFit):
        assert list(fast.failed.items()) == list(slow.failed.items())


def test_a_pod_asking_more_memory_than_any_device_has_free_is_judged_from_summaries() -> None:
    nodes = [[(True, 4, 8000, 6000, 2), (True, 4, 8000, 0, 0)]] * 3
    with pytest.MonkeyPatch.context() as mp:
        calls = count_summary_verdicts(mp)
        answer = run(pending(9000, 1), build_state(nodes, [False] * 3), ["n0", "n1", "n2"])
    assert calls and len(calls) == 3
    assert isinstance(answer, NoFit)
    assert answer.failed == dict.fromkeys(["n0", "n1", "n2"], calls[0])
    assert "CardInsufficientMemory" in calls[0]


usable_node_st = st.lists(  # every device healthy with a free slot: only the memory left varies
    st.tuples(st.just(True), st.just(4), st.sampled_from([8000, 16000]), st.integers(0, 16000),
              st.integers(0, 3)),
    min_size=1, max_size=4,
)


@settings(max_examples=100, deadline=None)
@given(nodes=st.lists(usable_node_st, min_size=1, max_size=6),
       mem=st.sampled_from([7000, 9000, 15000, 17000]), gpus=st.integers(1, 3))
def test_the_summary_verdict_on_usable_devices(
    nodes: list[list[tuple[bool, int, int, int, int]]], mem: int, gpus: int
) -> None:
    test_the_summary_verdict_is_the_judges.hypothesis.inner_test(  # type: ignore[attr-defined]
        nodes=nodes, cordons=[False] * 6, mem=mem, gpus=gpus
    )
