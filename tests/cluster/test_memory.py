"""MemoryCluster's direct API: seeding, defaulting, deletion semantics, history, overflow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import builders
from tests.builders import api_pod
from tests.builders import node as node_object
from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError
from vgpu_scheduler.standin.memory import MemoryCluster, MemoryWatch


async def drain(w: MemoryWatch) -> list[tuple[str, dict[str, Any]]]:
    """Events queued so far (ends the watch)."""
    w.finish()
    out = []
    async for line in w:
        ev = json.loads(line)
        out.append((ev["type"], ev["object"]))
    return out


def test_seed_from_kubectl_list(cluster: MemoryCluster, fx: Any) -> None:
    event = fx.json("api/event.scheduled.events-k8s-io-v1.raw.json")
    lst = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            fx.json("node/node.hami-registered.kubectl.json"),
            fx.json("api/lease.hami-scheduler.kubectl.json"),
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "skipped"}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "no-containers"}, "spec": {}},
            event,
            "not an object",
        ],
    }
    assert cluster.seed_from_list(lst) == 3
    assert cluster.count("nodes") == 1 and cluster.count("leases") == 1 and cluster.count("events") == 1
    node = cluster.get("nodes", "gpu-node-1")
    assert node["metadata"]["uid"] == "39dcf5a3-5f6d-47e5-9344-a9b02de3d41d"
    assert node["metadata"]["creationTimestamp"] == "2026-11-29T21:02:20Z"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "20"  # status kept when seeding
    assert cluster.get("events.events.k8s.io", event["metadata"]["name"], "default")["note"] == event["note"]


def test_load_snapshot_json_and_yaml(tmp_path: Path, fx: Any) -> None:
    as_json = tmp_path / "pods.json"
    as_json.write_text(json.dumps(fx.pod_list()))
    as_yaml = tmp_path / "nodes.yaml"
    as_yaml.write_text(
        yaml.safe_dump_all(
            [
                node_object("n1", typed=True),
                {"apiVersion": "v1", "kind": "NodeList", "items": [node_object("n2")]},
            ]
        )
    )
    c = MemoryCluster()
    assert c.load_snapshot(as_json) == 5
    assert c.load_snapshot(as_yaml) == 2
    assert [n["metadata"]["name"] for n in c.objects("nodes")] == ["n1", "n2"]


def test_same_seed_same_uids() -> None:
    a, b = MemoryCluster(seed=3), MemoryCluster(seed=3)
    for c in (a, b):
        c.create("pods", {**api_pod(""), "metadata": {"generateName": "x-", "namespace": "default"}})
    assert [p["metadata"]["uid"] for p in a.objects("pods")] == [
        p["metadata"]["uid"] for p in b.objects("pods")
    ]
    assert [p["metadata"]["name"] for p in a.objects("pods")] == [
        p["metadata"]["name"] for p in b.objects("pods")
    ]


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        pytest.param([{"limits": {"nvidia.com/gpu": "1"}}], "BestEffort", id="gpu limit only: BestEffort"),
        pytest.param([{}], "BestEffort", id="no resources: BestEffort"),
        pytest.param([{"requests": {"cpu": "100m"}}], "Burstable", id="cpu request: Burstable"),
        pytest.param([{"limits": {"cpu": "1", "memory": "1Gi"}}], "Guaranteed",
                     id="cpu and memory limits: Guaranteed"),
        pytest.param([{"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}], "Burstable",
                     id="request below limit: Burstable"),
        pytest.param([{"limits": {"cpu": "1", "memory": "1Gi"}}, {"limits": {"cpu": "1"}}], "Burstable",
                     id="second container without memory: Burstable"),
    ],
)
def test_pod_defaulting(cluster: MemoryCluster, resources: list[dict[str, Any]], qos: str) -> None:
    pod = api_pod("p")
    pod["spec"]["containers"] = [
        {"name": f"c{i}", "image": "x", "resources": r} for i, r in enumerate(resources)
    ]
    created = cluster.create("pods", pod)
    assert created["status"] == {"phase": "Pending", "qosClass": qos}
    assert created["spec"]["schedulerName"] == "default-scheduler"
    # Limits without a request become the request (apiserver defaulting); explicit requests stay.
    for c, r in zip(created["spec"]["containers"], resources, strict=True):
        for k, v in r.get("limits", {}).items():
            assert c["resources"]["requests"][k] == r.get("requests", {}).get(k, v)


async def test_unbound_pod_is_deleted_at_once(cluster: MemoryCluster) -> None:
    cluster.create("pods", api_pod("a"))
    w = cluster.watch("pods", resource_version=str(cluster.resource_version))
    last = cluster.delete("pods", "a", "default")
    assert last["metadata"]["deletionGracePeriodSeconds"] == 0
    assert [t for t, _ in await drain(w)] == ["MODIFIED", "DELETED"]
    assert cluster.count("pods") == 0


async def test_graceful_delete_only_shortens(cluster: MemoryCluster) -> None:
    cluster.create("pods", api_pod("a"))
    cluster.bind("default", "a", "n1")
    first = cluster.delete("pods", "a", "default", grace_period_seconds=60)
    again = cluster.delete("pods", "a", "default", grace_period_seconds=90)
    assert again == first  # a longer grace period changes nothing
    shorter = cluster.delete("pods", "a", "default", grace_period_seconds=10)
    assert shorter["metadata"]["deletionGracePeriodSeconds"] == 10
    with pytest.raises(ApiError) as err:
        cluster.bind("default", "a", "n2")
    assert err.value.status == 409


async def test_finalizers_hold_deletion(cluster: MemoryCluster) -> None:
    cluster.create("nodes", node_object("n1", typed=True, meta={"finalizers": ["example.com/keep"]}))
    w = cluster.watch("nodes", resource_version=str(cluster.resource_version))
    held = cluster.delete("nodes", "n1")
    assert held["metadata"]["deletionTimestamp"] and cluster.count("nodes") == 1
    cluster.patch("nodes", "n1", {"metadata": {"finalizers": None}})
    assert cluster.count("nodes") == 0
    assert [t for t, _ in await drain(w)] == ["MODIFIED", "MODIFIED", "DELETED"]


def test_list_at_exact_rv_and_history_window() -> None:
    c = MemoryCluster(history_size=4)
    c.create("pods", api_pod("a"))
    rv = str(c.resource_version)
    c.create("pods", api_pod("b"))
    assert [
        p["metadata"]["name"]
        for p in c.list("pods", resource_version=rv, resource_version_match="Exact")["items"]
    ] == ["a"]
    for i in range(10):
        c.patch("pods", "b", {"metadata": {"labels": {"i": str(i)}}}, "default")
    with pytest.raises(ApiError) as err:
        c.list("pods", resource_version=rv, resource_version_match="Exact")
    assert err.value.status == 410
    with pytest.raises(ApiError) as err:
        c.list("pods", resource_version=str(c.resource_version + 5))
    assert err.value.status == 504 and err.value.reason == "Timeout"


def test_namespaces_do_not_bleed(cluster: MemoryCluster) -> None:
    for ns in ("a", "a-b", "ab", "b"):
        cluster.create("pods", api_pod("p", namespace=ns))
    assert [p["metadata"]["namespace"] for p in cluster.list("pods", "a")["items"]] == ["a"]
    # etcd key order: "a-b/p" < "a/p" because '-' sorts before '/'.
    assert [p["metadata"]["namespace"] for p in cluster.list("pods")["items"]] == ["a-b", "a", "ab", "b"]
    page = cluster.list("pods", "ab", limit=1)
    assert "continue" not in page["metadata"]


@pytest.mark.parametrize(
    ("meta", "status"),
    [
        pytest.param({"labels": {"a": 1}}, 400, id="label value not a string"),
        pytest.param({"annotations": "x"}, 400, id="annotations not a map"),
        pytest.param({"name": 5}, 400, id="name not a string"),
        pytest.param({"labels": {"bad key!": "v"}}, 422, id="invalid label key"),
        pytest.param({"annotations": {"k": "v" * 300_000}}, 422, id="annotations too large"),
    ],
)
def test_metadata_checks(cluster: MemoryCluster, meta: dict[str, Any], status: int) -> None:
    pod = api_pod("p")
    pod["metadata"].update(meta)
    with pytest.raises(ApiError) as err:
        cluster.create("pods", pod)
    assert err.value.status == status


async def test_slow_consumer_is_dropped() -> None:
    c = MemoryCluster(watch_queue_limit=3)
    w = c.watch("pods", resource_version=str(c.resource_version))
    for i in range(5):
        c.create("pods", api_pod(f"p{i}"))
    assert c.watch_count() == 0
    with pytest.raises(ApiConnectionError):
        await w.__anext__()


def test_status_subresource_update(cluster: MemoryCluster) -> None:
    cluster.create("pods", api_pod("a"))
    pod = cluster.get("pods", "a", "default")
    pod["status"] = {"phase": "Running"}
    pod["metadata"]["labels"] = {"ignored": "yes"}
    updated = cluster.update("pods", pod, subresource="status")
    assert updated["status"] == {"phase": "Running"} and "labels" not in updated["metadata"]
    assert [
        p["metadata"]["name"] for p in cluster.list("pods", field_selector="status.phase=Running")["items"]
    ] == ["a"]


async def test_fault_wildcards(cluster: MemoryCluster) -> None:
    cluster.fail_next("*", 2, 429)
    status, _ = await cluster.handle("GET", "/api/v1/nodes")
    assert status == 429
    with pytest.raises(ApiError) as err:
        await cluster.open_watch("/api/v1/pods", {"watch": "1"})
    assert err.value.status == 429 and err.value.reason == "TooManyRequests"
    status, _ = await cluster.handle("GET", "/api/v1/nodes")
    assert status == 200
    assert [v for v, _, _ in cluster.request_log] == ["list", "watch", "list"]


_ops = st.lists(st.tuples(st.sampled_from(["create", "delete", "label"]), st.integers(0, 30)), max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    initial=st.sets(st.integers(0, 30), max_size=25),
    page_size=st.integers(1, 7),
    between=st.lists(_ops, min_size=1, max_size=8),
    namespaced=st.booleans(),
)
def test_pages_always_form_the_first_page_snapshot(
    initial: set[int], page_size: int, between: list[list[tuple[str, int]]], namespaced: bool
) -> None:
    """Whatever is written between pages, the pages concatenate to the list as of page one."""
    c = MemoryCluster(seed=1)

    def pod(i: int) -> dict[str, Any]:
        return builders.pod(f"p{i:02d}", namespace=f"ns{i % 3}", containers=[builders.container("c")])

    for i in sorted(initial):
        c.create("pods", pod(i))
    ns = "ns1" if namespaced else None
    expected = [
        (p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"]["resourceVersion"])
        for p in c.list("pods", ns)["items"]
    ]
    got: list[tuple[str, str, str]] = []
    token: str | None = None
    round_ = 0
    while True:
        page = c.list("pods", ns, limit=page_size, continue_=token)
        got += [
            (p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"]["resourceVersion"])
            for p in page["items"]
        ]
        token = page["metadata"].get("continue")
        if not token:
            break
        remaining = page["metadata"]["remainingItemCount"]
        assert remaining == len(expected) - len(got)
        for op, i in between[round_ % len(between)]:
            exists = c.count("pods") and any(p["metadata"]["name"] == f"p{i:02d}" for p in c.objects("pods"))
            if op == "create" and not exists:
                c.create("pods", pod(i))
            elif op == "delete" and exists:
                c.delete("pods", f"p{i:02d}", f"ns{i % 3}")
            elif op == "label" and exists:
                c.patch("pods", f"p{i:02d}", {"metadata": {"labels": {"r": str(round_)}}}, f"ns{i % 3}")
        round_ += 1
    assert got == expected


async def test_writes_leave_every_earlier_version_as_it_was(cluster: MemoryCluster) -> None:
    """A merge patch shares what it does not change with the version it patches: the versions
    replayed from the history must still be the ones each write answered."""
    answers = [cluster.create("nodes", node_object("n1", typed=True, labels={"a": "1"}))]
    start = str(cluster.resource_version - 1)
    answers.append(cluster.patch("nodes", "n1", {"spec": {"unschedulable": True}}))  # metadata untouched
    answers.append(cluster.patch("nodes", "n1", {"metadata": {"labels": {"b": "2"}}}))
    answers.append(cluster.patch("nodes", "n1", {"status": {"phase": "Running"}}, subresource="status"))
    answers.append(cluster.patch("nodes", "n1", {"metadata": {"labels": {"a": None}}}))
    replayed = [obj for _, obj in await drain(cluster.watch("nodes", resource_version=start))]
    assert replayed == answers
    assert [a["metadata"]["resourceVersion"] for a in answers] == sorted(
        {a["metadata"]["resourceVersion"] for a in answers}, key=int
    )
    assert answers[1]["spec"] == {"unschedulable": True} and "b" not in answers[1]["metadata"]["labels"]
    assert answers[-1]["metadata"]["labels"] == {"b": "2"}
    assert answers[-1]["status"]["phase"] == "Running"
    # A write that changes nothing is no write.
    assert cluster.patch("nodes", "n1", {"metadata": {"labels": {"b": "2"}}}) == answers[-1]


async def test_stored_objects_are_kept_encoded_only(cluster: MemoryCluster) -> None:
    cluster.create("pods", api_pod("a"))
    cluster.bind("default", "a", "n1")
    cluster.patch("pods", "a", {"metadata": {"annotations": {"x": "y"}}}, "default")
    storage = cluster._store.storage(api.PODS)
    assert all(s._obj is None for s in storage.objects.values())
    assert all(e.new._obj is None and (e.old is None or e.old._obj is None) for e in storage.history)
    got = cluster.get("pods", "a", "default")
    assert got["spec"]["nodeName"] == "n1" and got["metadata"]["annotations"] == {"x": "y"}


def test_last_write_is_per_resource(cluster: MemoryCluster) -> None:
    assert cluster.last_write("pods") == cluster.last_write("nodes") == 0
    cluster.create("pods", api_pod("a"))
    pods_at = cluster.resource_version
    cluster.create("nodes", node_object("n1", typed=True))
    assert cluster.last_write("pods") == pods_at
    assert cluster.last_write("nodes") == cluster.resource_version > pods_at
    cluster.patch("pods", "a", {"metadata": {"labels": {"k": "v"}}}, "default")
    assert cluster.last_write("pods") == cluster.resource_version


async def test_a_decoded_watch_gets_the_committed_object_and_others_get_equal_lines(
    cluster: MemoryCluster,
) -> None:
    path = "/api/v1/namespaces/default/pods"
    first = await cluster.open_watch(path, {"watch": "1", "resourceVersion": "1"}, decoded=True)
    second = await cluster.open_watch(path, {"watch": "1", "resourceVersion": "1"}, decoded=True)
    plain = cluster.watch("pods", namespace="default", resource_version="1")
    cluster.create("pods", api_pod("a"))
    cluster.bind("default", "a", "n1")
    cluster.patch("pods", "a", {"metadata": {"annotations": {"x": "y"}}}, "default")
    cluster.delete("pods", "a", "default", grace_period_seconds=0)
    lines = [json.loads(line) for line in [await plain.__anext__() for _ in range(5)]]
    got = [(await first.next_event(), await second.next_event()) for _ in range(5)]
    for one, other in got:
        # One taker per event gets the committed object itself; the other decodes its line.
        assert {type(one), type(other)} == {dict, bytes}
    decoded = [[e if isinstance(e, dict) else json.loads(e) for e in pair] for pair in got]
    assert [a for a, _ in decoded] == [b for _, b in decoded] == lines
    assert [e["type"] for e in lines] == ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"]
    # The reader owns what it was handed: editing it changes nothing in the cluster.
    cluster.create("pods", api_pod("b"))
    pair = [await first.next_event(), await second.next_event()]
    event = next(e for e in pair if isinstance(e, dict))
    event["object"]["metadata"]["labels"] = {"edited": "yes"}
    event["object"]["spec"]["containers"].clear()
    stored = cluster.get("pods", "b", "default")
    assert "labels" not in stored["metadata"] and stored["spec"]["containers"]
    for w in (first, second, plain):
        w.close()
