"""Pure API semantics: paths, selectors, continue tokens, patches, the two Event shapes."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import pod
from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.standin.memory import selectors, validation


@pytest.mark.parametrize(
    ("rt", "ns", "name", "sub", "path"),
    [
        pytest.param(api.PODS, None, None, None, "/api/v1/pods", id="/api/v1/pods"),
        pytest.param(api.PODS, "default", None, None, "/api/v1/namespaces/default/pods",
                     id="/api/v1/namespaces/default/pods"),
        pytest.param(api.PODS, "default", "p", "binding", "/api/v1/namespaces/default/pods/p/binding",
                     id="/api/v1/namespaces/default/pods/p/binding"),
        pytest.param(api.NODES, "ignored", "n1", None, "/api/v1/nodes/n1", id="/api/v1/nodes/n1"),
        pytest.param(api.NODES, None, "n1", "status", "/api/v1/nodes/n1/status",
                     id="/api/v1/nodes/n1/status"),
        pytest.param(
            api.LEASES,
            "hami-system",
            "hami-scheduler",
            None,
            "/apis/coordination.k8s.io/v1/namespaces/hami-system/leases/hami-scheduler",
            id="/apis/coordination.k8s.io/v1/namespaces/hami-system/leases/hami-scheduler",
        ),
        pytest.param(api.EVENTS_V1, "default", None, None, "/apis/events.k8s.io/v1/namespaces/default/events",
                     id="/apis/events.k8s.io/v1/namespaces/default/events"),
        pytest.param(api.RESOURCEQUOTAS, "team", "q", None, "/api/v1/namespaces/team/resourcequotas/q",
                     id="/api/v1/namespaces/team/resourcequotas/q"),
        pytest.param(api.NAMESPACES, None, "default", "status", "/api/v1/namespaces/default/status",
                     id="/api/v1/namespaces/default/status"),
    ],
)
def test_paths_round_trip(
    rt: api.ResourceType, ns: str | None, name: str | None, sub: str | None, path: str
) -> None:
    assert api.resource_path(rt, ns, name, sub) == path
    info = api.parse_path(path)
    assert info is not None
    assert (info.rt, info.namespace, info.name, info.subresource) == (
        rt,
        ns if rt.namespaced else None,
        name,
        sub,
    )


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/configmaps",
        "/apis/apps/v1/deployments",
        "/healthz",
        "/api/v1/namespaces/x/nodes",
        "/api/v1/pods/a/b/c/d",
    ],
)
def test_unknown_paths(path: str) -> None:
    assert api.parse_path(path) is None


def test_resource_lookup() -> None:
    assert api.resource_type("events") is api.EVENTS
    assert api.resource_type("events.events.k8s.io") is api.EVENTS_V1
    assert api.resource_type("leases.coordination.k8s.io") is api.LEASES
    with pytest.raises(ValueError, match="unknown resource"):
        api.resource_type("deployments")


LABELS = {"app": "gpu", "tier": "web", "hami.io/vgpu-node": "gpu-node-1", "n": "5"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("app=gpu", True),
        ("app==gpu", True),
        ("app=cpu", False),
        ("app!=cpu", True),
        ("missing!=x", True),
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("app in (cpu, gpu)", True),
        ("app in (cpu)", False),
        ("app notin (cpu)", True),
        ("missing notin (cpu)", True),
        ("missing in (cpu)", False),
        ("app=gpu,tier=web", True),
        ("app=gpu, tier=db", False),
        ("hami.io/vgpu-node=gpu-node-1", True),
        ("n>3", True),
        ("n<3", False),
        ("app=gpu,tier in (web,db),!missing", True),
    ],
)
def test_label_selector(selector: str, matches: bool) -> None:
    assert selectors.parse_label_selector(selector).matches(LABELS) is matches


@pytest.mark.parametrize(
    "selector", ["app=", "=x", "app in (a", "app in a", "app=a b", "app=bad value!", "n>x", "a,,"]
)
def test_label_selector_errors(selector: str) -> None:
    if selector == "app=":  # an empty value is legal: "app=" matches app=""
        assert selectors.parse_label_selector(selector).matches({"app": ""})
        return
    with pytest.raises(ValueError):
        selectors.parse_label_selector(selector)


POD = pod("p", namespace="ns", spec={"nodeName": "n1", "hostNetwork": True}, phase="Running")


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("spec.nodeName=n1", True),
        ("spec.nodeName==n1", True),
        ("spec.nodeName!=n1", False),
        ("spec.nodeName=", False),
        ("metadata.name=p,metadata.namespace=ns", True),
        ("status.phase!=Succeeded,status.phase!=Failed", True),
        ("spec.hostNetwork=true", True),
        ("spec.schedulerName=", True),  # missing fields compare as ""
    ],
)
def test_field_selector(selector: str, matches: bool) -> None:
    assert selectors.parse_field_selector(selector, api.PODS).matches(POD) is matches


def test_field_selector_rejects_unsupported_fields() -> None:
    with pytest.raises(ValueError, match=r"field label not supported: spec\.containers"):
        selectors.parse_field_selector("spec.containers=x", api.PODS)
    with pytest.raises(ValueError, match=r"field label not supported: spec\.nodeName"):
        selectors.parse_field_selector("spec.nodeName=x", api.NODES)
    assert selectors.parse_field_selector("involvedObject.name=x", api.EVENTS).terms
    assert selectors.parse_field_selector("regarding.name=x", api.EVENTS_V1).terms


def test_continue_token_matches_the_apiserver_encoding(fx: Any) -> None:
    page1 = fx.json("api/list-pods.limit2.page1.json")
    token = page1["metadata"]["continue"]
    assert api.decode_continue(token) == (422, "gpu-init-app\x00")
    assert api.encode_continue(422, "gpu-init-app\x00") == token


@pytest.mark.parametrize("token", ["!!!", "eyJ2IjoieCJ9", api.encode_continue(5, "")])
def test_continue_token_errors(token: str) -> None:
    with pytest.raises(ValueError, match="continue key is not valid"):
        api.decode_continue(token)


@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [  # RFC 7386 appendix A
        pytest.param({"a": "b"}, {"a": "c"}, {"a": "c"}, id="replace a value"),
        pytest.param({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}, id="add a member"),
        pytest.param({"a": "b"}, {"a": None}, {}, id="null removes a member"),
        pytest.param({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}, id="remove one of two"),
        pytest.param({"a": ["b"]}, {"a": "c"}, {"a": "c"}, id="array replaced by a value"),
        pytest.param({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}, id="value replaced by an array"),
        pytest.param({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}},
                     id="nested replace and remove"),
        pytest.param({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}, id="array replaced not merged"),
        pytest.param(["a", "b"], ["c", "d"], ["c", "d"], id="array by array"),
        pytest.param({"a": "b"}, ["c"], ["c"], id="object replaced by an array"),
        pytest.param({"a": "foo"}, None, None, id="null patch"),
        pytest.param({"a": "foo"}, "bar", "bar", id="string patch"),
        pytest.param({"e": None}, {"a": 1}, {"e": None, "a": 1}, id="existing null kept"),
        pytest.param([1, 2], {"a": "b", "c": None}, {"a": "b"}, id="array target replaced by an object"),
        pytest.param({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}},
                     id="null inside a new object dropped"),
    ],
)
def test_merge_patch_rfc7386_examples(target: Any, patch: Any, result: Any) -> None:
    before = copy.deepcopy(target)
    assert api.merge_patch(target, patch) == result
    assert target == before  # never mutates its input


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=2), children, max_size=3)
    ),
    max_leaves=10,
)
json_objects = st.dictionaries(st.text(max_size=2), json_values, max_size=4)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


@given(json_objects, json_objects)
def test_merge_patch_properties(target: dict[str, Any], patch: dict[str, Any]) -> None:
    once = api.merge_patch(target, patch)
    # Idempotent, and every non-null patch value ends up in the result.
    assert api.merge_patch(once, patch) == once
    for key, value in patch.items():
        if value is None:
            assert key not in once
        elif not isinstance(value, dict):
            assert once[key] == value
        else:
            assert isinstance(once[key], dict)


def test_json_patch_operations() -> None:
    doc: dict[str, Any] = {"metadata": {"annotations": {"a": "1"}}, "spec": {"list": [1, 2]}}
    out = api.json_patch(
        doc,
        [
            {"op": "add", "path": "/metadata/annotations/b~1c", "value": "2"},
            {"op": "replace", "path": "/metadata/annotations/a", "value": "x"},
            {"op": "add", "path": "/spec/list/-", "value": 3},
            {"op": "remove", "path": "/spec/list/0"},
            {"op": "copy", "from": "/spec/list", "path": "/spec/copy"},
            {"op": "move", "from": "/spec/copy", "path": "/spec/moved"},
            {"op": "test", "path": "/spec/moved", "value": [2, 3]},
        ],
    )
    assert out == {
        "metadata": {"annotations": {"a": "x", "b/c": "2"}},
        "spec": {"list": [2, 3], "moved": [2, 3]},
    }
    assert doc["spec"]["list"] == [1, 2]
    with pytest.raises(api.PatchError, match="test failed"):
        api.json_patch(doc, [{"op": "test", "path": "/spec/list", "value": []}])
    with pytest.raises(api.PatchError, match="does not exist"):
        api.json_patch(doc, [{"op": "replace", "path": "/nope/x", "value": 1}])


@pytest.mark.parametrize("name", ["scheduled", "failed-scheduling-series"])
def test_event_shapes_convert_like_the_apiserver(fx: Any, name: str) -> None:
    core = fx.json(f"api/event.{name}.core-v1.raw.json")
    new = fx.json(f"api/event.{name}.events-k8s-io-v1.raw.json")
    stored = api.event_to_core(new)
    assert {"kind": "Event", "apiVersion": "v1", **stored} == core
    # Key order too: kube-apiserver's bytes.
    assert list({"kind": 0, "apiVersion": 0, **stored}) == list(core)
    assert api.event_to_events_v1(stored) == new
    assert list(api.event_to_events_v1(stored)) == list(new)


def test_bookmark_object_is_the_fixture_shape(fx: Any) -> None:
    lines = fx.text("api/watch-pods.stream.jsonl").splitlines()
    bookmark = json.loads(lines[-1])
    assert bookmark["type"] == "BOOKMARK"
    assert api.bookmark_object(api.PODS, 399) == bookmark["object"]


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("app", True),
        ("hami.io/vgpu-node", True),
        ("a/b/c", False),
        ("-bad", False),
        ("UPPER.io/x", False),
        ("x" * 64, False),
        ("ok_name.1", True),
    ],
)
def test_qualified_names(key: str, ok: bool) -> None:
    assert (selectors.qualified_name_error(key) is None) is ok


@pytest.mark.parametrize(
    ("value", "ok"), [("", True), ("gpu-node-1", True), ("a b", False), ("-x", False), ("x" * 64, False)]
)
def test_label_values(value: str, ok: bool) -> None:
    assert (selectors.label_value_error(value) is None) is ok


def test_path_segments_are_percent_encoded_only_when_needed() -> None:
    plain = api.resource_path(api.PODS, "team-a", "gpu.pod_1~x")
    assert plain == "/api/v1/namespaces/team-a/pods/gpu.pod_1~x"
    path = api.resource_path(api.PODS, "team", "a b/ü")
    assert path == "/api/v1/namespaces/team/pods/a%20b%2F%C3%BC"
    info = api.parse_path(path)
    assert info is not None and (info.namespace, info.name) == ("team", "a b/ü")


class _Text(str):
    """A str subclass: still a string for ObjectMeta."""


def test_meta_value_types() -> None:
    validation.check_meta_types(api.PODS, {"annotations": {"a": "1", "b": _Text("2")}, "labels": {}})
    for bad in ({"a": "1", "b": 2}, {"a": None}):
        with pytest.raises(ApiError) as err:
            validation.check_meta_types(api.PODS, {"annotations": bad})
        assert err.value.status == 400 and "ObjectMeta.metadata.annotations" in err.value.message


def test_validation_errors_are_the_same_when_asked_again() -> None:
    obj = {
        "metadata": {
            "name": "Bad_Name",
            "labels": {"ok": "fine", "bad key!": "x", "k": "bad value!"},
            "annotations": {"good/key": "v", "-bad": "v", "Upper/Case": "v"},
        },
        "spec": {"containers": [{"name": "c"}]},
    }
    first = validation.validate(api.PODS, copy.deepcopy(obj))
    fields = ["metadata.name", "metadata.labels", "metadata.labels", "metadata.annotations"]
    assert [f for f, _, _ in first] == fields
    assert validation.validate(api.PODS, copy.deepcopy(obj)) == first  # answered from the caches
    obj["metadata"]["annotations"] = {"big": "x" * (256 * 1024)}
    assert [r for _, r, _ in validation.validate(api.PODS, obj)[-1:]] == ["FieldValueTooLong"]
