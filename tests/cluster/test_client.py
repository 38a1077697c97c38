"""KubeClient against the in-memory cluster, over both transports (in process, and HTTP to the fake
API server). Error bodies are compared with what kube-apiserver 1.36 really answered."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.builders import api_pod
from tests.builders import node as node_object
from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import JSON_PATCH, KubeClient
from vgpu_scheduler.cluster.errors import (
    ApiError,
    is_already_exists,
    is_conflict,
    is_gone,
    is_invalid,
    is_not_found,
)
from vgpu_scheduler.standin.memory import MemoryCluster


def _no_managed(obj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(obj))
    out["metadata"].pop("managedFields", None)
    out["metadata"].pop("resourceVersion", None)
    return out


async def test_create_get_and_identity_fields(client: KubeClient) -> None:
    created = await client.create("pods", api_pod("a", labels={"app": "x"}))
    meta = created["metadata"]
    assert created["kind"] == "Pod" and created["apiVersion"] == "v1"
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z") and int(meta["resourceVersion"]) > 0
    # ObjectMeta comes back in kube-apiserver's field order.
    assert list(meta) == [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "labels",
    ]
    assert created["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert await client.get_pod("default", "a") == created


async def test_generate_name(client: KubeClient) -> None:
    pod = api_pod("")
    pod["metadata"] = {"generateName": "web-", "namespace": "default"}
    created = await client.create("pods", pod)
    name = created["metadata"]["name"]
    assert name.startswith("web-") and len(name) == len("web-") + 5


async def test_not_found_and_already_exists_bodies(client: KubeClient, fx: Any) -> None:
    with pytest.raises(ApiError) as err:
        await client.get_pod("default", "no-such-pod")
    assert is_not_found(err.value)
    # Same body as kube-apiserver (pods-binding.pod-not-found.response.json is the GET body too).
    assert err.value.body == fx.json("api/pods-binding.pod-not-found.response.json")
    await client.create("pods", api_pod("a"))
    with pytest.raises(ApiError) as err:
        await client.create("pods", api_pod("a"))
    assert is_already_exists(err.value)
    assert err.value.body["message"] == 'pods "a" already exists'
    with pytest.raises(ApiError) as err:
        await client.get_lease("hami-system", "nope")
    assert err.value.body["details"] == {"name": "nope", "group": "coordination.k8s.io", "kind": "leases"}
    assert err.value.message == 'leases.coordination.k8s.io "nope" not found'


async def test_validation_errors_are_422(client: KubeClient) -> None:
    with pytest.raises(ApiError) as err:
        await client.create("pods", api_pod("Bad_Name"))
    assert is_invalid(err.value) and err.value.reason == "Invalid"
    assert err.value.message.startswith('Pod "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name"')
    await client.create("pods", api_pod("ok"))
    with pytest.raises(ApiError) as err:
        await client.patch_pod_labels("default", "ok", {"hami.io/vgpu-node": "not valid!"})
    assert err.value.status == 422
    assert err.value.body["details"]["causes"][0]["field"] == "metadata.labels"


async def test_pagination_matches_the_fixture_pages(
    client: KubeClient, cluster: MemoryCluster, fx: Any
) -> None:
    cluster.seed_from_list(fx.pod_list())
    token = None
    for page in (1, 2, 3):
        want = fx.json(f"api/list-pods.limit2.page{page}.json")
        got = await client.list("pods", "default", limit=2, continue_=token)
        assert got["kind"] == "PodList"
        assert [i["metadata"]["name"] for i in got["items"]] == [i["metadata"]["name"] for i in want["items"]]
        assert all("kind" not in i for i in got["items"])  # list items carry no kind/apiVersion
        assert got["metadata"].get("remainingItemCount") == want["metadata"].get("remainingItemCount")
        token = got["metadata"].get("continue")
        if "continue" in want["metadata"]:
            assert api.decode_continue(token)[1] == api.decode_continue(want["metadata"]["continue"])[1]
        else:
            assert token is None
    # The seeded objects are the captured ones, byte for byte but for the resourceVersion.
    got_pod = await client.get_pod("default", "gpu-single")
    want_pod = next(p for p in fx.pod_list()["items"] if p["metadata"]["name"] == "gpu-single")
    assert _no_managed(got_pod) == _no_managed({"kind": "Pod", "apiVersion": "v1", **want_pod})


async def test_pages_are_a_consistent_snapshot(client: KubeClient, cluster: MemoryCluster) -> None:
    for i in range(7):
        cluster.create("pods", api_pod(f"p{i}"))
    first = await client.list("pods", limit=3)
    rv = first["metadata"]["resourceVersion"]
    cluster.delete("pods", "p4", "default")  # unbound: deleted at once
    cluster.create("pods", api_pod("p35"))
    cluster.patch("pods", "p5", {"metadata": {"labels": {"late": "yes"}}}, "default")
    rest = []
    token = first["metadata"]["continue"]
    while token:
        page = await client.list("pods", limit=3, continue_=token)
        assert page["metadata"]["resourceVersion"] == rv
        rest.extend(page["items"])
        token = page["metadata"].get("continue")
    names = [i["metadata"]["name"] for i in first["items"] + rest]
    assert names == [f"p{i}" for i in range(7)]  # as of the first page: p4 still there, no p35
    assert "labels" not in next(i for i in rest if i["metadata"]["name"] == "p5")["metadata"]
    items, list_rv = await client.list_all("pods", page_size=3)
    assert sorted(i["metadata"]["name"] for i in items) == ["p0", "p1", "p2", "p3", "p35", "p5", "p6"]
    assert int(list_rv) == cluster.resource_version
    # `each` maps every item of every page (as they arrive), and only those.
    seen: list[str] = []

    def named(item: dict[str, Any]) -> dict[str, Any]:
        seen.append(item["metadata"]["name"])
        return {"name": item["metadata"]["name"]}

    mapped, _ = await client.list_all("pods", page_size=3, each=named)
    assert sorted(seen) == sorted(m["name"] for m in mapped) == ["p0", "p1", "p2", "p3", "p35", "p5", "p6"]


async def test_expired_continue_is_410_like_the_fixture(
    client: KubeClient, cluster: MemoryCluster, fx: Any
) -> None:
    cluster.seed_from_list(fx.pod_list())
    page1 = await client.list("pods", "default", limit=2)
    cluster.compact()
    with pytest.raises(ApiError) as err:
        await client.list("pods", "default", limit=2, continue_=page1["metadata"]["continue"])
    assert is_gone(err.value)
    want = json.loads(fx.text("api/list-410-gone.expired-continue.txt").split("\n\n", 1)[1])
    assert err.value.body == want
    # The token in the 410 continues from the same place, at the current state.
    rest = await client.list("pods", "default", limit=10, continue_=want["metadata"]["continue"])
    assert [i["metadata"]["name"] for i in rest["items"]] == ["gpu-single", "gpu-two-containers", "no-gpu"]
    # list_all falls back to one full list.
    cluster.create("pods", api_pod("zz"))
    items, _ = await client.list_all("pods", "default", page_size=2)
    assert len(items) == 6


async def test_exact_resource_version_list(client: KubeClient, cluster: MemoryCluster, fx: Any) -> None:
    cluster.create("pods", api_pod("a"))
    rv = str(cluster.resource_version)
    cluster.create("pods", api_pod("b"))
    old = await client.list("pods", resource_version=rv, resource_version_match="Exact")
    assert [i["metadata"]["name"] for i in old["items"]] == ["a"]
    cluster.compact()
    with pytest.raises(ApiError) as err:
        await client.list("pods", resource_version=rv, resource_version_match="Exact")
    want = json.loads(fx.text("api/list-410-gone.resourceVersionMatch-exact.txt").split("\n\n", 1)[1])
    assert err.value.body == want


@pytest.mark.parametrize(
    ("labels", "fields", "names"),
    [
        pytest.param("app=web", None, ["a", "c"], id="label equals"),
        pytest.param("app!=web", None, ["b", "d"], id="label not equals"),
        pytest.param("app in (db)", None, ["b"], id="label in set"),
        pytest.param("!app", None, ["d"], id="label absent"),
        pytest.param(None, "spec.nodeName=n1", ["a", "b"], id="field nodeName"),
        pytest.param(None, "spec.nodeName=", ["c", "d"], id="field nodeName empty"),
        pytest.param("app=web", "spec.nodeName!=n1", ["c"], id="label and field"),
        pytest.param(None, "metadata.name=d", ["d"], id="field metadata.name"),
        pytest.param(None, "status.phase!=Pending", [], id="field status.phase matches none"),
    ],
)
async def test_list_selectors(
    client: KubeClient,
    cluster: MemoryCluster,
    labels: str | None,
    fields: str | None,
    names: list[str],
) -> None:
    for name, app, node in (("a", "web", "n1"), ("b", "db", "n1"), ("c", "web", None), ("d", None, None)):
        pod = api_pod(name, labels={"app": app} if app else {})
        if node:
            pod["spec"]["nodeName"] = node
        cluster.create("pods", pod)
    for limit in (500, 1):
        items, _ = await client.list_all(
            "pods", label_selector=labels, field_selector=fields, page_size=limit
        )
        assert [i["metadata"]["name"] for i in items] == names


async def test_bad_selectors_are_400(client: KubeClient) -> None:
    with pytest.raises(ApiError) as err:
        await client.list("pods", field_selector="spec.containers=x")
    assert err.value.status == 400 and err.value.message == "field label not supported: spec.containers"
    with pytest.raises(ApiError) as err:
        await client.list("pods", label_selector="a in (b")
    assert err.value.status == 400


STALE_PATCH = {"metadata": {"resourceVersion": "1", "annotations": {"hami.io/vgpu-node": "gpu-node-1"}}}
"""A merge patch whose resourceVersion precondition the fixture pod no longer meets (409)."""


async def test_merge_patch_precondition_conflict(client: KubeClient, cluster: MemoryCluster, fx: Any) -> None:
    cluster.seed_from_list(fx.pod_list())
    with pytest.raises(ApiError) as err:
        await client.patch_pod(
            "default",
            "gpu-single",
            STALE_PATCH,
        )
    assert is_conflict(err.value)
    assert err.value.body == fx.json("api/patch-409-conflict.json")
    current = await client.get_pod("default", "gpu-single")
    rv = current["metadata"]["resourceVersion"]
    ok = await client.patch_pod(
        "default", "gpu-single", {"metadata": {"resourceVersion": rv, "annotations": {"x": "1"}}}
    )
    assert int(ok["metadata"]["resourceVersion"]) > int(rv)
    removed = await client.patch_pod("default", "gpu-single", {"metadata": {"annotations": {"x": None}}})
    assert "annotations" not in removed["metadata"] or "x" not in removed["metadata"]["annotations"]


async def test_pod_merge_patch_response_matches_fixture(
    client: KubeClient, cluster: MemoryCluster, fx: Any
) -> None:
    cluster.seed_from_list(fx.pod_list())
    want = fx.json("api/pod-merge-patch.response.json")
    patch = {
        "metadata": {
            "annotations": want["metadata"]["annotations"],
            "labels": {"hami.io/vgpu-node": "gpu-node-1"},
        }
    }
    got = await client.patch_pod("default", "gpu-single", patch)
    # Same document in the same key order (managedFields are not maintained by the fake).
    assert json.dumps(_no_managed(got)) == json.dumps(_no_managed(want))


async def test_node_merge_patch_response_matches_fixture(
    client: KubeClient, cluster: MemoryCluster, fx: Any
) -> None:
    cluster.seed_from_list([fx.json("node/node.hami-registered.raw.json")])
    want = fx.json("api/node-merge-patch.response.json")
    got = await client.patch_node(
        "gpu-node-1",
        {"metadata": {"annotations": {"hami.io/node-handshake": "Requesting_2026-11-29 21:03:30"}}},
    )
    assert json.dumps(_no_managed(got)) == json.dumps(_no_managed(want))


async def test_write_without_answer_writes_the_same_and_answers_nothing(
    client: KubeClient, cluster: MemoryCluster
) -> None:
    cluster.create("nodes", node_object("n1", typed=True))
    before = cluster.resource_version
    assert await client.patch_node("n1", {"metadata": {"annotations": {"x": "1"}}}, answer=False) == {}
    written = await client.get_node("n1")
    assert written["metadata"]["annotations"] == {"x": "1"}
    assert written["metadata"]["resourceVersion"] == str(before + 1) == str(cluster.resource_version)
    cluster.create("pods", api_pod("a"))
    assert await client.create("pods", api_pod("b"), answer=False) == {}
    assert (await client.get_pod("default", "b"))["metadata"]["name"] == "b"
    status = {"status": {"phase": "Running"}}
    assert await client.patch("pods", "a", status, "default", subresource="status", answer=False) == {}
    assert (await client.get_pod("default", "a"))["status"]["phase"] == "Running"
    uid = (await client.get_pod("default", "b"))["metadata"]["uid"]
    assert await client.bind_pod("default", "b", uid, "n1", answer=False) == {}
    assert (await client.get_pod("default", "b"))["spec"]["nodeName"] == "n1"


async def test_write_without_answer_still_raises_the_error_status(
    client: KubeClient, cluster: MemoryCluster, fx: Any
) -> None:
    cluster.seed_from_list(fx.pod_list())
    with pytest.raises(ApiError) as err:
        await client.patch_pod(
            "default",
            "gpu-single",
            STALE_PATCH,
            answer=False,
        )
    assert err.value.body == fx.json("api/patch-409-conflict.json")
    with pytest.raises(ApiError) as err:
        await client.bind_pod("default", "no-such-pod", "x", "gpu-node-2", answer=False)
    assert err.value.body == fx.json("api/pods-binding.pod-not-found.response.json")


async def test_json_patch_is_all_or_nothing(client: KubeClient, cluster: MemoryCluster) -> None:
    cluster.create("nodes", node_object("n1", annotations={"lock": "mine"}, typed=True))
    before = cluster.get("nodes", "n1")
    ops = [
        {"op": "add", "path": "/metadata/labels", "value": {"a": "b"}},
        {"op": "test", "path": "/metadata/annotations/lock", "value": "yours"},
        {"op": "remove", "path": "/metadata/annotations/lock"},
    ]
    with pytest.raises(ApiError) as err:
        await client.patch_node("n1", ops, content_type=JSON_PATCH)
    assert err.value.status == 422
    assert cluster.get("nodes", "n1") == before  # the first operation's edit was not kept
    ops[1]["value"] = "mine"
    done = await client.patch_node("n1", ops, content_type=JSON_PATCH)
    assert done["metadata"]["labels"] == {"a": "b"} and "lock" not in done["metadata"]["annotations"]


async def test_noop_patch_keeps_resource_version(client: KubeClient, cluster: MemoryCluster) -> None:
    cluster.create("nodes", node_object("n1", labels={"a": "b"}, typed=True))
    before = cluster.resource_version
    same = await client.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    assert cluster.resource_version == before and same["metadata"]["resourceVersion"] == str(before)


async def test_main_resource_ignores_status_and_status_subresource_ignores_the_rest(
    client: KubeClient, cluster: MemoryCluster
) -> None:
    cluster.create("nodes", node_object("n1", typed=True))
    node = await client.patch_node("n1", {"status": {"capacity": {"nvidia.com/gpu": "4"}}})
    assert "capacity" not in node.get("status", {})
    node = await client.patch(
        "nodes",
        "n1",
        {"status": {"capacity": {"nvidia.com/gpu": "4"}}, "metadata": {"labels": {"x": "y"}}},
        subresource="status",
    )
    assert node["status"]["capacity"] == {"nvidia.com/gpu": "4"} and "labels" not in node["metadata"]


async def test_pod_spec_is_immutable_except_through_binding(
    client: KubeClient, cluster: MemoryCluster
) -> None:
    cluster.create("pods", api_pod("a"))
    with pytest.raises(ApiError) as err:
        await client.patch_pod("default", "a", {"spec": {"nodeName": "n1"}})
    assert err.value.status == 422 and "pod updates may not change fields" in err.value.message
    await client.patch_pod("default", "a", {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}})


async def test_binding_success_and_errors_match_fixtures(
    client: KubeClient, cluster: MemoryCluster, fx: Any
) -> None:
    request = fx.json("api/pods-binding.request.json")
    pod = api_pod("manual-bind", uid=request["metadata"]["uid"])
    cluster.seed_from_list([pod])
    ok = await client.bind_pod("default", "manual-bind", request["metadata"]["uid"], "gpu-node-2")
    assert ok == fx.json("api/pods-binding.response.json")
    bound = await client.get_pod("default", "manual-bind")
    assert bound["spec"]["nodeName"] == "gpu-node-2"
    assert bound["status"]["conditions"][0]["type"] == "PodScheduled"
    assert bound["status"]["conditions"][0]["status"] == "True"

    with pytest.raises(ApiError) as err:
        await client.bind_pod("default", "manual-bind", request["metadata"]["uid"], "gpu-node-2")
    assert err.value.body == fx.json("api/pods-binding.already-bound.response.json")

    cluster.seed_from_list([api_pod("manual-bind-uid", uid="0a040c22-2812-417f-8e4f-91e7fe6f228d")])
    with pytest.raises(ApiError) as err:
        await client.bind_pod(
            "default", "manual-bind-uid", "00000000-0000-0000-0000-000000000000", "gpu-node-2"
        )
    assert is_conflict(err.value)
    assert err.value.body == fx.json("api/pods-binding.wrong-uid.response.json")

    with pytest.raises(ApiError) as err:
        await client.bind_pod("default", "no-such-pod", "x", "gpu-node-2")
    assert err.value.body == fx.json("api/pods-binding.pod-not-found.response.json")


async def test_bind_body_is_the_scheduler_binding(cluster: MemoryCluster, fx: Any) -> None:
    sent: list[Any] = []

    class Recorder:
        async def request(self, method: str, path: str, **kw: Any) -> tuple[int, dict[str, Any]]:
            sent.append((method, path, kw["json_body"]))
            return 201, {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            }

        async def close(self) -> None:
            return None

    kc = KubeClient(Recorder())  # type: ignore[arg-type]
    want = fx.json("extender/binding-api.request.json")
    await kc.bind_pod("default", "gpu-single", want["metadata"]["uid"], "gpu-node-1")
    assert sent == [("POST", "/api/v1/namespaces/default/pods/gpu-single/binding", want)]


async def test_delete_graceful_then_force(client: KubeClient, cluster: MemoryCluster) -> None:
    cluster.create("pods", api_pod("a"))
    cluster.bind("default", "a", "n1")
    pending = await client.delete("pods", "a", "default")
    assert pending["metadata"]["deletionGracePeriodSeconds"] == 30 and pending["metadata"]["generation"] == 2
    assert (await client.get_pod("default", "a"))["metadata"]["deletionTimestamp"]
    gone = await client.delete("pods", "a", "default", grace_period_seconds=0)
    assert gone["metadata"]["deletionGracePeriodSeconds"] == 0
    with pytest.raises(ApiError) as err:
        await client.get_pod("default", "a")
    assert is_not_found(err.value)
    cluster.create("nodes", node_object("n1", typed=True))
    await client.delete("nodes", "n1")
    assert cluster.count("nodes") == 0


async def test_delete_preconditions(client: KubeClient, cluster: MemoryCluster) -> None:
    cluster.create("nodes", node_object("n1", typed=True))
    with pytest.raises(ApiError) as err:
        await client.delete("nodes", "n1", uid="other")
    assert is_conflict(err.value)
    assert "Key: /registry/minions/n1" in err.value.message
    assert "Precondition failed: UID in precondition: other" in err.value.message


async def test_events_in_both_apis(client: KubeClient, cluster: MemoryCluster, fx: Any) -> None:
    core = fx.json("api/event.failed-scheduling-series.core-v1.raw.json")
    new = fx.json("api/event.failed-scheduling-series.events-k8s-io-v1.raw.json")
    cluster.seed_from_list([core])
    name = core["metadata"]["name"]
    assert _no_managed(await client.get("events.events.k8s.io", name, "default")) == _no_managed(new)
    assert _no_managed(await client.get("events", name, "default")) == _no_managed(core)
    listed = await client.list("events", "default", field_selector="involvedObject.name=reject-all")
    assert len(listed["items"]) == 1
    listed = await client.list("events.events.k8s.io", "default", field_selector="regarding.name=reject-all")
    assert len(listed["items"]) == 1 and listed["items"][0]["note"] == core["message"]

    event = {
        "metadata": {"name": "gpu-single.1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "gpu-single", "apiVersion": "v1"},
        "reason": "FilteringSucceed",
        "message": "Successfully filtered to node gpu-node-1",
        "type": "Normal",
        "source": {"component": "hami-scheduler"},
    }
    created = await client.create_event("default", event)
    assert created["kind"] == "Event" and created["source"] == {"component": "hami-scheduler"}
    assert created["firstTimestamp"] is None and created["reportingComponent"] == ""
    with pytest.raises(ApiError) as err:  # events.k8s.io/v1 insists on the new fields
        await client.create("events.events.k8s.io", {"metadata": {"name": "x"}, "regarding": {}}, "default")
    assert err.value.status == 422 and "eventTime: Required value" in err.value.message


async def test_leases(client: KubeClient, cluster: MemoryCluster, fx: Any) -> None:
    raw = fx.json("api/lease.hami-scheduler.raw.json")
    cluster.seed_from_list([raw])
    lease = await client.get_lease("hami-system", "hami-scheduler")
    assert _no_managed(lease) == _no_managed(raw)
    leases = await client.list_leases("hami-system", field_selector="metadata.name=hami-scheduler")
    assert [x["spec"]["holderIdentity"] for x in leases] == ["vm_87acf6b1-cee0-4f9e-b7be-2e05de374587"]
    renewed = dict(lease)
    renewed["spec"] = {**lease["spec"], "renewTime": "2026-11-29T21:05:41.477124Z"}
    updated = await client.replace("leases", "hami-scheduler", renewed, "hami-system")
    assert updated["spec"]["renewTime"] == "2026-11-29T21:05:41.477124Z"
    with pytest.raises(ApiError) as err:  # PUT with the old resourceVersion: 409
        await client.replace("leases", "hami-scheduler", renewed, "hami-system")
    assert is_conflict(err.value)
    assert err.value.body["details"] == {
        "name": "hami-scheduler",
        "group": "coordination.k8s.io",
        "kind": "leases",
    }


async def test_patch_pod_labels(client: KubeClient, cluster: MemoryCluster) -> None:
    cluster.create("pods", api_pod("a", labels={"keep": "1", "drop": "1"}))
    pod = await client.patch_pod_labels("default", "a", {"hami.io/scheduler-role": "leader", "drop": None})
    assert pod["metadata"]["labels"] == {"keep": "1", "hami.io/scheduler-role": "leader"}
    with pytest.raises(ApiError) as err:
        await client.patch_pod_labels("default", "a", {"x": "y"}, resource_version="1")
    assert is_conflict(err.value)


async def test_unknown_resource_path(client: KubeClient) -> None:
    status, body = await client.transport.request("GET", "/api/v1/configmaps")
    assert status == 404 and body["reason"] == "NotFound"


async def test_injected_failures(client: KubeClient, cluster: MemoryCluster) -> None:
    cluster.create("pods", api_pod("a"))
    cluster.fail_next("get", 2, 503, resource="pods")
    for _ in range(2):
        with pytest.raises(ApiError) as err:
            await client.get_pod("default", "a")
        assert err.value.status == 503 and err.value.reason == "ServiceUnavailable"
    assert (await client.get_pod("default", "a"))["metadata"]["name"] == "a"
    cluster.fail_next("create", 1, 500, resource="pods/binding", message="etcd is down")
    with pytest.raises(ApiError) as err:
        await client.bind_pod("default", "a", "", "n1")
    assert err.value.message == "etcd is down"
    await client.bind_pod("default", "a", "", "n1")
