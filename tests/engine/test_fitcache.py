"""The fit-score cache (`engine/fitcache.py`) never changes a decision.

A fleet of NVIDIA, Ascend 910B3, Metax sGPU and Metax GPU nodes, whose Ascend and Metax pods are
evaluated on every node (their vendors score nodes). Two schedulers receive the same random events —
decisions (reserved or not), annotation arrivals, deletions, running pods, node re-registrations
with changed annotations and removals; the reference one has its caches emptied before every
decision. Their decisions (node, devices, annotations and score; every reason when nothing fits;
with `evaluate_all` every score and every reason, in order) and their ledgers must stay identical,
while the cached one fits far fewer nodes. (Without `evaluate_all` a decision visits nodes best
bound first and cached outcomes change which it visits, so only the reasons and scores both list
must agree.)
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import vgpu_scheduler.engine.decide as decide_module
from tests.builders import container, pod
from tests.engine.counting import count_fits
from vgpu_scheduler.configfile import default_device_config
from vgpu_scheduler.devices.protocol import VendorFlags, Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoFit, NoRequest, decide
from vgpu_scheduler.engine.fitcache import fit_key, fit_scores_cache
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.engine.verdicts import pod_fingerprint
from vgpu_scheduler.model import DeviceInfo

NS = "team"
DEVICES = 4


def _vendors() -> Vendors:
    """A fresh set per scheduler: vendors keep per-device state (Metax sGPU's pending QoS)."""
    return build(default_device_config(), VendorFlags(enable_ascend=True))


# -- the fleet ----------------------------------------------------------------------------------


def _ascend(name: str, variant: int) -> tuple[dict[str, str], dict[str, str]]:
    npus = []
    for i in range(DEVICES):
        custom: dict[str, Any] = {"NetworkID": (i + variant) // 2}
        if variant == 2 and i == 3:
            custom = {}  # a device without NetworkID: the node scores 0
        npus.append({"id": f"{name}-npu{i}", "index": i, "count": 2, "devmem": 32768, "devcore": 20,
                     "type": "Ascend910B3", "health": True, "custominfo": custom})
    return {"hami.io/node-register-Ascend910B3": json.dumps(npus)}, {"huawei.com/Ascend910B3": str(DEVICES)}


def _sgpu(name: str, variant: int) -> tuple[dict[str, str], dict[str, str]]:
    qos = ("", "best-effort", "fixed-share")[variant % 3]  # "": none yet, any pod may set it
    sgpus = [{"uuid": f"{name}-sgpu{i}", "model": "C500", "totalDevCount": 3, "totalCompute": 100,
              "totalVRam": 16384, "numa": i // 2, "healthy": True, "qosPolicy": qos,
              "linkZone": 1 + (i + variant) // 2} for i in range(DEVICES)]
    return {"metax-tech.com/node-gpu-devices": json.dumps(sgpus)}, {"metax-tech.com/sgpu": str(3 * DEVICES)}


def _metax_gpu(name: str, variant: int) -> tuple[dict[str, str], dict[str, str]]:
    losses = json.dumps({"1": 0, "2": 10 * variant, "4": 100 + variant})
    scores = json.dumps({"1": variant, "2": 5, "4": 50 - variant})
    annotations = {"metax-tech.com/gpu.topology.losses": losses, "metax-tech.com/gpu.topology.scores": scores}
    if variant == 2:
        annotations = {}  # no topology annotations: ScoreNode 0
    return annotations, {"metax-tech.com/gpu": str(DEVICES)}


def _nvidia(name: str, variant: int) -> tuple[dict[str, str], dict[str, str]]:
    return {}, {}


KINDS = {"ascend": _ascend, "sgpu": _sgpu, "metax": _metax_gpu, "nvidia": _nvidia}
NODES = ["ascend-a", "ascend-b", "sgpu-a", "sgpu-b", "metax-a", "metax-b", "nvidia-a"]


def _node_object(name: str, variant: int) -> dict[str, Any]:
    annotations, capacity = KINDS[name.split("-")[0]](name, variant)
    return {"metadata": {"name": name, "annotations": annotations},
            "status": {"capacity": capacity, "allocatable": capacity}}


def _nvidia_devices(name: str) -> list[DeviceInfo]:
    return [DeviceInfo(id=f"{name}-gpu{i}", index=i, count=3, devmem=16000, devcore=100, type="NVIDIA-A100",
                       numa=i // 2, health=True) for i in range(DEVICES)]


def _register(state: SchedulerState, name: str, variant: int) -> None:
    if name.startswith("nvidia"):
        state.set_node_devices(name, _nvidia_devices(name))
        return
    node = _node_object(name, variant)
    devices: list[DeviceInfo] = []
    for vendor in state.vendors:
        with contextlib.suppress(ValueError):  # InventoryError: not this vendor's node
            devices.extend(vendor.node_devices(node))
    state.set_node_devices(name, devices, annotations=node["metadata"]["annotations"])


# -- pods ---------------------------------------------------------------------------------------

ascend_ask = st.fixed_dictionaries({
    "kind": st.just("ascend"), "nums": st.sampled_from([1, 1, 2, 4]),
    "mem": st.sampled_from([None, 8192, 16384, 32768]),
})
sgpu_ask = st.fixed_dictionaries({
    "kind": st.just("sgpu"), "nums": st.sampled_from([1, 1, 2]),
    "cores": st.sampled_from([None, 10, 50, 100]),
    "mem": st.sampled_from([None, 2, 8]),
})
metax_ask = st.fixed_dictionaries({"kind": st.just("metax"), "nums": st.sampled_from([1, 2, 4])})
nvidia_ask = st.fixed_dictionaries({
    "kind": st.just("nvidia"), "nums": st.sampled_from([1, 2]), "mem": st.sampled_from([None, 4000, 12000]),
})
pod_spec = st.fixed_dictionaries({
    "asks": st.lists(st.one_of(ascend_ask, sgpu_ask, metax_ask, nvidia_ask), min_size=1, max_size=2),
    "node_policy": st.sampled_from([None, "binpack", "spread"]),
    "gpu_policy": st.sampled_from([None, "binpack", "spread"]),
    "app_class": st.sampled_from([None, "online", "offline"]),
    "qos": st.sampled_from([None, "best-effort", "fixed-share"]),
    "topology": st.sampled_from([None, "true", "false"]),
    "label": st.sampled_from([None, "x", "y"]),
})


def _limits(ask: dict[str, Any]) -> dict[str, Any]:
    kind = ask["kind"]
    if kind == "ascend":
        out = {"huawei.com/Ascend910B3": ask["nums"]}
        if ask["mem"] is not None:
            out["huawei.com/Ascend910B3-memory"] = ask["mem"]
        return out
    if kind == "sgpu":
        out = {"metax-tech.com/sgpu": ask["nums"]}
        if ask["cores"] is not None:
            out["metax-tech.com/vcore"] = ask["cores"]
        if ask["mem"] is not None:
            out["metax-tech.com/vmemory"] = ask["mem"]
        return out
    if kind == "metax":
        return {"metax-tech.com/gpu": ask["nums"]}
    out = {"nvidia.com/gpu": ask["nums"]}
    if ask["mem"] is not None:
        out["nvidia.com/gpumem"] = ask["mem"]
    return out


def _pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    annotations = {
        key: value for key, value in (
            ("hami.io/node-scheduler-policy", spec["node_policy"]),
            ("hami.io/gpu-scheduler-policy", spec["gpu_policy"]),
            ("metax-tech.com/sgpu-app-class", spec["app_class"]),
            ("metax-tech.com/sgpu-qos-policy", spec["qos"]),
            ("metax-tech.com/sgpu-topology-aware", spec["topology"]),
            ("example.com/label", spec["label"]),
        ) if value is not None
    }
    containers = [container(f"c{i}", limits=_limits(ask)) for i, ask in enumerate(spec["asks"])]
    return pod(name, namespace=NS, uid=f"uid-{name}", annotations=annotations, containers=containers,
               phase="Pending")


def _essence(decision: Any) -> Any:
    """What a decision answers: the node, allocation, annotations and score of a choice (its
    `scores` and `failed` list the nodes visited), or every node's reason when nothing fits."""
    if isinstance(decision, Chosen):
        return (decision.node, decision.devices, decision.mig, decision.annotations, decision.labels,
                decision.score)
    return decision


@contextlib.contextmanager
def _counting_fits() -> Iterator[list[str]]:
    with pytest.MonkeyPatch.context() as mp:
        yield count_fits(mp)


PODS = [f"p{i}" for i in range(5)]


class CachedEqualsUncached(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cached = SchedulerState(_vendors())
        self.reference = SchedulerState(_vendors())
        self.placed: dict[str, tuple[dict[str, Any], Chosen]] = {}
        self.specs: list[dict[str, Any]] = []
        self.now = 1000

    def _both(self) -> tuple[SchedulerState, SchedulerState]:
        return self.cached, self.reference

    @initialize()
    def register_all(self) -> None:
        for name in NODES:
            for s in self._both():
                _register(s, name, 0)

    @rule(name=st.sampled_from(NODES), variant=st.integers(0, 2))
    def reregister(self, name: str, variant: int) -> None:
        for s in self._both():
            _register(s, name, variant)

    @rule(name=st.sampled_from(NODES))
    def remove(self, name: str) -> None:
        for s in self._both():
            s.remove_node(name)

    @rule(name=st.sampled_from(PODS), spec=pod_spec, reserve=st.booleans(), evaluate_all=st.booleans(),
          some=st.one_of(st.none(), st.lists(st.sampled_from(NODES), min_size=1, max_size=3, unique=True)))
    def decide_pod(self, name: str, spec: dict[str, Any], reserve: bool, evaluate_all: bool,
                   some: list[str] | None) -> None:
        """`some`: the candidate nodes (kube-scheduler's filtered list), else all of them."""
        self.specs.append(spec)
        self._decide(name, spec, reserve, evaluate_all, some or NODES)

    @precondition(lambda self: bool(self.specs))
    @rule(name=st.sampled_from(PODS), data=st.data(), reserve=st.booleans(), evaluate_all=st.booleans())
    def decide_known_shape(self, name: str, data: st.DataObject, reserve: bool, evaluate_all: bool) -> None:
        """A pod of a shape seen before (a replica): the case the cache serves."""
        self._decide(name, data.draw(st.sampled_from(self.specs)), reserve, evaluate_all)

    @precondition(lambda self: bool(self.specs))
    @rule(name=st.sampled_from(PODS), data=st.data(), topology=st.sampled_from([None, "true", "false"]),
          node_policy=st.sampled_from([None, "binpack", "spread"]), reserve=st.booleans())
    def decide_near_twin(self, name: str, data: st.DataObject, topology: str | None, node_policy: str | None,
                         reserve: bool) -> None:
        """A known shape whose other annotations differ: same fingerprint, maybe other scores."""
        spec = {**data.draw(st.sampled_from(self.specs)), "topology": topology, "node_policy": node_policy}
        self._decide(name, spec, reserve, False)

    def _decide(self, name: str, spec: dict[str, Any], reserve: bool, evaluate_all: bool,
                candidates: list[str] = NODES) -> None:
        self.now += 1
        obj = _pod(name, spec)
        self.reference.verdicts.clear()
        self.reference.fits.clear()
        # The default node policy alternates: a pod without the annotation follows it.
        default = ("binpack", "spread")[self.now % 2]
        args = {"default_node_policy": default, "default_gpu_policy": "spread", "now": self.now,
                "evaluate_all": evaluate_all}
        with _counting_fits() as fitted:
            got = decide(obj, candidates, self.cached, **args)
        with _counting_fits() as uncached:
            want = decide(obj, candidates, self.reference, **args)
        assert _essence(got) == _essence(want)
        if isinstance(got, NoFit | Chosen):
            assert isinstance(want, NoFit | Chosen)
            # Early exits visit other nodes when outcomes are cached: what both list must agree.
            assert {n: r for n, r in got.failed.items() if n in want.failed} == {
                n: r for n, r in want.failed.items() if n in got.failed}
        if isinstance(got, Chosen):
            assert isinstance(want, Chosen)
            assert {n: s for n, s in got.scores.items() if n in want.scores} == {
                n: s for n, s in want.scores.items() if n in got.scores}
            if evaluate_all:
                assert list(got.scores.items()) == list(want.scores.items())
                assert list(got.failed.items()) == list(want.failed.items())
            event("chosen")
        event("fits reused" if len(fitted) < len(uncached) else "nothing reused")
        self.placed.pop(name, None)
        if isinstance(got, NoRequest):
            return
        if isinstance(got, Chosen) and reserve:
            assert isinstance(want, Chosen)
            self.cached.reserve(obj, got)
            self.reference.reserve(_pod(name, spec), want)
            self.placed[name] = (obj, got)

    @precondition(lambda self: bool(self.placed))
    @rule(data=st.data())
    def annotations_arrive(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.placed)))
        obj, chosen = self.placed[name]
        obj["metadata"]["annotations"].update(chosen.annotations)
        for s in self._both():
            s.on_pod(json.loads(json.dumps(obj)))

    @precondition(lambda self: bool(self.placed))
    @rule(data=st.data())
    def pod_deleted(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.placed)))
        obj, _ = self.placed.pop(name)
        for s in self._both():
            s.on_pod_deleted(obj)

    @invariant()
    def same_usage(self) -> None:
        assert self.cached.ledger.snapshot() == self.reference.ledger.snapshot()


CachedEqualsUncached.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestCachedEqualsUncached = CachedEqualsUncached.TestCase


# -- units --------------------------------------------------------------------------------------


def _fleet() -> SchedulerState:
    s = SchedulerState(_vendors())
    for name in NODES:
        _register(s, name, 0)
    return s


ASCEND_POD = {"asks": [{"kind": "ascend", "nums": 1, "mem": 8192}], "node_policy": None, "gpu_policy": None,
              "app_class": None, "qos": None, "topology": None, "label": None}


def _decide(s: SchedulerState, obj: dict[str, Any], *, evaluate_all: bool = False) -> Any:
    return decide(obj, NODES, s, default_node_policy="binpack", default_gpu_policy="spread", now=1,
                  evaluate_all=evaluate_all)


def test_a_second_identical_pod_fits_only_the_chosen_node_again() -> None:
    s = _fleet()
    with _counting_fits() as first:
        chosen = _decide(s, _pod("a", ASCEND_POD), evaluate_all=True)
    assert isinstance(chosen, Chosen)
    assert sorted(first) == sorted(NODES)
    s.reserve(_pod("a", ASCEND_POD), chosen)
    with _counting_fits() as second:
        again = _decide(s, _pod("b", ASCEND_POD), evaluate_all=True)
    assert isinstance(again, Chosen)
    # The node the first pod took changed; every other outcome comes from the caches, and the
    # winner is fitted once more for the pod's own allocation (unless it is that node).
    assert set(second) <= {chosen.node, again.node}
    assert second.count(chosen.node) == 1


def test_the_fit_key_holds_every_pod_annotation_when_a_vendor_scores() -> None:
    s = _fleet()
    plain = _pod("a", ASCEND_POD)
    labelled = _pod("a", {**ASCEND_POD, "label": "x"})
    keys = []
    for obj in (plain, labelled):
        requests = decide_module.pod_requests(obj, s.vendors)
        ctx = decide_module.pod_fit_context(obj, vendors=s.vendors, n_init=0)
        fingerprint = pod_fingerprint(requests, 0, ctx)
        keys.append(fit_key(fingerprint, node_policy="binpack", annotations=ctx.annotations, scored=True))
        assert fit_key(fingerprint, node_policy="binpack", annotations=ctx.annotations, scored=False) == (
            fingerprint, None, None)
    assert keys[0] != keys[1]


def test_the_chosen_node_gets_a_new_generation_after_its_patch_annotations() -> None:
    s = _fleet()
    before = {n: s.ledger.generation(n) for n in NODES}
    chosen = _decide(s, _pod("a", ASCEND_POD))
    assert isinstance(chosen, Chosen)
    after = {n: s.ledger.generation(n) for n in NODES}
    assert [n for n in NODES if before[n] != after[n]] == [chosen.node]


def test_removing_a_node_drops_its_scores() -> None:
    s = _fleet()
    assert isinstance(_decide(s, _pod("a", ASCEND_POD), evaluate_all=True), Chosen)
    assert len(s.fits) == 2  # the two Ascend nodes fit
    s.remove_node("ascend-a")
    assert len(s.fits) == 1


def test_the_score_cache_is_bounded() -> None:
    cache = fit_scores_cache(max_entries=3)
    for i in range(3):
        group = cache.group(("shape", i), None)
        for node in NODES:
            group.put(node, 1, 1.5)
    assert len(cache) <= 3


WHOLE_SGPU = {"asks": [{"kind": "sgpu", "nums": 1, "cores": 100, "mem": None}], "node_policy": None,
              "gpu_policy": None, "app_class": None, "qos": None, "topology": "true", "label": None}


def test_a_pod_annotation_only_the_score_reads_keeps_its_own_scores() -> None:
    """Whole sGPUs score by link topology only when the pod's topology annotation says so, an
    annotation outside the fit fingerprint: the twin without it must not reuse the scores."""
    s = _fleet()
    aware = _decide(s, _pod("a", WHOLE_SGPU))
    unaware_spec = {**WHOLE_SGPU, "topology": "false"}
    unaware = _decide(s, _pod("b", unaware_spec))
    reference = _decide(_fleet(), _pod("b", unaware_spec))
    assert isinstance(aware, Chosen) and isinstance(unaware, Chosen)
    assert aware.scores != unaware.scores
    assert unaware == reference


def _partial_sgpu(qos: str | None, nums: int = 1) -> dict[str, Any]:
    return {"asks": [{"kind": "sgpu", "nums": nums, "cores": 10, "mem": 2}], "node_policy": "spread",
            "gpu_policy": None, "app_class": None, "qos": qos, "topology": None, "label": None}


def test_state_a_vendor_notes_at_patch_time_invalidates_the_nodes_cached_outcomes() -> None:
    """Metax sGPU notes the QoS a used device switches to when a pod is placed there (before any
    reservation): a cached fit of another QoS on that node must not be reused afterwards."""
    cached, reference = _fleet(), _fleet()
    decisions = []
    for s in (cached, reference):
        base = _pod("base", _partial_sgpu(None))  # makes every sGPU of sgpu-a used, with no QoS yet
        for i in range(DEVICES):
            placed = decide(base | {"metadata": {**base["metadata"], "uid": f"u{i}", "name": f"b{i}"}},
                            ["sgpu-a"], s, default_node_policy="spread", default_gpu_policy="spread", now=1)
            assert isinstance(placed, Chosen)
            s.reserve(base | {"metadata": {**base["metadata"], "uid": f"u{i}", "name": f"b{i}"}}, placed)
        steps = [(_pod("x", _partial_sgpu("fixed-share")), ["sgpu-a", "sgpu-b"]),  # sgpu-b wins
                 (_pod("y", _partial_sgpu("best-effort", DEVICES)), ["sgpu-a"]),  # all switch to best-effort
                 (_pod("x", _partial_sgpu("fixed-share")), ["sgpu-a", "sgpu-b"])]
        got = []
        for obj, nodes in steps:
            if s is reference:
                s.verdicts.clear()
                s.fits.clear()
            got.append(decide(obj, nodes, s, default_node_policy="spread", default_gpu_policy="spread",
                              now=2, evaluate_all=True))
        decisions.append(got)
    assert decisions[0] == decisions[1]
    first, _, last = decisions[1]
    assert isinstance(first, Chosen) and isinstance(last, Chosen)
    assert "sgpu-a" in first.scores and "sgpu-a" not in last.scores


def test_a_cached_winner_that_no_longer_fits_falls_back_to_an_uncached_decision(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Guard against a cache key missing an input: the refit of the winner is checked."""
    s = _fleet()
    obj = _pod("a", ASCEND_POD)
    first = _decide(s, obj, evaluate_all=True)
    assert isinstance(first, Chosen)
    s.fits.group(_ascend_key(s, obj), None).put("nvidia-a", s.ledger.generation("nvidia-a"), 1e9)  # wrong
    got = _decide(s, _pod("b", ASCEND_POD), evaluate_all=True)
    assert got == _decide(_fleet(), _pod("b", ASCEND_POD), evaluate_all=True)
    assert "no longer fits" in caplog.text


def _ascend_key(s: SchedulerState, obj: dict[str, Any]) -> Any:
    requests = decide_module.pod_requests(obj, s.vendors)
    ctx = decide_module.pod_fit_context(obj, vendors=s.vendors, n_init=0)
    return fit_key(pod_fingerprint(requests, 0, ctx), node_policy="binpack", annotations=ctx.annotations,
                   scored=True)


def test_the_early_exit_falls_back_to_an_uncached_decision_too(caplog: pytest.LogCaptureFixture) -> None:
    """The same guard when nodes are visited best bound first: a wrong cached score ranks a full
    node first; its refit fails and the decision is taken again without caches."""
    fleets = []
    for s in (_fleet(), _fleet()):
        for i in range(8):  # ascend-b full: 4 NPUs × 2 slots
            filler = _pod(f"f{i}", ASCEND_POD)
            placed = decide(filler, ["ascend-b"], s, default_node_policy="binpack",
                            default_gpu_policy="spread", now=1)
            assert isinstance(placed, Chosen)
            s.reserve(filler, placed)
        fleets.append(s)
    s, reference = fleets
    obj = _pod("a", ASCEND_POD)
    s.fits.group(_ascend_key(s, obj), None).put("ascend-b", s.ledger.generation("ascend-b"), 1e9)
    got = _decide(s, obj)
    assert isinstance(got, Chosen) and got.node == "ascend-a"
    assert _essence(got) == _essence(_decide(reference, _pod("a", ASCEND_POD)))
    assert "no longer fits" in caplog.text
