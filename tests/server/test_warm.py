"""The ledger warmer (server/warm.py): which nodes it fills, and that filling changes no answer."""

from __future__ import annotations

import asyncio
import copy
from functools import partial
from typing import Any

import pytest

from tests.builders import device, gpu_container, grant, pod, pod_allocation
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine import ledger as ledger_module
from vgpu_scheduler.engine import nodeview
from vgpu_scheduler.engine.decide import Decision, NoFit, decide
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.scheduler.extender import encode_no_fit
from vgpu_scheduler.server import warm
from vgpu_scheduler.server.warm import LedgerWarmer

VENDORS = build()
NOW = 1764400000
NODES = [f"n{i}" for i in range(10)]
gpu = partial(device, devmem=8000, count=4)


def fleet() -> SchedulerState:
    state = SchedulerState(VENDORS)
    for i, name in enumerate(NODES):
        state.set_node_devices(name, [gpu(f"GPU-{name}-0"), gpu(f"GPU-{name}-1", index=1)])
        # Some usage, different per node, so summaries and reasons differ.
        grants = [grant(f"GPU-{name}-0", usedmem=700 * i, usedcores=0)]
        state.ledger.upsert_pod(pod_allocation(f"uid-{name}", name, grants, namespace="team"))
    return state


def warmer_of(state: SchedulerState) -> LedgerWarmer:
    return LedgerWarmer(state.ledger, VENDORS.keys)


def asking(mem: int, name: str = "p") -> dict[str, Any]:
    return pod(name, namespace="team", uid=f"uid-{name}", containers=[gpu_container(mem=mem)],
               phase="Pending")


def run(p: dict[str, Any], state: SchedulerState) -> Decision:
    return decide(p, NODES, state, default_node_policy="binpack", default_gpu_policy="spread", now=NOW)


@pytest.fixture
def summaries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The nodes whose summary is computed, in order."""
    computed: list[str] = []
    original = ledger_module._Node.compute_summary

    def counting(self: Any) -> Any:
        computed.append(self.view.name)
        return original(self)

    monkeypatch.setattr(ledger_module._Node, "compute_summary", counting)
    return computed


@pytest.fixture
def positions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The vendors whose device positions are computed (once per node and vendor)."""
    computed: list[str] = []
    original = nodeview.vendor_positions

    def counting(devices: Any, vendor: str) -> list[int]:
        computed.append(vendor)
        return original(devices, vendor)

    monkeypatch.setattr(nodeview, "vendor_positions", counting)
    return computed


def test_first_pass_fills_every_node_and_a_decision_then_computes_nothing(
    summaries: list[str], positions: list[str]
) -> None:
    state = fleet()
    warmer = warmer_of(state)
    asyncio.run(warmer.warm_pending())
    assert sorted(summaries) == NODES
    assert positions == ["NVIDIA"] * len(NODES)  # only the vendors a node has
    summaries.clear()
    positions.clear()
    assert isinstance(run(asking(mem=9000), state), NoFit)  # every node evaluated
    assert summaries == [] and positions == []


def test_later_passes_fill_only_the_nodes_changed_since(summaries: list[str]) -> None:
    state = fleet()
    warmer = warmer_of(state)
    asyncio.run(warmer.warm_pending())
    summaries.clear()
    asyncio.run(warmer.warm_pending())
    assert summaries == []  # nothing changed
    for uid in ("uid-new", "uid-new2"):
        state.ledger.upsert_pod(pod_allocation(uid, "n3", [grant("GPU-n3-1", usedmem=100)], namespace="team"))
    state.remove_node("n5")
    asyncio.run(warmer.warm_pending())
    assert summaries == ["n3"]  # once, however often it changed; the removed node skipped


def test_a_pass_yields_between_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warm, "SLICE_NODES", 3)
    state = fleet()
    warmer = warmer_of(state)
    seen: list[int] = []

    async def main() -> None:
        async def watch() -> None:
            for _ in range(10):
                seen.append(warmer.warmed)
                await asyncio.sleep(0)

        await asyncio.gather(warmer.warm_pending(), watch())

    asyncio.run(main())
    assert 0 < seen[1] < len(NODES)  # the other task ran in the middle of the pass
    assert warmer.warmed == len(NODES)


def test_warm_and_cold_ledgers_give_the_same_answers() -> None:
    cold = fleet()
    warmed = copy.deepcopy(cold)
    asyncio.run(warmer_of(warmed).warm_pending())
    for k, mem in enumerate((9000, 7900, 4000, 500)):
        p = asking(mem, name=f"p{k}")
        a, b = run(p, cold), run(copy.deepcopy(p), warmed)
        if isinstance(a, NoFit):
            assert isinstance(b, NoFit)
            assert encode_no_fit(a) == encode_no_fit(b)  # the FailedNodes answer, byte for byte
        else:
            assert (type(a), getattr(a, "node", None)) == (type(b), getattr(b, "node", None))


def test_run_survives_a_failing_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    state = fleet()
    warmer = warmer_of(state)
    calls: list[list[str]] = []

    def first_fails(names: Any) -> None:
        calls.append(list(names))
        if len(calls) == 1:
            raise RuntimeError("boom")

    monkeypatch.setattr(warmer, "warm", first_fails)

    async def main() -> None:
        task = asyncio.create_task(warmer.run(interval=0))
        for _ in range(5):
            await asyncio.sleep(0)
        state.ledger.upsert_pod(pod_allocation("uid-new", "n1", [grant("GPU-n1-1")], namespace="team"))
        for _ in range(5):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert calls == [NODES, ["n1"]]  # it kept going after the failure
