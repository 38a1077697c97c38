"""§5.7: the FilteringFailed event texts when no node fits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import device, gpu_container, pod
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import NODE_UNREGISTERED
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import DeviceInfo
from vgpu_scheduler.scheduler.extender import (
    EVALUATE_ALL_LIMIT,
    Extender,
    Policies,
    failed_by_type,
    filtering_failed_messages,
)


@pytest.mark.parametrize(
    ("failed", "expected"),
    [
        pytest.param(
            {"n1": "2/2 CardInsufficientMemory", "n2": "2/2 CardInsufficientMemory"},
            ["2 nodes CardInsufficientMemory(n1,n2)", "no available node, 2 nodes do not meet"],
            id="one-reason-type",
        ),
        pytest.param(
            {
                "n2": "1/2 CardInsufficientMemory, 1/2 CardNotHealth",
                "n1": "2/2 CardInsufficientMemory",
                "n3": "1/4 AllocatedCardsInsufficientRequest, 3/4 ResourceQuotaNotFit",
            },
            [
                "1 nodes AllocatedCardsInsufficientRequest(n3)",
                "2 nodes CardInsufficientMemory(n1,n2)",
                "1 nodes CardNotHealth(n2)",
                "1 nodes ResourceQuotaNotFit(n3)",
                "no available node, 3 nodes do not meet",
            ],
            id="grouped-per-reason-type-not-per-string",
        ),
        pytest.param(
            {"n1": "NodeInsufficientDevice", "gone": "node unregistered"},
            ["1 nodes NodeInsufficientDevice(n1)", "no available node, 2 nodes do not meet"],
            id="unregistered-has-no-reason-type",
        ),
    ],
)
def test_filtering_failed_messages(failed: dict[str, str], expected: list[str]) -> None:
    assert filtering_failed_messages(failed) == expected


# --- the grouping per reason text, against HAMi's per-node grouping ------------------------------


def reference_messages(failed: dict[str, str]) -> list[str]:
    """The texts as first written: every node grouped under each type its reason names, each
    type's names sorted (`failed_by_type`, then one text per type in type order)."""
    by_type = failed_by_type(failed)
    out = [f"{len(nodes)} nodes {name}({','.join(sorted(nodes))})" for name, nodes in sorted(by_type.items())]
    out.append(f"no available node, {len(failed)} nodes do not meet")
    return out


REASON_TEXTS = [
    "2/2 CardInsufficientMemory",
    "1/2 CardInsufficientMemory, 1/2 CardNotHealth",
    "1/4 AllocatedCardsInsufficientRequest, 3/4 ResourceQuotaNotFit",
    "8/8 CardTimeSlicingExhausted",
    "NodeInsufficientDevice",
    NODE_UNREGISTERED,
    "calcScore failed: free-form error",
]


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text("abcn0-", min_size=1, max_size=4), st.sampled_from(REASON_TEXTS), max_size=40))
def test_grouping_per_text_gives_the_per_node_texts(failed: dict[str, str]) -> None:
    assert filtering_failed_messages(failed) == reference_messages(failed)


# --- an extender answering a pod that fits nowhere, retried --------------------------------------

VENDORS = build()
NODES = [f"node-{i:03d}" for i in range(EVALUATE_ALL_LIMIT + 16)]  # past the evaluate-all limit


class Events:
    def __init__(self) -> None:
        self.texts: list[str] = []

    def record(self, pod: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        assert (type_, reason) == ("Warning", "FilteringFailed")
        self.texts.append(message)


def gpus(name: str) -> list[DeviceInfo]:
    return [device(f"GPU-{name}-{i}", index=i, devmem=8000) for i in range(2)]


def no_fit_extender(state: SchedulerState, events: Events, p: dict[str, Any]) -> Extender:
    synced = asyncio.Event()
    synced.set()
    return Extender(
        state=state, api=cast(Any, None), locker=cast(Any, None), events=events, policies=Policies(),
        synced=synced, cached_pod=lambda namespace, name: p, cached_node=lambda name: None,
        lock_aware=False, requeue_nudges=False,
    )


def test_a_retried_no_fit_pod_records_the_texts_of_its_answer() -> None:
    state = SchedulerState(VENDORS)
    for name in NODES:
        state.set_node_devices(name, gpus(name))
    p = pod("big", namespace="team", uid="uid-big", containers=[gpu_container(mem=9000)], phase="Pending")
    events = Events()
    extender = no_fit_extender(state, events, p)

    async def filter_once(names: list[str]) -> tuple[dict[str, str], list[str]]:
        events.texts.clear()
        answer = json.loads(await extender.filter(json.dumps({"Pod": p, "NodeNames": names}).encode()))
        return answer["FailedNodes"], list(events.texts)

    async def main() -> None:
        # First with a name the ledger does not know, then the retries kube-scheduler makes.
        failed, texts = await filter_once([*NODES, "ghost"])
        assert failed["ghost"] == NODE_UNREGISTERED and texts == reference_messages(failed)
        answers = [await filter_once(NODES) for _ in range(3)]
        for failed, texts in answers:
            assert len(failed) == len(NODES) and texts == reference_messages(failed)
        assert all(a is b for a, b in zip(answers[1][1], answers[2][1], strict=True))  # kept texts
        # A node changes its reason: new texts, those of the new answer.
        node = NODES[5]
        state.set_node_devices(node, gpus(node), cordoned=frozenset(d.id for d in gpus(node)))
        failed, texts = await filter_once(NODES)
        assert failed[node] != answers[0][0][node] and texts == reference_messages(failed)
        assert texts != answers[0][1]

    asyncio.run(main())
