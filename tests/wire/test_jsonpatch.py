"""RFC 6902 diff and apply: examples, RFC appendix cases, and the round-trip property."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import container, pod
from vgpu_scheduler.wire.jsonpatch import (
    JsonPatchError,
    _json_equal_strict,
    apply_patch,
    escape_token,
    json_copy,
    json_equal,
    make_patch,
    unescape_token,
)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_keys = st.sampled_from(["a", "b", "", "~", "/", "a/b", "~1", "0", "-", "nvidia.com/gpu"]) | st.text(
    max_size=4
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(json_keys, children, max_size=5),
    max_leaves=25,
)


def _reordered(value: Any) -> Any:
    """The same JSON value with every object's keys in reverse order."""
    if isinstance(value, dict):
        return {k: _reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reordered(v) for v in value]
    return value


def _numbers_as_floats(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _numbers_as_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers_as_floats(v) for v in value]
    return float(value) if type(value) is int else value


@settings(max_examples=400)
@given(json_values, json_values)
def test_fast_json_equality_agrees_with_the_strict_one(a: Any, b: Any) -> None:
    # The fast path (C inequality, then equal encodings) answers as the recursive definition
    # does, including its subtle cases: key order, 1 vs 1.0, true vs 1.
    for x, y in ((a, b), (a, _reordered(a)), (a, _numbers_as_floats(a)), (a, copy.deepcopy(a))):
        assert json_equal(x, y) == _json_equal_strict(x, y)
    assert not json_equal([True], [1]) and not json_equal({"a": 1}, {"a": True})
    assert json_equal({"a": 1, "b": 2}, {"b": 2, "a": 1.0})


@settings(max_examples=200)
@given(json_values)
def test_json_copy_is_a_deep_copy_of_the_same_types(a: Any) -> None:
    copied = json_copy(a)
    assert _json_equal_strict(copied, a) and repr(copied) == repr(a)  # same types, same key order
    if isinstance(a, dict | list) and a:
        assert copied is not a
    odd = {"big": 2**70, "not json": Exception("x")}  # what msgspec cannot encode: deepcopy's copy
    copied_odd = json_copy(odd)
    assert copied_odd["big"] == 2**70 and copied_odd["not json"] is not odd["not json"]


@settings(max_examples=200)
@given(json_values, json_values, st.booleans())
def test_patch_round_trip(a: Any, b: Any, share: bool) -> None:
    before = copy.deepcopy(a)
    ops = make_patch(a, b)
    assert json_equal(apply_patch(a, ops, share=share), b)
    assert json_equal(a, before)  # neither function mutates its input


@settings(max_examples=200)
@given(json_values, st.lists(json_values, min_size=1, max_size=4))
def test_copy_on_write_gives_the_deep_copy_result_and_never_edits_its_input(a: Any, steps: list[Any]) -> None:
    """A chain of patches (each result the next one's input) with copy-on-write: same results as
    with a deep copy, and no input of the chain changed by a later patch sharing its parts."""
    docs, shared, deep = [a], a, copy.deepcopy(a)
    snapshots = [copy.deepcopy(a)]
    for target in steps:
        ops = make_patch(deep, target)
        deep = apply_patch(deep, ops)
        shared = apply_patch(shared, ops, share=True)
        assert json_equal(shared, deep)
        docs.append(shared)
        snapshots.append(copy.deepcopy(shared))
    for doc, snapshot in zip(docs, snapshots, strict=True):
        assert json_equal(doc, snapshot)


def test_copy_on_write_copies_only_the_edited_path() -> None:
    doc = {"metadata": {"annotations": {"lock": "x", "other": "y"}, "labels": {"a": "b"}}, "spec": {"c": [1]}}
    path = "/metadata/annotations/lock"
    ops = [{"op": "test", "path": path, "value": "x"}, {"op": "remove", "path": path}]
    out = apply_patch(doc, ops, share=True)
    assert out == {"metadata": {"annotations": {"other": "y"}, "labels": {"a": "b"}}, "spec": {"c": [1]}}
    assert doc["metadata"]["annotations"] == {"lock": "x", "other": "y"}
    assert out["spec"] is doc["spec"] and out["metadata"]["labels"] is doc["metadata"]["labels"]
    assert out is not doc and out["metadata"] is not doc["metadata"]


@given(json_values)
def test_no_ops_for_equal_documents(a: Any) -> None:
    assert make_patch(a, copy.deepcopy(a)) == []


@given(st.lists(json_values, max_size=3), st.lists(json_values, min_size=1, max_size=3))
def test_list_edits_stay_small(head: list[Any], tail: list[Any]) -> None:
    """Appending to a list never rewrites what was already there."""
    ops = make_patch({"l": head}, {"l": [*head, *tail]})
    assert ops == [{"op": "add", "path": "/l/-", "value": v} for v in tail]


POD = pod(
    "p",
    namespace=None,
    spec={
        "schedulerName": "default-scheduler",
        "containers": [container("c", env=[{"name": "FOO", "value": "bar"}], limits={})],
    },
)


@pytest.mark.parametrize(
    ("edit", "ops"),
    [
        pytest.param(
            lambda p: p["spec"].__setitem__("schedulerName", "hami-scheduler"),
            [{"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"}],
            id="replace schedulerName",
        ),
        pytest.param(
            lambda p: p["spec"]["containers"][0]["env"].append({"name": "X", "value": "1"}),
            [{"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "X", "value": "1"}}],
            id="append an env entry",
        ),
        pytest.param(
            lambda p: p["spec"]["containers"][0]["resources"]["limits"].__setitem__(
                "nvidia.com/gpucores", "100"
            ),
            [
                {
                    "op": "add",
                    "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores",
                    "value": "100",
                }
            ],
            id="add a limit with an escaped name",
        ),
        pytest.param(
            lambda p: p["spec"].__setitem__("runtimeClassName", "nvidia"),
            [{"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"}],
            id="add runtimeClassName",
        ),
        pytest.param(
            lambda p: p["metadata"].__setitem__("annotations", {"hami.io/webhook": "mutated"}),
            [{"op": "add", "path": "/metadata/annotations", "value": {"hami.io/webhook": "mutated"}}],
            id="add annotations",
        ),
        pytest.param(lambda p: p["metadata"].pop("name"), [{"op": "remove", "path": "/metadata/name"}],
                     id="remove the name"),
        pytest.param(
            lambda p: p["spec"]["containers"][0]["env"].insert(0, {"name": "A"}),
            [{"op": "add", "path": "/spec/containers/0/env/0", "value": {"name": "A"}}],
            id="insert an env entry first",
        ),
        pytest.param(
            lambda p: p["spec"]["containers"][0]["env"].pop(),
            [{"op": "remove", "path": "/spec/containers/0/env/0"}],
            id="remove the last env entry",
        ),
    ],
)
def test_semantic_ops(edit: Any, ops: list[dict[str, Any]]) -> None:
    after = copy.deepcopy(POD)
    edit(after)
    assert make_patch(POD, after) == ops
    assert apply_patch(POD, ops) == after


@pytest.mark.parametrize(
    ("a", "b", "ops"),
    [
        pytest.param(1, True, [{"op": "replace", "path": "", "value": True}],
                     id="root replaced: true is not 1"),
        pytest.param({"x": 0}, {"x": False}, [{"op": "replace", "path": "/x", "value": False}],
                     id="false is not 0"),
        pytest.param({"x": 1}, {"x": 1.0}, [], id="1 equals 1.0"),
        pytest.param([1, 2, 3], [1, 3], [{"op": "remove", "path": "/1"}], id="remove from a list"),
        pytest.param([1, 2, 3], [1, 9, 3], [{"op": "replace", "path": "/1", "value": 9}],
                     id="replace in a list"),
        pytest.param(
            [1, 2],
            [1, 5, 6, 2],
            [{"op": "add", "path": "/1", "value": 5}, {"op": "add", "path": "/2", "value": 6}],
            id="insert into a list",
        ),
        pytest.param(
            {"a/b": 1, "~": 2},
            {"a/b": 3},
            [{"op": "replace", "path": "/a~1b", "value": 3}, {"op": "remove", "path": "/~0"}],
            id="escaped keys",
        ),
    ],
)
def test_diff_examples(a: Any, b: Any, ops: list[dict[str, Any]]) -> None:
    assert make_patch(a, b) == ops
    assert json_equal(apply_patch(a, ops), b)


@pytest.mark.parametrize(
    ("raw", "escaped"), [("nvidia.com/gpu", "nvidia.com~1gpu"), ("a~b", "a~0b"), ("~/", "~0~1")]
)
def test_escaping(raw: str, escaped: str) -> None:
    assert escape_token(raw) == escaped
    assert unescape_token(escaped) == raw


# RFC 6902 appendix A (subset), including move/copy/test.
@pytest.mark.parametrize(
    ("doc", "ops", "result"),
    [
        pytest.param(
            {"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"foo": "bar", "baz": "qux"},
            id="A.1 add a member",
        ),
        pytest.param(
            {"foo": ["bar", "baz"]},
            [{"op": "add", "path": "/foo/1", "value": "qux"}],
            {"foo": ["bar", "qux", "baz"]},
            id="A.2 add an array element",
        ),
        pytest.param({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"},
                     id="A.3 remove a member"),
        pytest.param(
            {"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]},
            id="A.4 remove an array element",
        ),
        pytest.param({"baz": "qux"}, [{"op": "replace", "path": "/baz", "value": "boo"}], {"baz": "boo"},
                     id="A.5 replace a value"),
        pytest.param(
            {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
            [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
            {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
            id="A.6 move a value",
        ),
        pytest.param(
            {"foo": ["a", "b", "c", "d"]},
            [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
            {"foo": ["a", "c", "d", "b"]},
            id="A.7 move an array element",
        ),
        pytest.param(
            {"foo": ["bar"]},
            [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
            {"foo": ["bar", ["abc", "def"]]},
            id="A.16 add an array value",
        ),
        pytest.param(
            {"a": {"b": 1}}, [{"op": "copy", "from": "/a", "path": "/c"}], {"a": {"b": 1}, "c": {"b": 1}},
            id="copy a member",
        ),
        pytest.param(
            {"baz": "qux", "foo": ["a", 2, "c"]},
            [{"op": "test", "path": "/foo/1", "value": 2}],
            {"baz": "qux", "foo": ["a", 2, "c"]},
            id="A.8 test a value",
        ),
        pytest.param({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10},
                     id="A.14 escape ordering"),
        pytest.param({"x": 1}, [{"op": "replace", "path": "", "value": [1]}], [1], id="replace the root"),
    ],
)
@pytest.mark.parametrize("share", [False, True], ids=["deep copy", "copy on write"])
def test_apply_rfc_examples(doc: Any, ops: list[dict[str, Any]], result: Any, share: bool) -> None:
    before = copy.deepcopy(doc)
    assert apply_patch(doc, ops, share=share) == result
    assert doc == before


@pytest.mark.parametrize(
    ("doc", "op"),
    [
        pytest.param({"foo": "bar"}, {"op": "add", "path": "/baz/bat", "value": "qux"},
                     id="A.12 add under a missing parent"),
        pytest.param({"foo": "bar"}, {"op": "remove", "path": "/baz"}, id="remove a missing member"),
        pytest.param({"foo": "bar"}, {"op": "replace", "path": "/baz", "value": 1},
                     id="replace a missing member"),
        pytest.param({"foo": [1]}, {"op": "add", "path": "/foo/2", "value": 1}, id="add past the end"),
        pytest.param({"foo": [1]}, {"op": "add", "path": "/foo/01", "value": 1},
                     id="index with a leading zero"),
        pytest.param({"foo": [1]}, {"op": "remove", "path": "/foo/-"}, id="remove at -"),
        pytest.param({"foo": [1]}, {"op": "remove", "path": "/foo/1"}, id="remove past the end"),
        pytest.param({"baz": "qux"}, {"op": "test", "path": "/baz", "value": "bar"}, id="A.9 test fails"),
        pytest.param({"n": 1}, {"op": "test", "path": "/n", "value": True}, id="test 1 against true"),
        pytest.param({"foo": "bar"}, {"op": "add", "path": "baz", "value": 1}, id="path without a slash"),
        pytest.param({"foo": "bar"}, {"op": "add", "path": "/x"}, id="add without a value"),
        pytest.param({"foo": "bar"}, {"op": "frobnicate", "path": "/x"}, id="unknown op"),
        pytest.param({"a": {"b": 1}}, {"op": "move", "from": "/a", "path": "/a/c"},
                     id="move into its own child"),
        pytest.param({"foo": "bar"}, {"op": "remove", "path": ""}, id="remove the root"),
        pytest.param({"foo": 1}, {"op": "add", "path": "/foo/x", "value": 1}, id="add under a string"),
    ],
)
@pytest.mark.parametrize("share", [False, True], ids=["deep copy", "copy on write"])
def test_apply_errors(doc: Any, op: dict[str, Any], share: bool) -> None:
    before = copy.deepcopy(doc)
    with pytest.raises(JsonPatchError):
        apply_patch(doc, [op], share=share)
    assert doc == before
