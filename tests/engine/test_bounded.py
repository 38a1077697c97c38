"""Visiting nodes best bound first (`walk_bounded._decide_bounded`) chooses what evaluating every node does.

Random fleets of NVIDIA, Ascend 910B3, Metax sGPU and Metax GPU nodes (NetworkIDs present, missing
or not numbers; topology annotations with any integers, missing or unreadable; link zones; some
nodes with NVIDIA GPUs next to their NPUs) go through random decisions, reservations, deletions
and re-registrations. Two schedulers receive the same events; one decides with the early exit
(its caches and rankings kept between decisions), the other with `evaluate_all`. Their choices
(node, devices, annotations, score), their reasons when nothing fits, and their ledgers must stay
identical; the scores and reasons the early exit does list must be the evaluated ones.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import vgpu_scheduler.engine.decide as decide_module
from tests.engine.ledger_invariants import assert_group_index
from tests.engine.test_fitcache import _counting_fits, _essence, _pod, _vendors, pod_spec
from vgpu_scheduler.engine.decide import Chosen, NoFit, NoRequest, decide
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import DeviceInfo

NODES = [f"n{i}" for i in range(6)]
DEVICES = 4

network = st.one_of(st.integers(0, 2), st.just("x"), st.none())
"""A device's NetworkID: a number, not a number, or (None) no key at all."""
topology_table = st.one_of(
    st.none(),
    st.just("not json"),
    st.dictionaries(st.sampled_from(["1", "2", "4"]), st.integers(-3000, 3000), max_size=3).map(json.dumps),
)
node_spec = st.one_of(
    st.fixed_dictionaries({"kind": st.just("ascend"), "networks": st.lists(network, min_size=DEVICES,
                           max_size=DEVICES), "gpus": st.booleans()}),
    st.fixed_dictionaries({"kind": st.just("sgpu"), "zones": st.lists(st.integers(0, 2), min_size=DEVICES,
                           max_size=DEVICES), "qos": st.sampled_from(["", "best-effort", "fixed-share"])}),
    st.fixed_dictionaries({"kind": st.just("metax"), "losses": topology_table, "scores": topology_table}),
    st.fixed_dictionaries({"kind": st.just("nvidia")}),
)


def _node_object(name: str, spec: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    kind = spec["kind"]
    if kind == "ascend":
        npus = []
        for i, net in enumerate(spec["networks"]):
            custom = {} if net is None else {"NetworkID": net}
            npus.append({"id": f"{name}-npu{i}", "index": i, "count": 2, "devmem": 32768, "devcore": 20,
                         "type": "Ascend910B3", "health": True, "custominfo": custom})
        capacity = {"huawei.com/Ascend910B3": str(DEVICES)}
        return {"hami.io/node-register-Ascend910B3": json.dumps(npus)}, capacity
    if kind == "sgpu":
        sgpus = [{"uuid": f"{name}-sgpu{i}", "model": "C500", "totalDevCount": 3, "totalCompute": 100,
                  "totalVRam": 16384, "numa": i // 2, "healthy": True, "qosPolicy": spec["qos"],
                  "linkZone": zone} for i, zone in enumerate(spec["zones"])]
        capacity = {"metax-tech.com/sgpu": str(3 * DEVICES)}
        return {"metax-tech.com/node-gpu-devices": json.dumps(sgpus)}, capacity
    if kind == "metax":
        annotations = {key: value for key, value in (("metax-tech.com/gpu.topology.losses", spec["losses"]),
                       ("metax-tech.com/gpu.topology.scores", spec["scores"])) if value is not None}
        return annotations, {"metax-tech.com/gpu": str(DEVICES)}
    return {}, {}


def _register(state: SchedulerState, name: str, spec: dict[str, Any]) -> None:
    annotations, capacity = _node_object(name, spec)
    node = {"metadata": {"name": name, "annotations": annotations},
            "status": {"capacity": capacity, "allocatable": capacity}}
    devices: list[DeviceInfo] = []
    for vendor in state.vendors:
        with contextlib.suppress(ValueError):  # InventoryError: not this vendor's node
            devices.extend(vendor.node_devices(node))
    if spec["kind"] == "nvidia" or spec.get("gpus"):
        devices += [DeviceInfo(id=f"{name}-gpu{i}", index=i, count=3, devmem=16000, devcore=100,
                               type="NVIDIA-A100", numa=i // 2, health=True) for i in range(2)]
    state.set_node_devices(name, devices, annotations=annotations)


PODS = [f"p{i}" for i in range(5)]


class BoundedEqualsAll(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.early = SchedulerState(_vendors())
        self.full = SchedulerState(_vendors())
        self.placed: dict[str, tuple[dict[str, Any], Chosen]] = {}
        self.specs: list[dict[str, Any]] = []
        self.now = 1000
        # The decision's guards ("ruled out but fits", "no longer fits") must never fire.
        self.errors: list[logging.LogRecord] = []
        handler = logging.Handler(logging.ERROR)
        handler.emit = self.errors.append  # type: ignore[method-assign]
        self.handler = handler
        logging.getLogger(decide_module.__name__).addHandler(handler)

    def teardown(self) -> None:
        logging.getLogger(decide_module.__name__).removeHandler(self.handler)

    @initialize(fleet=st.lists(node_spec, min_size=len(NODES), max_size=len(NODES)))
    def register_all(self, fleet: list[dict[str, Any]]) -> None:
        for name, spec in zip(NODES, fleet, strict=True):
            for s in (self.early, self.full):
                _register(s, name, spec)

    @rule(name=st.sampled_from(NODES), spec=node_spec)
    def reregister(self, name: str, spec: dict[str, Any]) -> None:
        for s in (self.early, self.full):
            _register(s, name, spec)

    @rule(losses=topology_table, scores=topology_table)
    def one_topology(self, losses: str | None, scores: str | None) -> None:
        """Every Metax GPU node gets the same topology annotations (same devices: the ledger keeps
        the usage and moves the node's bound class): one bound class, the usual fleet."""
        for name in NODES:
            view = self.early.ledger.view(name)
            if view is not None and any(d.type == "Metax-GPU" for d in view.devices):
                for s in (self.early, self.full):
                    _register(s, name, {"kind": "metax", "losses": losses, "scores": scores})

    @rule(name=st.sampled_from(NODES))
    def remove(self, name: str) -> None:
        """A node leaves: decisions over the same names list it as unregistered."""
        for s in (self.early, self.full):
            s.remove_node(name)

    @rule(name=st.sampled_from(PODS), spec=pod_spec, reserve=st.booleans(),
          busy=st.one_of(st.lists(st.sampled_from(NODES), max_size=3, unique=True), st.just(NODES)),
          some=st.one_of(st.none(), st.lists(st.sampled_from(NODES), min_size=1, max_size=4, unique=True)))
    def decide_pod(self, name: str, spec: dict[str, Any], reserve: bool, busy: list[str],
                   some: list[str] | None) -> None:
        self.specs.append(spec)
        self._decide(name, spec, reserve, busy, some or NODES)

    @precondition(lambda self: bool(self.specs))
    @rule(name=st.sampled_from(PODS), data=st.data(), reserve=st.booleans(),
          busy=st.one_of(st.lists(st.sampled_from(NODES), max_size=2, unique=True), st.just(NODES)))
    def decide_known_shape(self, name: str, data: st.DataObject, reserve: bool, busy: list[str]) -> None:
        """A replica: the early exit starts from its kept ranking."""
        self._decide(name, data.draw(st.sampled_from(self.specs)), reserve, busy, NODES)

    @precondition(lambda self: bool(self.specs))
    @rule(name=st.sampled_from(PODS), data=st.data(), mem=st.sampled_from([None, 8192, 16384, 32768]),
          reserve=st.booleans())
    def decide_sibling_shape(self, name: str, data: st.DataObject, mem: int | None, reserve: bool) -> None:
        """Another NPU memory size of a seen shape: the same bounds on every node, so the early
        exit starts from the ranking by bounds the seen shape keeps."""
        spec = data.draw(st.sampled_from(self.specs))
        asks = [{**ask, "mem": mem} if ask["kind"] == "ascend" else ask for ask in spec["asks"]]
        self.specs.append({**spec, "asks": asks})
        self._decide(name, self.specs[-1], reserve, [], NODES)

    def _decide(self, name: str, spec: dict[str, Any], reserve: bool, busy: list[str],
                candidates: list[str]) -> None:
        self.now += 1
        obj = _pod(name, spec)
        default = ("binpack", "spread")[self.now % 2]
        args: dict[str, Any] = {"default_node_policy": default, "default_gpu_policy": "spread",
                                "now": self.now, "deprioritized": (lambda n: n in busy) if busy else None}
        got = decide(obj, candidates, self.early, **args)
        want = decide(_pod(name, spec), candidates, self.full, evaluate_all=True, **args)
        assert _essence(got) == _essence(want)
        if isinstance(got, Chosen):
            assert isinstance(want, Chosen)
            assert {n: want.scores[n] for n in got.scores} == got.scores
            assert {n: want.failed[n] for n in got.failed} == got.failed
            event(f"chosen, {len(got.scores)} of {len(want.scores)} nodes fitted")
        elif isinstance(got, NoFit):
            event("no fit")
        self.placed.pop(name, None)
        if isinstance(got, NoRequest):
            return
        if isinstance(got, Chosen) and reserve:
            assert isinstance(want, Chosen)
            self.early.reserve(obj, got)
            self.full.reserve(_pod(name, spec), want)
            self.placed[name] = (obj, got)

    @precondition(lambda self: bool(self.placed))
    @rule(data=st.data())
    def pod_deleted(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.placed)))
        obj, _ = self.placed.pop(name)
        for s in (self.early, self.full):
            s.on_pod_deleted(obj)

    @invariant()
    def same_usage(self) -> None:
        assert self.early.ledger.snapshot() == self.full.ledger.snapshot()

    @invariant()
    def classes_follow_annotations(self) -> None:
        """The ledger's bound classes are those of the nodes' current annotations."""
        ledger, vendors = self.early.ledger, self.early.vendors
        want: dict[Any, set[str]] = {}
        for name in ledger.node_names():
            view = ledger.view(name)
            assert view is not None
            want.setdefault(vendors.bound_class(view.annotations), set()).add(name)
        assert ledger.bound_classes() == want
        assert_group_index(ledger)

    @invariant()
    def no_guard_fired(self) -> None:
        assert not self.errors, [r.getMessage() for r in self.errors]


BoundedEqualsAll.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestBoundedEqualsAll = BoundedEqualsAll.TestCase


# -- units --------------------------------------------------------------------------------------


def _fleet(kind: dict[str, Any]) -> SchedulerState:
    s = SchedulerState(_vendors())
    for name in NODES:
        _register(s, name, kind)
    return s


ONE_NPU = {"asks": [{"kind": "ascend", "nums": 1, "mem": 8192}], "node_policy": None, "gpu_policy": None,
           "app_class": None, "qos": None, "topology": None, "label": None}
NETWORKED = {"kind": "ascend", "networks": [0, 0, 1, 1], "gpus": False}


def test_tight_bounds_fit_one_node_per_decision() -> None:
    """Every NPU has a NetworkID, so a one-NPU pod scores exactly its bound everywhere: under either
    policy the first node visited wins and no other is fitted, even as usage spreads."""
    for policy in ("binpack", "spread"):
        early, full = _fleet(NETWORKED), _fleet(NETWORKED)
        for i in range(6):
            obj = _pod(f"p{i}", {**ONE_NPU, "node_policy": policy})
            args: dict[str, Any] = {"default_node_policy": policy, "default_gpu_policy": "spread", "now": i}
            with _counting_fits() as fitted:
                got = decide(obj, NODES, early, **args)
            want = decide(obj, NODES, full, evaluate_all=True, **args)
            assert isinstance(got, Chosen) and isinstance(want, Chosen)
            assert _essence(got) == _essence(want)
            assert fitted == [got.node]
            early.reserve(obj, got)
            full.reserve(obj, want)


def _spread_pod(name: str, nums: int, mem: int | None) -> dict[str, Any]:
    asks = [{"kind": "ascend", "nums": nums, "mem": mem}]
    return _pod(name, {**ONE_NPU, "asks": asks, "node_policy": "spread"})


SPREAD: dict[str, Any] = {"default_node_policy": "spread", "default_gpu_policy": "spread"}


def _count_bounds(monkeypatch: pytest.MonkeyPatch, vendor: Any) -> list[int]:
    """A list that gets one item per node bound by `vendor` from now on (cleared by the caller)."""
    bounded: list[int] = []
    real = vendor.node_score_bound

    def counting(*args: Any, **kwargs: Any) -> Callable[..., float | None]:
        here = real(*args, **kwargs)

        def bound(*node: Any) -> float | None:
            bounded.append(1)
            result: float | None = here(*node)
            return result

        return bound

    monkeypatch.setattr(vendor, "node_score_bound", counting)
    return bounded


def test_shapes_with_equal_bounds_share_their_ranking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two memory sizes of one NPU have equal bounds on every node: the second size's first
    decision starts from the first one's ranking, bounding only the node that changed since."""
    # NPU 0 without NetworkID on odd nodes: ScoreNode is 0 when a fit takes it, so the bound is 0.
    early, full = (_fleet({**NETWORKED, "networks": [None, 0, 1, 1]}) for _ in range(2))
    for s in (early, full):
        for name in NODES[::2]:
            _register(s, name, NETWORKED)
    bounded = _count_bounds(monkeypatch, early.vendors["Ascend910B3"])
    for i, mem in enumerate((8192, 16384, 16384, 32768)):
        obj = _spread_pod(f"p{i}", 1, mem)
        bounded.clear()
        got = decide(obj, NODES, early, now=i, **SPREAD)
        want = decide(obj, NODES, full, evaluate_all=True, now=i, **SPREAD)
        assert isinstance(got, Chosen) and isinstance(want, Chosen)
        assert _essence(got) == _essence(want)
        # Later: only the nodes reserved on since the ranking was last brought up to date.
        assert len(bounded) == len(NODES) if i == 0 else len(bounded) <= min(i, 2), (i, bounded)
        early.reserve(obj, got)
        full.reserve(obj, want)


def test_shapes_with_other_bounds_do_not_share_a_ranking() -> None:
    """One NPU scores 10 on a networked node, two NPUs on two networks 5: a two-NPU pod ranked by
    the one-NPU bounds would stop at the first node it fits (total 10 = the next node's key), and
    miss the node where it scores 5."""
    early, full = SchedulerState(_vendors()), SchedulerState(_vendors())
    for s in (early, full):
        _register(s, "n0", {**NETWORKED, "networks": [0, 0, 0, 0]})
        _register(s, "n1", {**NETWORKED, "networks": [0, 1, 2, 3]})
    nodes = ["n0", "n1"]
    for i, nums in enumerate((1, 2)):
        obj = _spread_pod(f"p{i}", nums, None)
        got = decide(obj, nodes, early, now=i, **SPREAD)
        want = decide(obj, nodes, full, evaluate_all=True, now=i, **SPREAD)
        assert isinstance(got, Chosen) and isinstance(want, Chosen)
        assert _essence(got) == _essence(want)
    assert want.node == "n1" and want.scores == {"n0": 10.0, "n1": 5.0}


def test_a_shared_ranking_follows_the_ledger() -> None:
    """The ranking kept by bounds is re-keyed where the ledger changed: a pod leaving n0 after it
    was made puts n0 first again (spread, every node empty) for the next shape with those bounds."""
    early, full = _fleet(NETWORKED), _fleet(NETWORKED)
    two = _spread_pod("two", 2, None)
    placed = decide(two, ["n0"], early, now=0, **SPREAD)
    assert isinstance(placed, Chosen)
    for s in (early, full):
        s.reserve(two, placed)
    for i, mem in enumerate((8192, 16384)):  # the first one ranks n0 last, and is not placed
        obj = _spread_pod(f"p{i}", 1, mem)
        got = decide(obj, NODES, early, now=i, **SPREAD)
        want = decide(obj, NODES, full, evaluate_all=True, now=i, **SPREAD)
        assert isinstance(got, Chosen) and isinstance(want, Chosen)
        assert _essence(got) == _essence(want)
        assert got.node == ("n1", "n0")[i]
        if i == 0:
            for s in (early, full):
                s.on_pod_deleted(two)


def test_the_same_names_after_a_node_left() -> None:
    """The last bounded decision's candidates are reused for the same names only while none of
    them left: a removed node is reported unregistered, as evaluating every node does."""
    early, full = _fleet(NETWORKED), _fleet(NETWORKED)
    names = list(NODES)
    for i in range(3):
        obj = _spread_pod(f"p{i}", 1, 8192)
        got = decide(obj, names, early, now=i, **SPREAD)
        want = decide(obj, names, full, evaluate_all=True, now=i, **SPREAD)
        assert isinstance(got, Chosen) and isinstance(want, Chosen)
        assert _essence(got) == _essence(want)
        assert got.failed == {"n5": "node unregistered"} if i == 2 else not got.failed
        if i == 1:
            for s in (early, full):
                s.remove_node("n5")


METAX_1 = {"asks": [{"kind": "metax", "nums": 1}], "node_policy": None, "gpu_policy": None, "app_class": None,
           "qos": None, "topology": None, "label": None}
TOPOLOGY = {"kind": "metax", "losses": json.dumps({"1": 0, "2": 5}), "scores": json.dumps({"1": 7})}


def test_one_bound_class_needs_no_bound_per_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Metax GPU nodes of one topology are one bound class: a decision bounds that class once, not
    each node. A node whose annotations change moves to a class of its own: a pod both classes
    bound alike is bounded once per class, and the pod whose bound now differs there (one device:
    the node's loss is lower) chooses it, as evaluating every node does."""
    early, full = _fleet(TOPOLOGY), _fleet(TOPOLOGY)
    bounded = _count_bounds(monkeypatch, early.vendors["Metax-GPU"])
    better = {**TOPOLOGY, "losses": json.dumps({"1": -500, "2": 5})}
    steps = (("binpack", 1, 1), ("binpack", 2, 2), ("spread", 1, 2), ("binpack", 1, None))
    for i, (policy, nums, most) in enumerate(steps):
        if i == 1:
            for s in (early, full):
                _register(s, "n3", better)
        obj = _pod(f"p{i}", {**METAX_1, "asks": [{"kind": "metax", "nums": nums}], "node_policy": policy})
        args: dict[str, Any] = {"default_node_policy": policy, "default_gpu_policy": "spread", "now": i}
        bounded.clear()
        got = decide(obj, NODES, early, **args)
        want = decide(obj, NODES, full, evaluate_all=True, **args)
        assert isinstance(got, Chosen) and isinstance(want, Chosen)
        assert _essence(got) == _essence(want)
        assert most is None or len(bounded) == most, (i, bounded)
        early.reserve(obj, got)
        full.reserve(obj, want)
    assert got.node == "n3"
