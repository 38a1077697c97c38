"""The not-fit verdict cache (engine/verdicts.py) and the generations that validate it.

* unit tests: the ledger's node generation and the quota manager's namespace generation change
  exactly when a fit could see something different; the cache's LRU bound, quota reset and node
  removal; which nodes `decide` re-evaluates after one change (counted through `evaluate_node`);
* a hypothesis state machine: over random cluster changes interleaved with decisions, `decide`
  with the cache returns exactly what a state without cache returns, FailedNodes order included.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from tests.builders import (
    assigned_annotations,
    container,
    device,
    gpu_quota,
    grant,
    pod_allocation,
    pod_devices,
)
from tests.builders import gpu_container as ctr
from tests.builders import pod as pod_object
from tests.engine.counting import count_fits
from vgpu_scheduler.config import NvidiaConfig
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine import walk_first_fit
from vgpu_scheduler.engine.decide import Chosen, Decision, NoFit, NoRequest, decide
from vgpu_scheduler.engine.fit import pod_fit_context
from vgpu_scheduler.engine.ledger import DeviceLedger
from vgpu_scheduler.engine.podinfo import PodAllocation
from vgpu_scheduler.engine.quota import QuotaManager
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.engine.verdicts import FITS, Snapshot, VerdictCache, pod_fingerprint, quota_token
from vgpu_scheduler.model import DeviceInfo, MigPlacement, MigProfile
from vgpu_scheduler.scheduler.extender import encode_no_fit
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.extender import encode_filter_result

CFG = NvidiaConfig()
VENDORS = build()
NOW = 1764400000
MEM = CFG.resource_memory_name


gpu = partial(device, devmem=8000, count=4)


def pending(name: str, *containers: dict[str, Any], namespace: str = "team",
            init: list[dict[str, Any]] | None = None,
            annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return pod_object(name, namespace=namespace, uid=f"uid-{name}", annotations=dict(annotations or {}),
               init_containers=list(init or []), containers=containers, phase="Pending")


def running(name: str, node: str, uuid: str, mem: int, cores: int = 0,
            namespace: str = "team") -> dict[str, Any]:
    """A pod on `node` using `mem` MiB and `cores` of one device."""
    return pod_object(name, namespace=namespace, uid=f"uid-{name}",
               annotations=assigned_annotations(node, f"{uuid},NVIDIA,{mem},{cores}:;"),
               containers=[container("c")], phase="Running")


def alloc(uid: str, node: str, uuid: str, mem: int, namespace: str = "team") -> PodAllocation:
    return pod_allocation(uid, node, [grant(uuid, usedmem=mem, usedcores=0)], namespace=namespace)


def run(pod: dict[str, Any], state: SchedulerState, nodes: list[str]) -> Decision:
    return decide(pod, nodes, state, default_node_policy="binpack", default_gpu_policy="spread", now=NOW)


# --- generations -----------------------------------------------------------------------------


def test_node_generation_changes_only_for_the_node_that_changed() -> None:
    ledger = DeviceLedger()
    assert ledger.generation("a") == 0  # unknown
    ledger.set_node_devices("a", [gpu("GPU-a")])
    ledger.set_node_devices("b", [gpu("GPU-b")])
    gens = {n: ledger.generation(n) for n in "ab"}
    assert 0 not in gens.values() and len(set(gens.values())) == 2

    def changed(action: Any) -> set[str]:
        before = {n: ledger.generation(n) for n in "ab"}
        action()
        return {n for n in "ab" if ledger.generation(n) != before[n]}

    assert changed(lambda: ledger.upsert_pod(alloc("p1", "a", "GPU-a", 1000))) == {"a"}
    assert changed(lambda: ledger.upsert_pod(alloc("p1", "b", "GPU-b", 1000))) == {"a", "b"}  # moved
    assert changed(lambda: ledger.remove_pod("p1")) == {"b"}
    assert changed(lambda: ledger.remove_pod("p1")) == set()  # not counted: nothing changes
    assert changed(lambda: ledger.upsert_pod(alloc("p2", "ghost", "GPU-x", 1))) == set()
    assert changed(lambda: ledger.set_node_devices("a", [gpu("GPU-a")], frozenset({"GPU-a"}))) == {"a"}
    assert changed(lambda: ledger.set_node_devices("b", [gpu("GPU-b", devmem=9000)])) == {"b"}
    assert changed(lambda: ledger.rebuild_from([])) == {"a", "b"}


def test_node_generation_is_never_reused_after_removal() -> None:
    ledger = DeviceLedger()
    ledger.set_node_devices("a", [gpu("GPU-a")])
    first = ledger.generation("a")
    ledger.remove_node("a")
    assert ledger.generation("a") == 0
    ledger.set_node_devices("a", [gpu("GPU-a")])
    assert ledger.generation("a") not in (0, first)


def test_quota_generation_follows_usage_and_limits_of_its_namespace() -> None:
    q = QuotaManager.for_vendors(VENDORS)
    devices = pod_devices([grant("GPU-a", usedmem=1000, usedcores=10)])
    seen = {"x": q.generation("x"), "y": q.generation("y")}

    def changed() -> set[str]:
        out = {ns for ns in seen if q.generation(ns) != seen[ns]}
        seen.update({ns: q.generation(ns) for ns in seen})
        return out

    q.add_usage("x", devices)
    assert changed() == {"x"}
    q.remove_usage("x", devices)
    assert changed() == {"x"}
    q.remove_usage("y", devices)  # nothing counted there
    assert changed() == set()
    assert not q.has_limits("y")
    q.upsert_quota(gpu_quota(namespace="y", mem=5000))
    assert changed() == {"y"} and q.has_limits("y")
    q.upsert_quota(gpu_quota(namespace="y", mem=6000))
    assert changed() == {"y"}
    q.delete_quota(gpu_quota(namespace="y"))
    assert changed() == {"y"} and not q.has_limits("y")


# --- the cache on its own --------------------------------------------------------------------


def test_cache_reuses_a_verdict_only_at_the_same_generation() -> None:
    cache = VerdictCache()
    g = cache.group(("fp",), None)
    g.put("a", 5, "1/1 CardInsufficientMemory")
    assert g.get("a", 5) == "1/1 CardInsufficientMemory"
    assert g.get("a", 6) is None and g.get("b", 5) is None
    g.put("a", 6, "1/1 CardInsufficientCore")  # overwritten, not added
    assert len(cache) == 1 and g.get("a", 6) == "1/1 CardInsufficientCore"


def test_cache_empties_a_group_when_its_quota_token_changes() -> None:
    cache = VerdictCache()
    cache.group(("team",), 3).put("a", 1, "r")
    cache.group(("other",), None).put("a", 1, "r")
    assert cache.group(("team",), 3).get("a", 1) == "r"
    assert cache.group(("team",), 4).get("a", 1) is None
    assert cache.group(("other",), None).get("a", 1) == "r"
    assert len(cache) == 1


def test_cache_drops_a_removed_node_everywhere() -> None:
    cache = VerdictCache()
    for fp in ("p", "q"):
        g = cache.group((fp,), None)
        g.put("a", 1, "r")
        g.put("b", 1, "r")
    cache.drop_node("a")
    assert len(cache) == 2
    assert cache.group(("p",), None).get("a", 1) is None
    assert cache.group(("q",), None).get("b", 1) == "r"


def test_cache_is_bounded_and_keeps_groups_in_use() -> None:
    cache = VerdictCache(max_entries=4)
    old, new = cache.group(("old",), None), cache.group(("new",), None)
    old.put("a", 1, "r")
    old.put("b", 1, "r")
    new.put("a", 1, "r")
    cache.group(("old",), None)
    old.put("c", 1, "r")
    third = cache.group(("third",), None)
    third.put("a", 1, "r")  # full, and every group was used recently: not cached
    assert len(cache) == 4
    assert third.get("a", 1) is None
    assert cache.group(("new",), None).get("a", 1) == "r"
    assert cache.group(("old",), None).get("c", 1) == "r"


def test_cache_evicts_groups_idle_for_two_rounds() -> None:
    cache = VerdictCache(max_entries=2)
    stale = cache.group(("stale",), None)
    stale.put("a", 1, "r")
    stale.put("b", 1, "r")
    for i in range(30):  # two other pods are retried; "stale" is never asked for again
        cache.group((f"other-{i % 2}",), None)
    fresh = cache.group(("fresh",), None)
    fresh.put("a", 1, "r")  # full: the idle group is evicted
    assert fresh.get("a", 1) == "r"
    assert len(cache) == 1
    stale.put("z", 1, "r")  # an evicted group object no longer adds to the cache
    assert len(cache) == 1


def test_cyclic_retries_keep_a_stable_working_set() -> None:
    # Three pending pods retried in turn, room for two groups' verdicts: LRU would miss every time.
    cache = VerdictCache(max_entries=4)
    hits = 0
    for _round in range(5):
        for pod in ("p1", "p2", "p3"):
            group = cache.group((pod,), None)
            for node in ("a", "b"):
                if group.get(node, 1) == "r":
                    hits += 1
                else:
                    group.put(node, 1, "r")
    assert hits == 4 * 2 * 2  # two pods' verdicts stay cached after the first round


def test_a_group_larger_than_the_cache_keeps_what_fits() -> None:
    cache = VerdictCache(max_entries=2)
    g = cache.group(("big",), None)
    for node in "abc":
        g.put(node, 1, "r")
    assert len(cache) == 2 and g.get("c", 1) is None and g.get("a", 1) == "r"
    assert len(VerdictCache(max_entries=0).group(("x",), None).entries) == 0


def test_fingerprint_is_what_the_fit_reads() -> None:
    def fp(pod: dict[str, Any]) -> Any:
        n_init = len(pod["spec"]["initContainers"])
        ctx = pod_fit_context(pod, vendors=VENDORS, n_init=n_init)
        return pod_fingerprint(pod_requests(pod, VENDORS), n_init, ctx)

    base = fp(pending("p", ctr(mem=1000)))
    assert fp(pending("other-name", ctr(mem=1000), annotations={"unrelated": "x"})) == base
    different = [
        pending("p", ctr(mem=1001)),
        pending("p", ctr(mem=1000), namespace="else"),
        pending("p", ctr(mem=1000), init=[ctr(mem=1000)]),
        pending("p", ctr(mem=1000), annotations={keys.GPU_SCHEDULER_POLICY: "binpack"}),
        pending("p", ctr(mem=1000), annotations={keys.NUMA_BIND: "true"}),
        pending("p", ctr(mem=1000), annotations={keys.USE_GPUTYPE: "A100"}),
        pending("p", ctr(mem=1000), annotations={keys.NOUSE_GPUUUID: "GPU-a"}),
        pending("p", ctr(mem=1000), annotations={keys.VGPU_MODE: "mig"}),
        pending("p", ctr(mem=1000), annotations={keys.DEVICE_SCORING_WEIGHTS: "slot=1,core=2,memory=3"}),
    ]
    fps = [fp(p) for p in different]
    assert base not in fps and len(set(fps)) == len(fps)


def test_quota_token_ignores_namespaces_without_limits() -> None:
    q = QuotaManager.for_vendors(VENDORS)
    q.add_usage("free", pod_devices([grant("GPU-a", usedmem=1000, usedcores=10)]))
    assert quota_token(q, "free") is None
    q.upsert_quota(gpu_quota(namespace="free", cores=50))
    token = quota_token(q, "free")
    assert token is not None
    q.add_usage("free", pod_devices([grant("GPU-a", usedmem=1000, usedcores=10)]))
    assert quota_token(q, "free") not in (None, token)


# --- what decide re-evaluates ----------------------------------------------------------------


@pytest.fixture
def evaluated(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Names of the nodes `decide` runs the fit on, in call order. The summary-level verdict of a
    node short of memory (tests/engine/test_memory_shortfall.py) is off: these tests count the
    per-node evaluations the cache saves, on pods too big for any device."""
    monkeypatch.setattr(walk_first_fit, "_short_of_memory", lambda *args: None)
    yield count_fits(monkeypatch)


NODES = ["a", "b", "c"]
TOO_BIG = ctr(mem=9000)  # every device has 8000


def three_nodes() -> SchedulerState:
    s = SchedulerState(VENDORS)
    for n in NODES:
        s.set_node_devices(n, [gpu(f"GPU-{n}0"), gpu(f"GPU-{n}1", index=1)])
    return s


def reevaluated(evaluated: list[str], pod: dict[str, Any], s: SchedulerState) -> list[str]:
    """Decide `pod` (never fitting) on the cached state; the nodes that were fitted again."""
    evaluated.clear()
    reference = copy.deepcopy(s)
    reference.verdicts.clear()
    got = run(pod, s, NODES)
    fitted = sorted(evaluated)
    assert isinstance(got, NoFit)
    # The same reasons; their order is not part of the answer (FailedNodes is encoded sorted).
    assert got.failed == _uncached(pod, reference).failed
    return fitted


def _uncached(pod: dict[str, Any], s: SchedulerState) -> NoFit:
    d = run(pod, s, NODES)
    assert isinstance(d, NoFit)
    return d


def test_a_repeated_no_fit_evaluates_nothing(evaluated: list[str]) -> None:
    s = three_nodes()
    pod = pending("p", TOO_BIG)
    assert reevaluated(evaluated, pod, s) == NODES
    assert reevaluated(evaluated, pod, s) == []
    # An identical pod (another name/uid) shares the verdicts; a different request does not.
    assert reevaluated(evaluated, pending("twin", TOO_BIG), s) == []
    assert reevaluated(evaluated, pending("p", ctr(mem=9001)), s) == NODES


def test_usage_change_on_one_node_invalidates_only_that_node(evaluated: list[str]) -> None:
    s = three_nodes()
    pod = pending("p", TOO_BIG)
    reevaluated(evaluated, pod, s)
    s.on_pod(running("r", "b", "GPU-b0", 1000, namespace="elsewhere"))
    assert reevaluated(evaluated, pod, s) == ["b"]
    s.on_pod_deleted(running("r", "b", "GPU-b0", 1000, namespace="elsewhere"))
    assert reevaluated(evaluated, pod, s) == ["b"]
    s.set_node_devices("c", [gpu("GPU-c0"), gpu("GPU-c1", index=1)], frozenset({"GPU-c0"}))
    assert reevaluated(evaluated, pod, s) == ["c"]
    s.set_node_devices("a", [gpu("GPU-a0", devmem=10000)])  # new inventory: now fits
    evaluated.clear()
    d = run(pod, s, NODES)
    assert isinstance(d, Chosen) and d.node == "a" and evaluated == ["a"]


def test_usage_in_a_namespace_without_limits_keeps_its_verdicts(evaluated: list[str]) -> None:
    s = three_nodes()
    pod = pending("p", TOO_BIG)
    reevaluated(evaluated, pod, s)
    # Another pod of the same namespace changes the namespace usage, but there is no quota.
    s.on_pod(running("r", "a", "GPU-a0", 1000))
    assert reevaluated(evaluated, pod, s) == ["a"]


def test_quota_change_invalidates_that_namespace_only(evaluated: list[str]) -> None:
    s = three_nodes()
    s.on_quota(gpu_quota(namespace="team", mem=50000))
    mine, theirs = pending("p", TOO_BIG), pending("o", TOO_BIG, namespace="other")
    s.on_quota(gpu_quota(namespace="other", mem=50000))
    reevaluated(evaluated, mine, s)
    reevaluated(evaluated, theirs, s)
    s.on_quota(gpu_quota(namespace="team", mem=60000))
    assert reevaluated(evaluated, theirs, s) == []
    assert reevaluated(evaluated, mine, s) == NODES
    # Usage of the namespace counts too: a pod of "team" on node a re-evaluates every node for
    # "team" pods, and only node a for "other" pods.
    s.on_pod(running("r", "a", "GPU-a0", 1000))
    assert reevaluated(evaluated, mine, s) == NODES
    assert reevaluated(evaluated, theirs, s) == ["a"]
    s.on_quota_deleted(gpu_quota(namespace="team"))
    assert reevaluated(evaluated, mine, s) == NODES


def test_quota_verdicts_are_exact_after_the_quota_changes() -> None:
    s = three_nodes()
    s.on_quota(gpu_quota(namespace="team", mem=500))
    pod = pending("p", ctr(mem=1000))
    assert run(pod, s, NODES) == NoFit(dict.fromkeys(NODES, "2/2 ResourceQuotaNotFit"))
    s.on_quota(gpu_quota(namespace="team", mem=5000))
    d = run(pod, s, NODES)
    assert isinstance(d, Chosen)


def test_node_removal_drops_its_verdicts(evaluated: list[str]) -> None:
    s = three_nodes()
    pod = pending("p", TOO_BIG)
    reevaluated(evaluated, pod, s)
    assert len(s.verdicts) == 3
    s.remove_node("b")
    assert len(s.verdicts) == 2
    evaluated.clear()
    d = run(pod, s, NODES)
    assert isinstance(d, NoFit) and d.failed["b"] == "node unregistered" and evaluated == []
    s.set_node_devices("b", [gpu("GPU-b0"), gpu("GPU-b1", index=1)])  # back, same devices
    assert reevaluated(evaluated, pod, s) == ["b"]


def test_the_fit_path_reuses_not_fit_verdicts(evaluated: list[str]) -> None:
    """Nodes before the first fitting one in policy order are not fitted again."""
    s = three_nodes()
    s.on_pod(running("r", "c", "GPU-c0", 3000))  # binpack visits c first, then a
    for n in ("a", "b"):
        s.on_pod(running(f"x{n}", n, f"GPU-{n}0", 100))
    pod = pending("p", ctr(mem=1000), annotations={keys.NOUSE_GPUUUID: "GPU-c0,GPU-c1"})
    d = run(pod, s, NODES)
    assert isinstance(d, Chosen) and d.node == "a" and d.failed == {"c": "2/2 CardUuidMismatch"}
    assert evaluated == ["c", "a"]
    evaluated.clear()
    assert run(pod, s, NODES) == d
    assert evaluated == ["a"]


# --- property: cached decisions equal uncached ones ------------------------------------------


def _mig(uuid: str) -> DeviceInfo:
    profiles = (
        MigProfile("1g.10gb", 9856, 14, 1, tuple(MigPlacement(i, 1) for i in range(7))),
        MigProfile("3g.40gb", 40192, 42, 3, (MigPlacement(0, 4), MigPlacement(4, 4))),
    )
    return device(uuid, count=7, devmem=81920, mode="mig", mig_profiles=profiles)


def _inventory(node: str, variant: int) -> list[DeviceInfo]:
    """Node inventories; variant 1 grows memory, variant 2 drops the last device."""
    base = {
        "n0": [gpu("GPU-00", index=0, numa=0), gpu("GPU-01", index=1, numa=1)],
        "n1": [gpu("GPU-10", devmem=16000, count=2, index=0, type="NVIDIA-H100")],
        "n2": [gpu("GPU-20", devmem=4000, count=3, index=0),
               gpu("GPU-21", devmem=4000, count=3, index=1, health=False),
               gpu("GPU-22", devmem=6000, count=3, index=2)],
        "n3": [_mig("GPU-30"), gpu("GPU-31", devmem=12000, count=2, index=1)],
    }[node]
    if variant == 1:
        for d in base:
            if d.mode != "mig":
                d.devmem += 4000
    elif variant == 2 and len(base) > 1:
        base.pop()
    return base


CLUSTER = ["n0", "n1", "n2", "n3"]
UUIDS = ["GPU-00", "GPU-01", "GPU-10", "GPU-20", "GPU-22", "GPU-30", "GPU-31"]
NAMESPACES = ["a", "b"]
PENDING = [f"p{i}" for i in range(4)]
RUNNING = [f"r{i}" for i in range(6)]

container_spec = st.fixed_dictionaries({
    "gpus": st.sampled_from([1, 1, 2]),
    "mem": st.sampled_from([None, 2000, 5000, 9000, 15000]),
    "pct": st.sampled_from([None, None, 50]),
    "cores": st.sampled_from([None, 0, 50, 100]),
})
pod_spec = st.fixed_dictionaries({
    "namespace": st.sampled_from(NAMESPACES),
    "init": st.lists(container_spec, max_size=1),
    "app": st.lists(container_spec, min_size=1, max_size=2),
    "annotations": st.dictionaries(
        st.sampled_from([keys.GPU_SCHEDULER_POLICY, keys.NUMA_BIND, keys.USE_GPUTYPE,
                         keys.NOUSE_GPUUUID, keys.NODE_SCHEDULER_POLICY]),
        st.sampled_from(["binpack", "spread", "mutex", "topology-aware", "true", "A100", "H100",
                         "GPU-22"]),
        max_size=2,
    ),
})


def _pending_pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    def one(i: int, c: dict[str, Any]) -> dict[str, Any]:
        return ctr(f"c{i}", gpus=c["gpus"], mem=c["mem"], pct=c["pct"], cores=c["cores"])

    return pending(name, *[one(i, c) for i, c in enumerate(spec["app"])], namespace=spec["namespace"],
                   init=[one(i, c) for i, c in enumerate(spec["init"])], annotations=spec["annotations"])


@contextmanager
def _counting_fits() -> Iterator[list[str]]:
    """Like the `evaluated` fixture, for use inside a state machine step."""
    with pytest.MonkeyPatch.context() as mp:
        yield count_fits(mp)


class CachedDecisionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = SchedulerState(VENDORS)
        self.pending: dict[str, dict[str, Any]] = {}
        self.now = NOW

    @initialize(specs=st.lists(pod_spec, min_size=len(PENDING), max_size=len(PENDING)))
    def setup(self, specs: list[dict[str, Any]]) -> None:
        for node in CLUSTER:
            self.state.set_node_devices(node, _inventory(node, 0))
        self.pending = {name: _pending_pod(name, spec) for name, spec in zip(PENDING, specs, strict=True)}

    # -- cluster changes ---------------------------------------------------------------------------

    @rule(node=st.sampled_from(CLUSTER), variant=st.integers(0, 2), cordon=st.sampled_from([None, *UUIDS]))
    def register(self, node: str, variant: int, cordon: str | None) -> None:
        cordoned = frozenset({cordon}) if cordon else frozenset()
        self.state.set_node_devices(node, _inventory(node, variant), cordoned)

    @rule(node=st.sampled_from(CLUSTER))
    def unregister(self, node: str) -> None:
        self.state.remove_node(node)

    @rule(name=st.sampled_from(RUNNING), node=st.sampled_from(CLUSTER), uuid=st.sampled_from(UUIDS),
          mem=st.sampled_from([500, 2000, 4000, 9856]), cores=st.sampled_from([0, 10, 50, 100]),
          namespace=st.sampled_from(NAMESPACES))
    def place_running_pod(self, name: str, node: str, uuid: str, mem: int, cores: int,
                          namespace: str) -> None:
        """Adds a pod or updates it (another device, node or amount)."""
        self.state.on_pod(running(name, node, uuid, mem, cores, namespace))

    @rule(name=st.sampled_from(RUNNING))
    def delete_running_pod(self, name: str) -> None:
        self.state.on_pod_deleted(running(name, "", "", 0))

    @rule(namespace=st.sampled_from(NAMESPACES), mem=st.sampled_from([None, 0, 3000, 12000, 40000]),
          cores=st.sampled_from([None, 50, 150]))
    def set_quota(self, namespace: str, mem: int | None, cores: int | None) -> None:
        if mem is None and cores is None:
            self.state.on_quota_deleted(gpu_quota(namespace=namespace))
        else:
            self.state.on_quota(gpu_quota(namespace=namespace, mem=mem, cores=cores))

    @rule(name=st.sampled_from(PENDING), spec=pod_spec)
    def pending_pod_changes(self, name: str, spec: dict[str, Any]) -> None:
        self.pending[name] = _pending_pod(name, spec)

    # -- decisions ---------------------------------------------------------------------------------

    @rule(names=st.lists(st.sampled_from(PENDING), min_size=1, max_size=4), reserve=st.booleans())
    def decide_pending(self, names: list[str], reserve: bool) -> None:
        for name in names:
            self.now += 1
            pod = self.pending[name]
            reference = copy.deepcopy(self.state)
            reference.verdicts.clear()
            # Without the walk's `failed` (the simulation's extender), the same choice and devices.
            fast = decide(
                pod,
                CLUSTER,
                self.state,
                default_node_policy="binpack",
                default_gpu_policy="spread",
                now=self.now,
                walk_failed=False,
            )
            with _counting_fits() as fitted:
                got = decide(
                    pod,
                    CLUSTER,
                    self.state,
                    default_node_policy="binpack",
                    default_gpu_policy="spread",
                    now=self.now,
                )
            want = decide(
                pod,
                CLUSTER,
                reference,
                default_node_policy="binpack",
                default_gpu_policy="spread",
                now=self.now,
            )
            assert got == want
            if isinstance(want, Chosen):
                assert isinstance(fast, Chosen)
                chose = (fast.node, fast.devices, fast.annotations)
                assert chose == (want.node, want.devices, want.annotations)
            else:
                assert fast == want
            for answer in (fast, got):
                if isinstance(answer, NoFit) and answer.reason_counts is not None:
                    assert answer.reason_counts == Counter(answer.failed.values())
                if isinstance(answer, NoFit):
                    # A snapshot's kept FailedNodes answer is the fresh encoding of its verdicts.
                    assert encode_no_fit(answer) == encode_filter_result(failed=answer.failed)
            if isinstance(got, NoFit | Chosen):
                assert isinstance(want, NoFit | Chosen)
                # The same reasons; their order is not part of the answer (FailedNodes is sorted).
                assert got.failed == want.failed
                decided = [n for n, r in got.failed.items() if r != "node unregistered"]
                reused = len(decided) + isinstance(got, Chosen) - len(fitted)
                event(f"{type(got).__name__}, {'some' if reused else 'no'} cached verdicts reused")
            if reserve and isinstance(got, Chosen):
                self.state.reserve(pod, got)
            elif not isinstance(got, NoRequest):
                assert self.state.allocation(pod["metadata"]["uid"]) is None


CachedDecisionMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestCachedDecisions = CachedDecisionMachine.TestCase


def test_a_lent_snapshot_answer_never_changes() -> None:
    """A snapshot's answer is handed out without a copy; a later change of verdict must not show
    through it (the snapshot copies before it changes)."""
    snapshot = Snapshot(["a", "b"], {"a": "1/1 CardInsufficientMemory", "b": "1/1 CardNotHealth"}, 1)
    failed, counts = snapshot.lend()
    before = (dict(failed), dict(counts))
    snapshot.set("a", "1/1 CardNotHealth")
    snapshot.set("b", FITS)
    assert (failed, counts) == before
    assert snapshot.verdicts == {"a": "1/1 CardNotHealth", "b": FITS}
    assert snapshot.counts == {"1/1 CardNotHealth": 1}
    again, _ = snapshot.lend()
    assert again is snapshot.verdicts  # nothing changed since: no copy
