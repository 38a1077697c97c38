"""The loop's cached predicate verdicts and scores always equal the provider's, whatever happens to
the nodes (pods placed and removed, Node objects replaced with or without relevant changes, nodes
added) and whichever pods are asked about (distinct pods sharing a cache key included)."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import builders
from vgpu_scheduler.cluster.store import Store
from vgpu_scheduler.simulate.extenderio import extender_args
from vgpu_scheduler.simulate.nodetable import NameSet, NodeTable, ScoreCache, VerdictCache
from vgpu_scheduler.simulate.predicates import pod_filter_key
from vgpu_scheduler.simulate.providers import (
    CLUSTER_AUTOSCALER_PROVIDER,
    DEFAULT_PROVIDER,
    AlgorithmProvider,
    get_provider,
)

Obj = dict[str, Any]


class Informer:
    """A Store plus the resourceVersion its reflector would report."""

    def __init__(self) -> None:
        self.store = Store()
        self.rv = 0

    def put(self, obj: Obj) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.store.upsert(obj)

    def version(self) -> str:
        return str(self.rv)


def node(i: int, *, labels: dict[str, str] | None = None, spec: Obj | None = None, cpu: str = "8") -> Obj:
    allocatable = {"cpu": cpu, "memory": "16Gi", "pods": "3", "nvidia.com/gpu": "8"}
    return builders.node(f"n{i:02d}", labels={"gpu": "on", **(labels or {})}, annotations={}, spec=spec or {},
                         allocatable=allocatable)


def pod(i: int, cpu: str, memory: str, *, selector: bool, tolerate: bool, gpus: int = 0) -> Obj:
    """Pod p<i> requesting cpu/memory (and `gpus`), optionally selecting gpu=on and tolerating
    the dedicated taint."""
    limits = {"nvidia.com/gpu": gpus} if gpus else None
    spec: Obj = {}
    if selector:
        spec["nodeSelector"] = {"gpu": "on"}
    if tolerate:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    ctr = builders.container("c", requests={"cpu": cpu, "memory": memory}, limits=limits)
    return builders.pod(f"p{i}", containers=[ctr], spec=spec)


pods_st = st.builds(
    lambda i, cpu, mem, sel, tol, g: pod(i, cpu, mem, selector=sel, tolerate=tol, gpus=g),
    st.integers(0, 50),
    st.sampled_from(["500m", "1", "3"]),
    st.sampled_from(["1Gi", "6Gi"]),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2),
)

ops_st = st.lists(
    st.one_of(
        st.tuples(st.just("place"), st.integers(0, 5), pods_st),
        st.tuples(st.just("remove"), st.integers(0, 5), st.integers(0, 50)),
        st.tuples(st.just("annotate"), st.integers(0, 5), st.integers(0, 9)),
        st.tuples(st.just("label"), st.integers(0, 5), st.sampled_from(["on", "off"])),
        st.tuples(st.just("taint"), st.integers(0, 5), st.booleans()),
        st.tuples(st.just("cordon"), st.integers(0, 5), st.booleans()),
        st.tuples(st.just("add_node"), st.integers(6, 9), st.sampled_from(["2", "8"])),
        st.tuples(st.just("ask"), st.integers(0, 3), pods_st),
    ),
    max_size=40,
)


def _mutate(informer: Informer, name: str, change: Any) -> None:
    current = informer.store.get(None, name)
    if current is not None:
        fresh = copy.deepcopy(current)  # the informer replaces objects, never edits them
        change(fresh)
        informer.put(fresh)


def _check(
    provider: AlgorithmProvider, table: NodeTable, cache: VerdictCache, scores: ScoreCache, p: Obj
) -> None:
    got = cache.filter(p)
    feasible, failed = [], {}
    for slot in table.order:
        reason = provider.filter(p, slot.node, slot.info)
        if reason is None:
            feasible.append(slot.name)
        else:
            failed[slot.name] = reason
    assert list(got.feasible) == feasible
    assert got.failed == failed
    assert [slot.name in got.feasible_set for slot in table.order] == [
        slot.name in feasible for slot in table.order
    ]
    assert got.names_json == msgspec.json.encode(feasible)
    for slot in table.order:
        assert scores.score(p, slot) == provider.score(p, slot.node, slot.info)
    assert [table.order[i].name for i in got.positions] == feasible
    if feasible:
        # The loop's choice: the first of the best scores, in name order.
        want = max(feasible, key=lambda n: provider.score(p, *_node_and_info(table, n)))
        assert table.order[scores.best(p, got.positions)].name == want


def _node_and_info(table: NodeTable, name: str) -> tuple[Obj, Any]:
    slot = table.slot(name)
    assert slot is not None
    return slot.node, slot.info


@settings(max_examples=80, deadline=None)
@given(ops=ops_st, provider_name=st.sampled_from([DEFAULT_PROVIDER, CLUSTER_AUTOSCALER_PROVIDER]))
def test_cached_verdicts_and_scores_equal_the_providers(
    ops: list[tuple[Any, ...]], provider_name: str
) -> None:
    provider = get_provider(provider_name)
    informer = Informer()
    for i in range(6):
        informer.put(node(i, cpu="2" if i % 2 else "8"))
    table = NodeTable(informer.store, informer.version)
    cache, scores = VerdictCache(table, provider), ScoreCache(table, provider)
    asked: list[Obj] = [pod(99, "1", "1Gi", selector=True, tolerate=False)]
    placed: dict[str, str] = {}
    for op, i, arg in ops:
        name = f"n{i:02d}"
        if op == "place":
            arg = copy.deepcopy(arg)
            arg["metadata"]["name"] = f"placed{len(placed)}"
            table.refresh()
            table.add_pod(name, arg)
            placed[f"default/{arg['metadata']['name']}"] = name
        elif op == "remove" and placed:
            key = sorted(placed)[arg % len(placed)]
            table.remove_pod(placed.pop(key), key)
        elif op == "annotate":
            _mutate(informer, name, lambda n, v=arg: n["metadata"]["annotations"].update(lock=str(v)))
        elif op == "label":
            _mutate(informer, name, lambda n, v=arg: n["metadata"]["labels"].update(gpu=v))
        elif op == "taint":
            taints = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}] if arg else []
            _mutate(informer, name, lambda n, t=taints: n["spec"].update(taints=t))
        elif op == "cordon":
            _mutate(informer, name, lambda n, v=arg: n["spec"].update(unschedulable=v))
        elif op == "add_node" and informer.store.get(None, name) is None:
            informer.put(node(i, cpu=arg))
        elif op == "ask":
            asked.append(arg)
        # Every pod asked about so far, each time: old cache entries must follow every change.
        for p in asked[-3:]:
            _check(provider, table, cache, scores, copy.deepcopy(p))


def test_generation_moves_only_with_what_the_predicates_read() -> None:
    informer = Informer()
    informer.put(node(0))
    table = NodeTable(informer.store, informer.version)
    table.refresh()
    slot = table.order[0]
    layout, generation = table.layout, slot.generation
    _mutate(informer, "n00", lambda n: n["metadata"]["annotations"].update({"hami.io/mutex.lock": "x"}))
    table.refresh()
    assert slot.node is informer.store.get(None, "n00")  # the latest object is used ...
    assert slot.generation == generation  # ... but the lock annotation changes no verdict
    _mutate(informer, "n00", lambda n: n["metadata"]["labels"].update(gpu="off"))
    table.refresh()
    assert slot.generation == generation + 1
    table.add_pod("n00", pod(1, "1", "1Gi", selector=False, tolerate=False))
    assert slot.generation == generation + 2 and slot.info.pod_count == 1
    table.remove_pod("n00", "default/p1")
    table.remove_pod("n00", "default/p1")  # not there any more: nothing changes
    assert slot.generation == generation + 3 and slot.info.pod_count == 0
    assert table.layout == layout
    informer.put(node(1))
    table.refresh()
    assert [s.name for s in table.order] == ["n00", "n01"] and table.layout == layout + 1


def test_pods_with_equal_keys_and_unkeyable_pods() -> None:
    ignored = frozenset({"nvidia.com/gpu"})
    a = pod(1, "1", "1Gi", selector=True, tolerate=False, gpus=1)
    b = pod(2, "1", "1Gi", selector=True, tolerate=False, gpus=2)  # GPU count is the extender's
    c = pod(3, "1", "2Gi", selector=True, tolerate=False)
    assert pod_filter_key(a, ignored) == pod_filter_key(b, ignored) != pod_filter_key(c, ignored)
    assert pod_filter_key({"metadata": {"name": "x"}, "spec": "bad"}, ignored) is None
    # An unkeyable pod is still evaluated, just not cached.
    informer = Informer()
    informer.put(node(0))
    table = NodeTable(informer.store, informer.version)
    provider = get_provider(DEFAULT_PROVIDER)
    got = VerdictCache(table, provider).filter({"metadata": {"name": "x"}, "spec": "bad"})
    assert not got.feasible and list(got.failed) == ["n00"]


def test_extender_args_bytes_are_what_msgspec_encodes() -> None:
    p = pod(1, "1", "1Gi", selector=True, tolerate=True)
    for names in ([], ["n00"], ["n00", "n-\u00e9"]):
        body = extender_args(p, msgspec.json.encode(names))
        assert body == msgspec.json.encode({"Pod": p, "Nodes": None, "NodeNames": names})
        assert extender_args(p, msgspec.json.encode(names), msgspec.json.encode(p)) == body


async def test_the_loop_encodes_a_pod_again_once_the_informer_replaces_it() -> None:
    from vgpu_scheduler.simulate.loop import Simulation
    from vgpu_scheduler.standin.embedded.fleet import demo_fleet

    sim = Simulation(demo_fleet(), [])
    first = pod(1, "1", "1Gi", selector=False, tolerate=False)
    assert sim._memo.pod_json("default/p1", first) is sim._memo.pod_json("default/p1", first)
    changed = copy.deepcopy(first)
    changed["metadata"]["annotations"] = {"a": "b"}
    assert sim._memo.pod_json("default/p1", changed) == msgspec.json.encode(changed)


def test_filter_answer_typed_and_tolerant_readings_agree() -> None:
    from vgpu_scheduler.simulate.extenderio import PendingReasons, decode_filter_answer

    def failed(answer: Any) -> dict[str, str]:
        """FailedNodes as the report reads them (after the predicates' reasons)."""
        return PendingReasons({"n09": "predicate"}, answer.failed_nodes).merged()

    well_formed = {"NodeNames": ["n00"], "FailedNodes": {"n01": "no GPU"}, "Error": ""}
    got = decode_filter_answer(msgspec.json.encode(well_formed))
    assert (got.node_names, failed(got), got.error) == (
        ["n00"], {"n09": "predicate", "n01": "no GPU"}, ""
    )
    empty = decode_filter_answer(b'{"NodeNames":null,"FailedNodes":null,"Error":"boom"}')
    assert (empty.error, failed(empty)) == ("boom", {"n09": "predicate"})
    odd = decode_filter_answer(b'{"NodeNames":["n00"],"FailedNodes":{"n01":3},"Error":0}')
    assert (odd.node_names, failed(odd), odd.error) == (["n00"], {"n09": "predicate", "n01": "3"}, "")
    odd_map_only = decode_filter_answer(b'{"NodeNames":["n00"],"FailedNodes":{"n01":3},"Error":""}')
    assert failed(odd_map_only) == {"n09": "predicate", "n01": "3"}


def test_pods_placed_on_a_node_rerun_only_the_predicate_reading_node_info_there() -> None:
    calls: list[str] = []
    base = get_provider(DEFAULT_PROVIDER)

    def counting(name: str, predicate: Any) -> Any:
        def run(p: Obj, n: Obj, info: Any) -> str | None:
            calls.append(name)
            return predicate(p, n, info)

        return run

    provider = AlgorithmProvider(
        name="counting",
        predicates=tuple((name, counting(name, fn)) for name, fn in base.predicates),
        priorities=base.priorities,
        filter_key=base.filter_key,
        score_key=base.score_key,
        reads_node_info=base.reads_node_info,
    )
    informer = Informer()
    for i in range(6):
        informer.put(node(i))
    table = NodeTable(informer.store, informer.version)
    cache, scores = VerdictCache(table, provider), ScoreCache(table, provider)
    idle = pod(1, "1", "1Gi", selector=True, tolerate=False)
    _check(provider, table, cache, scores, idle)
    # Many changes, all on node n02 (more than the change log keeps: 4 per node + 64), asked about
    # by another pod key meanwhile.
    busy = pod(2, "3", "6Gi", selector=False, tolerate=True)
    for k in range(100):
        placed = pod(100 + k, "500m", "1Gi", selector=False, tolerate=False)
        table.add_pod("n02", placed)
        cache.filter(busy)
        table.remove_pod("n02", f"default/p{100 + k}")
    calls.clear()
    got = cache.filter(idle)
    assert calls == ["PodFitsResources"]  # n02 only, and only the predicate reading NodeInfo
    _check(provider, table, cache, scores, idle)
    assert got.feasible == [f"n{i:02d}" for i in range(6)]


def test_pending_pods_share_equal_failed_nodes_and_not_the_answer_bodies() -> None:
    import sys

    from vgpu_scheduler.simulate.extenderio import decode_filter_answer
    from vgpu_scheduler.simulate.loop import Simulation
    from vgpu_scheduler.standin.embedded.fleet import demo_fleet

    sim = Simulation(demo_fleet(), [])
    failed = {f"n{i:04d}": "CardInsufficientMemory" for i in range(100)}
    bodies = [msgspec.json.encode({"NodeNames": [], "FailedNodes": failed, "Error": ""}) for _ in range(2)]
    answers = [decode_filter_answer(b) for b in bodies]
    kept = [sim._memo.shared_failed(a.failed_nodes) for a in answers]
    assert kept[0] is kept[1]  # one copy for equal answers
    assert isinstance(kept[0], msgspec.Raw) and msgspec.json.decode(kept[0]) == failed
    control = msgspec.json.encode({"NodeNames": [], "FailedNodes": failed, "Error": ""})
    del answers
    counts = [sys.getrefcount(b) for b in (*bodies, control)]
    assert counts[0] == counts[1] == counts[2]  # what is kept holds no answer body alive
    assert sim._memo.shared_failed({"n1": "x"}) == {"n1": "x"}  # tolerant readings pass through


def test_a_name_set_answers_membership_of_its_names() -> None:
    names = NameSet(["a", "b"])
    assert "a" in names and "b" in names
    assert "c" not in names and 1 not in names
