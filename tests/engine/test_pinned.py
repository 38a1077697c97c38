"""A pod pinned to some devices (`nvidia.com/use-gpuuuid`): on a node holding none of them its
verdict reads only the node's inventory (`Vendor.pinned_devices`), so `decide` re-judges such a node
only when the ledger logs an inventory change there (`DeviceLedger.inventory_changed_since`,
`inventory_tick`), and pinned pods of one class share those verdicts (`engine/pinned.py`). Over
random sequences of usage, conflict, cordon, health and registration changes and pods of several
classes, every decision equals the one a state without cached verdicts makes."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import device, gpu_container, grant, pod_allocation
from tests.builders import pod as pod_object
from tests.engine.counting import count_fits
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, Decision, NoFit, decide
from vgpu_scheduler.engine.ledger import DeviceLedger
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import MigAllocation, MigPlacement
from vgpu_scheduler.wire import keys

VENDORS = build()
NODES = ["n0", "n1", "n2", "n3"]
DEVICES = 2
TYPES = ("NVIDIA-A100", "NVIDIA-H100")


def dev_id(node: str, i: int) -> str:
    return f"{node}-g{i}"


def register(state: SchedulerState, node: str, healthy: tuple[bool, ...] = (True,) * DEVICES,
             cordoned: frozenset[str] = frozenset(), annotations: dict[str, str] | None = None) -> None:
    infos = [device(dev_id(node, i), index=i, count=2, devmem=8000, health=h, type=TYPES[i % 2])
             for i, h in enumerate(healthy)]
    state.set_node_devices(node, infos, cordoned, annotations)


def fleet() -> SchedulerState:
    state = SchedulerState(VENDORS)
    for node in NODES:
        register(state, node)
    return state


def pinned(ids: list[str], gpus: int = 1, mem: int = 3000, uid: str = "p", gpu_type: str | None = None
           ) -> dict[str, Any]:
    annotations = {keys.USE_GPUUUID: ",".join(ids)}
    if gpu_type is not None:
        annotations[keys.USE_GPUTYPE] = gpu_type
    return pod_object(uid, namespace="team", uid=uid, phase="Pending", annotations=annotations,
                      containers=[gpu_container("c", gpus=gpus, mem=mem)])


def run(pod: dict[str, Any], state: SchedulerState, names: list[str] = NODES) -> Decision:
    return decide(pod, names, state, default_node_policy="binpack", default_gpu_policy="spread", now=0)


def outcome(d: Decision) -> Any:
    """What the answer says (FailedNodes is encoded sorted: the reasons' order is not part of it)."""
    if isinstance(d, NoFit):
        return ("nofit", sorted(d.failed.items()))
    if isinstance(d, Chosen):
        return ("chosen", d.node, d.devices)
    return d


def place(state: SchedulerState, uid: str, node: str, i: int, mem: int, conflict: bool) -> None:
    """A running pod on device i of `node`; `conflict`: with a MIG placement on that hami-core
    device, which flags it (fails closed, §5.2)."""
    mig = (MigAllocation(0, 0, dev_id(node, i), "1g.10gb", MigPlacement(0, 1)),) if conflict else ()
    state.ledger.upsert_pod(pod_allocation(uid, node, [grant(dev_id(node, i), usedmem=mem)], mig=mig))


# --- the ledger's inventory log ------------------------------------------------------------


def test_usage_is_not_an_inventory_change_but_a_conflict_flag_is() -> None:
    ledger = DeviceLedger()
    for node in ("a", "b"):
        ledger.set_node_devices(node, [device(dev_id(node, 0)), device(dev_id(node, 1), index=1)])
    start = ledger.tick
    ledger.upsert_pod(pod_allocation("u", "a", [grant("a-g0", usedmem=1000)]))
    assert ledger.changed_since(start) == ["a"]
    assert ledger.inventory_changed_since(start) == []
    tick = ledger.tick
    conflict = (MigAllocation(0, 0, "b-g1", "1g.10gb", MigPlacement(0, 1)),)
    ledger.upsert_pod(pod_allocation("m", "b", [grant("b-g1")], mig=conflict))
    assert ledger.inventory_changed_since(tick) == ["b"]
    assert ledger.inventory_tick("b") == ledger.generation("b")
    tick = ledger.tick
    ledger.upsert_pod(pod_allocation("m2", "b", [grant("b-g1")], mig=conflict))  # flag already set
    assert ledger.inventory_changed_since(tick) == []
    ledger.remove_pod("m")
    ledger.remove_pod("m2")  # the flag clears
    assert ledger.inventory_changed_since(tick) == ["b"]


def test_cordon_and_removal_are_inventory_changes_annotations_and_touches_are_not() -> None:
    ledger = DeviceLedger()
    devices = [device("a-g0"), device("a-g1", index=1)]
    ledger.set_node_devices("a", devices)
    ledger.set_node_devices("b", [device("b-g0")])
    tick = ledger.tick
    ledger.set_node_devices("a", devices, annotations={"example.com/k": "v"})
    ledger.touch("b")
    assert ledger.inventory_changed_since(tick) == []
    ledger.set_node_devices("a", devices, frozenset({"a-g0"}))
    ledger.remove_node("a")
    assert ledger.inventory_changed_since(tick) == ["a", "a"]
    assert ledger.inventory_tick("a") == 0
    assert ledger.inventory_changed_since(ledger.tick + 1) is None


def test_holders_follow_registrations() -> None:
    ledger = DeviceLedger()
    ledger.set_node_devices("a", [device("x"), device("y", index=1)])
    ledger.set_node_devices("b", [device("z")])
    assert ledger.holders(frozenset({"x", "z", "absent"})) == {"a", "b"}
    ledger.remove_node("b")
    assert ledger.holders(frozenset({"x", "z"})) == {"a"}
    ledger.set_node_devices("a", [device("w")])
    assert ledger.holders(frozenset({"x", "y"})) == frozenset()
    assert ledger.holders(frozenset({"w"})) == {"a"}


# --- what decide re-judges -----------------------------------------------------------------


def test_a_pinned_pod_re_judges_only_holders_and_inventory_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    state = fleet()
    pod = pinned([dev_id("n0", 0)], mem=9000)  # more than a device has: fits nowhere
    judged = count_fits(monkeypatch)
    assert isinstance(run(pod, state), NoFit)
    assert sorted(judged) == NODES
    judged.clear()
    place(state, "u1", "n2", 0, 1000, conflict=False)  # usage elsewhere
    place(state, "u2", "n0", 1, 1000, conflict=False)  # usage on the holder
    assert isinstance(run(pod, state), NoFit) and judged == ["n0"]
    judged.clear()
    register(state, "n3", cordoned=frozenset({dev_id("n3", 0)}))
    place(state, "u3", "n1", 0, 0, conflict=True)  # a conflict flag is device health
    assert isinstance(run(pod, state), NoFit) and sorted(judged) == ["n1", "n3"]


def test_a_new_walk_reuses_verdicts_of_nodes_whose_inventory_held(monkeypatch: pytest.MonkeyPatch) -> None:
    state = fleet()
    pod = pinned([dev_id("n0", 0)], mem=9000)
    run(pod, state)
    place(state, "u1", "n2", 0, 1000, conflict=False)
    judged = count_fits(monkeypatch)
    fewer = [n for n in NODES if n != "n3"]  # other candidates: no snapshot, a walk
    got = decide(pod, fewer, state, default_node_policy="binpack", default_gpu_policy="spread", now=0)
    assert isinstance(got, NoFit) and sorted(got.failed) == fewer
    assert judged == []


# --- property: the same decisions as without cached verdicts ---------------------------------

node_st = st.sampled_from(NODES)
dev_st = st.integers(0, DEVICES - 1)
op_st = st.one_of(
    st.tuples(st.just("place"), node_st, dev_st, st.sampled_from([1000, 4000, 8000]), st.booleans()),
    st.tuples(st.just("remove"), st.integers(0, 20)),
    st.tuples(st.just("cordon"), node_st, st.booleans()),
    st.tuples(st.just("health"), node_st, dev_st),
    st.tuples(st.just("drop"), node_st),
    st.tuples(st.just("annotate"), node_st, st.integers(0, 3)),
    st.tuples(st.just("touch"), node_st),
    st.tuples(st.just("decide"), st.lists(st.tuples(node_st, dev_st), min_size=1, max_size=2),
              st.integers(1, 3), st.sampled_from([1000, 5000, 9000]), st.sampled_from([None, "A100", "H100"]),
              st.sets(node_st)),
)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(op_st, min_size=1, max_size=25))
def test_every_pinned_decision_is_that_of_a_state_without_cached_verdicts(ops: list[tuple[Any, ...]]) -> None:
    state = fleet()
    placed: list[str] = []
    health = {node: [True] * DEVICES for node in NODES}
    for n, op in enumerate(ops):
        kind = op[0]
        if kind == "place":
            _, node, i, mem, conflict = op
            placed.append(f"u{n}")
            place(state, f"u{n}", node, i, mem, conflict)
        elif kind == "remove" and placed:
            state.ledger.remove_pod(placed.pop(op[1] % len(placed)))
        elif kind == "cordon":
            cordoned = frozenset({dev_id(op[1], 0)}) if op[2] else frozenset()
            register(state, op[1], tuple(health[op[1]]), cordoned)
        elif kind == "health":
            health[op[1]][op[2]] = not health[op[1]][op[2]]
            register(state, op[1], tuple(health[op[1]]))
        elif kind == "drop":
            state.remove_node(op[1])
        elif kind == "annotate":
            register(state, op[1], tuple(health[op[1]]), annotations={"example.com/k": str(op[2])})
        elif kind == "touch":
            state.ledger.touch(op[1])
        elif kind == "decide":
            _, pins, gpus, mem, gpu_type, left_out = op
            ids = [dev_id(node, i) for node, i in pins]
            pod = pinned(ids, gpus, mem, uid=f"p{'-'.join(ids)}{gpus}{mem}{gpu_type}", gpu_type=gpu_type)
            names = [node for node in NODES if node not in left_out]
            reference = copy.deepcopy(state)
            reference.verdicts.clear()
            assert outcome(run(pod, state, names)) == outcome(run(pod, reference, names))
