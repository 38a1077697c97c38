"""best-fit across nodes (`engine.placement`): the demand table, the cost, and the decision.

Invariants: a best-fit decision fits exactly when a binpack one does (the choice never changes
whether a pod fits), never over-commits a device, and takes the only fitting node when there is
one. HAMi's policies neither read nor feed the demand table.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import container_requests, device, device_request, pod
from tests.builders import gpu_container as ctr
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, Decision, NoFit, decide
from vgpu_scheduler.engine.nodeview import NodeView
from vgpu_scheduler.engine.placement import DemandTable, FleetRoom, instances, node_room
from vgpu_scheduler.engine.policy import asked_memory, leftover_after
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import ContainerDeviceRequest, DeviceInfo, DeviceUsage

VENDORS = build()
NOW = 1764400000
BIG, SMALL = 80_000, 32_000


def _state(**nodes: list[int]) -> SchedulerState:
    """Nodes by name -> the memory (MiB) of each of their GPUs."""
    s = SchedulerState(VENDORS)
    for name, mems in nodes.items():
        s.set_node_devices(name, [device(f"{name}-{i}", index=i, devmem=m) for i, m in enumerate(mems)])
    return s


def _pod(name: str, mem: int, cores: int, policy: str = "best-fit") -> dict[str, Any]:
    return pod(name, namespace="team", uid=f"uid-{name}", phase="Pending",
               annotations={"hami.io/gpu-scheduler-policy": policy}, containers=[ctr(mem=mem, cores=cores)])


def _place(s: SchedulerState, p: dict[str, Any], node_policy: str = "binpack", **kw: Any) -> Decision:
    d = decide(p, sorted(s.ledger.node_names()), s, default_node_policy=node_policy,
               default_gpu_policy="spread", now=NOW, **kw)
    if isinstance(d, Chosen):
        s.reserve(p, d)
    return d


def _node(d: Decision) -> str:
    assert isinstance(d, Chosen), d
    return d.node


def test_the_demand_table_keeps_the_last_requests_one_instance_each() -> None:
    table = DemandTable(window=3)
    table.observe([container_requests(2, mem=100, cores=10)])
    table.observe([container_requests(mem=200), container_requests(mem=100, cores=10)])
    assert table.shares() == [(device_request(mem=100, cores=10), 2 / 3), (device_request(mem=200), 1 / 3)]
    table.observe([container_requests(mem=300)])  # the oldest drops out
    assert table.shares() == [(device_request(mem=100, cores=10), 1 / 3), (device_request(mem=200), 1 / 3),
                              (device_request(mem=300), 1 / 3)]
    table.observe([container_requests(mem=300), container_requests(mem=300)])
    assert table.shares() == [(device_request(mem=300), 1.0)]


def test_instances_follow_fits_rules() -> None:
    dev = device("g", devmem=BIG, count=3)
    assert instances(dev, DeviceUsage(), device_request(mem=40_000, cores=50)) == 2
    assert instances(dev, DeviceUsage(1, 30_000, 0), device_request(mem=20_000, cores=10)) == 2  # shares
    assert instances(dev, DeviceUsage(0, 0, 60), device_request(mem=1000, cores=50)) == 0  # cores
    assert instances(dev, DeviceUsage(), device_request(mem=1, cores=100)) == 1  # a whole card


def _instances_one_by_one(dev: DeviceInfo, use: DeviceUsage, shape: ContainerDeviceRequest) -> int:
    """The reference: add instances while fit's per-device rules (`leftover_after`) accept one."""
    n = 0
    while n < 64 and leftover_after(dev, use, shape) is not None:
        n += 1
        mem = asked_memory(dev, shape)
        use = DeviceUsage(use.used + 1, use.usedmem + mem, use.usedcores + shape.coresreq)
    return n


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(0, 12), devmem=st.sampled_from([0, SMALL, BIG]),
    devcore=st.sampled_from([0, 50, 100]), used=st.integers(0, 12), usedmem=st.integers(0, BIG),
    usedcores=st.integers(0, 100), mem=st.integers(0, 50_000), pct=st.sampled_from([-1, 0, 30, 100]),
    cores=st.sampled_from([0, 10, 25, 100]),
)
def test_instances_counts_as_adding_them_one_by_one(
    count: int, devmem: int, devcore: int, used: int, usedmem: int, usedcores: int, mem: int, pct: int,
    cores: int,
) -> None:
    dev = device("g", devmem=devmem, count=count, devcore=devcore)
    use = DeviceUsage(used, usedmem, usedcores)
    shape = device_request(mem=mem, cores=cores) if pct < 0 else device_request(pct=pct, cores=cores)
    assert instances(dev, use, shape) == _instances_one_by_one(dev, use, shape)


def test_node_room_counts_every_device_of_the_shapes_vendor() -> None:
    view = NodeView("b", [device("b-0", devmem=SMALL), device("b-1", index=1, devmem=BIG)],
                    [DeviceUsage(), DeviceUsage(1, 50_000, 50)])
    half, quarter = device_request(mem=40_000, cores=50), device_request(mem=20_000, cores=25)
    # half: none on b-0, none on b-1 (30 GB left); quarter: 1 + 1; no Ascend device.
    assert [node_room(view, shape) for shape in (half, quarter)] == [0, 2]
    assert node_room(view, device_request(mem=1000, type="Ascend910B")) == 0


def test_fleet_room_follows_the_ledger_as_nodes_and_shapes_change() -> None:
    s = _state(a=[BIG], b=[SMALL, BIG])
    half, quarter = device_request(mem=40_000, cores=50), device_request(mem=20_000, cores=25)
    room = FleetRoom()

    def fresh(*shapes: ContainerDeviceRequest) -> list[int]:
        return FleetRoom().of(s.ledger, shapes)

    assert room.of(s.ledger, [half, quarter]) == fresh(half, quarter) == [4, 9]
    _place(s, _pod("half", 40_000, 50, policy="binpack"))
    assert room.of(s.ledger, [half, quarter]) == fresh(half, quarter) == [3, 7]
    notebook = device_request(mem=4000, cores=10)  # a new shape counts every node
    assert room.of(s.ledger, [quarter, notebook]) == fresh(quarter, notebook) == [7, 23]
    s.remove_node("a")
    s.set_node_devices("c", [device("c-0", devmem=SMALL)])
    assert room.of(s.ledger, [half, quarter, notebook]) == fresh(half, quarter, notebook)
    s.release("uid-half")
    assert room.of(s.ledger, [half, quarter, notebook]) == fresh(half, quarter, notebook)


def test_a_small_slice_keeps_off_the_large_card_when_large_slices_usually_come() -> None:
    s = _state(big=[BIG], small=[SMALL])
    assert _node(_place(s, _pod("half", 40_000, 50))) == "big"  # fed the table a large shape
    # On "big" the quarter would leave 25 % (the tightest fit) but take the second half slice's room.
    assert _node(_place(s, _pod("quarter", 20_000, 25))) == "small"
    assert _node(_place(s, _pod("half-2", 40_000, 50))) == "big"


def test_a_notebook_keeps_off_the_last_quarter_room_when_quarters_usually_come() -> None:
    # "big" holds a half and a quarter, "small" a quarter: a notebook fits the 20 GB left on "big"
    # more tightly (20 % left against 25 % of memory on "small") but would take the fleet's only
    # room for another quarter; "small" has no quarter room to lose.
    s = _state(big=[BIG], small=[SMALL])
    for name, mem, cores in (("half", 40_000, 50), ("q1", 20_000, 25), ("q2", 20_000, 25)):
        _place(s, _pod(name, mem, cores))
    assert [_used_memory(s, n) for n in ("big", "small")] == [[60_000], [20_000]]
    assert _node(_place(s, _pod("notebook", 4000, 10))) == "small"


def _used_memory(s: SchedulerState, node: str) -> list[int]:
    view = s.ledger.view(node)
    assert view is not None
    return [use.usedmem for use in view.usage]


def test_without_large_demand_the_tightest_fit_wins() -> None:
    s = _state(big=[BIG], small=[SMALL])
    # A half slice placed by binpack: not best-fit, so the table stays empty.
    assert _node(_place(s, _pod("half", 40_000, 50, policy="binpack"))) == "big"
    assert s.demand.shares() == []
    assert _node(_place(s, _pod("quarter", 20_000, 25))) == "big"  # leaves (25 %, 25 %), "small" 75 %


@pytest.mark.parametrize(("node_policy", "want"), [("binpack", "a"), ("spread", "b")])
def test_equal_costs_go_to_the_node_policy(node_policy: str, want: str) -> None:
    s = _state(a=[BIG, BIG], b=[BIG, BIG])
    # "a" is the more used node, but its used card cannot take the probe: on either node the probe
    # would take an empty card and leave the same fraction.
    assert _node(_place(s, _pod("first", 79_500, 10, policy="binpack"), node_policy="binpack")) == "a"
    assert _node(_place(s, _pod("probe", 1000, 0), node_policy=node_policy)) == want


def test_a_dry_run_does_not_feed_the_table() -> None:
    s = _state(big=[BIG])
    d = decide(_pod("p", 40_000, 50), ["big"], s, default_node_policy="binpack", default_gpu_policy="spread",
               now=NOW, observe=False)
    assert isinstance(d, Chosen)
    assert s.demand.shares() == []


@pytest.mark.parametrize("gpu_policy", ["binpack", "spread"])
def test_hami_policies_do_not_feed_the_table(gpu_policy: str) -> None:
    s = _state(big=[BIG])
    _place(s, _pod("p", 1000, 10, policy=gpu_policy))
    assert s.demand.shares() == []


FITTED: list[int] = []
usage_st = st.tuples(st.integers(0, 10), st.integers(0, BIG), st.integers(0, 100))


@settings(max_examples=120, deadline=None)
@given(
    nodes=st.lists(st.lists(st.tuples(st.sampled_from([SMALL, BIG]), usage_st), min_size=1, max_size=3),
                   min_size=1, max_size=4),
    mem=st.integers(1, 50_000),
    cores=st.integers(0, 100),
    nums=st.integers(1, 2),
    seen=st.lists(st.tuples(st.integers(1, 60_000), st.integers(0, 100)), max_size=4),
)
def test_fits_as_binpack_does_never_over_commits_and_takes_the_only_fitting_node(
    nodes: list[list[tuple[int, tuple[int, int, int]]]],
    mem: int,
    cores: int,
    nums: int,
    seen: list[tuple[int, int]],
) -> None:
    def state() -> SchedulerState:
        s = SchedulerState(VENDORS)
        for n, devs in enumerate(nodes):
            name = f"n{n}"
            gpus = [device(f"{name}-{i}", index=i, devmem=m) for i, (m, _) in enumerate(devs)]
            s.set_node_devices(name, gpus)
            view = s.ledger.view(name)
            assert view is not None
            for i, (m, (used, usedmem, usedcores)) in enumerate(devs):
                view.usage[i] = DeviceUsage(used, min(usedmem, m), usedcores)
        for m, c in seen:
            s.demand.observe([container_requests(mem=m, cores=c)])
        return s

    names = [f"n{n}" for n in range(len(nodes))]
    p = pod("p", namespace="team", uid="uid-p", phase="Pending",
            annotations={"hami.io/gpu-scheduler-policy": "best-fit"},
            containers=[ctr(gpus=nums, mem=mem, cores=cores)])
    ours_state = state()
    ours = decide(p, names, ours_state, default_node_policy="binpack", default_gpu_policy="spread", now=NOW)
    theirs = decide(p, names, state(), default_node_policy="binpack", default_gpu_policy="binpack", now=NOW)
    assert isinstance(ours, Chosen) == isinstance(theirs, Chosen)
    if not isinstance(ours, Chosen):
        assert isinstance(ours, NoFit) and isinstance(theirs, NoFit)
        return
    assert isinstance(theirs, Chosen)
    if len(ours.scores) == 1:  # every candidate was fitted: this is the only node that fits
        assert ours.node == theirs.node
    FITTED.append(len(ours.scores))
    ours_state.reserve(p, ours)
    view = ours_state.ledger.view(ours.node)
    assert view is not None
    for dev, use in zip(view.devices, view.usage, strict=True):
        assert _within(dev, use)


def _within(dev: DeviceInfo, use: DeviceUsage) -> bool:
    return use.used <= dev.count and use.usedcores <= dev.devcore and (
        use.usedmem <= dev.devmem or use.used == 0
    )


def test_the_property_test_saw_single_and_several_fitting_nodes() -> None:
    FITTED.clear()
    test_fits_as_binpack_does_never_over_commits_and_takes_the_only_fitting_node()
    assert 1 in FITTED and any(n > 1 for n in FITTED)
