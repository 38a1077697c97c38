"""RFC 6902 diff and apply: examples, RFC appendix cases, and the round-trip property."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vgpu_scheduler.wire.jsonpatch import (
    JsonPatchError,
    apply_patch,
    escape_token,
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


@settings(max_examples=200)
@given(json_values, json_values)
def test_patch_round_trip(a: Any, b: Any) -> None:
    before = copy.deepcopy(a)
    ops = make_patch(a, b)
    assert json_equal(apply_patch(a, ops), b)
    assert json_equal(a, before)  # neither function mutates its input


@given(json_values)
def test_no_ops_for_equal_documents(a: Any) -> None:
    assert make_patch(a, copy.deepcopy(a)) == []


@given(st.lists(json_values, max_size=3), st.lists(json_values, min_size=1, max_size=3))
def test_list_edits_stay_small(head: list[Any], tail: list[Any]) -> None:
    """Appending to a list never rewrites what was already there."""
    ops = make_patch({"l": head}, {"l": [*head, *tail]})
    assert ops == [{"op": "add", "path": "/l/-", "value": v} for v in tail]


POD = {
    "metadata": {"name": "p"},
    "spec": {
        "schedulerName": "default-scheduler",
        "containers": [{"name": "c", "env": [{"name": "FOO", "value": "bar"}], "resources": {"limits": {}}}],
    },
}


@pytest.mark.parametrize(
    ("edit", "ops"),
    [
        (
            lambda p: p["spec"].__setitem__("schedulerName", "hami-scheduler"),
            [{"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"}],
        ),
        (
            lambda p: p["spec"]["containers"][0]["env"].append({"name": "X", "value": "1"}),
            [{"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "X", "value": "1"}}],
        ),
        (
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
        ),
        (
            lambda p: p["spec"].__setitem__("runtimeClassName", "nvidia"),
            [{"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"}],
        ),
        (
            lambda p: p["metadata"].__setitem__("annotations", {"hami.io/webhook": "mutated"}),
            [{"op": "add", "path": "/metadata/annotations", "value": {"hami.io/webhook": "mutated"}}],
        ),
        (lambda p: p["metadata"].pop("name"), [{"op": "remove", "path": "/metadata/name"}]),
        (
            lambda p: p["spec"]["containers"][0]["env"].insert(0, {"name": "A"}),
            [{"op": "add", "path": "/spec/containers/0/env/0", "value": {"name": "A"}}],
        ),
        (
            lambda p: p["spec"]["containers"][0]["env"].pop(),
            [{"op": "remove", "path": "/spec/containers/0/env/0"}],
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
        (1, True, [{"op": "replace", "path": "", "value": True}]),
        ({"x": 0}, {"x": False}, [{"op": "replace", "path": "/x", "value": False}]),
        ({"x": 1}, {"x": 1.0}, []),
        ([1, 2, 3], [1, 3], [{"op": "remove", "path": "/1"}]),
        ([1, 2, 3], [1, 9, 3], [{"op": "replace", "path": "/1", "value": 9}]),
        (
            [1, 2],
            [1, 5, 6, 2],
            [{"op": "add", "path": "/1", "value": 5}, {"op": "add", "path": "/2", "value": 6}],
        ),
        (
            {"a/b": 1, "~": 2},
            {"a/b": 3},
            [{"op": "replace", "path": "/a~1b", "value": 3}, {"op": "remove", "path": "/~0"}],
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
        ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"foo": "bar", "baz": "qux"}),
        (
            {"foo": ["bar", "baz"]},
            [{"op": "add", "path": "/foo/1", "value": "qux"}],
            {"foo": ["bar", "qux", "baz"]},
        ),
        ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
        ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]}),
        ({"baz": "qux"}, [{"op": "replace", "path": "/baz", "value": "boo"}], {"baz": "boo"}),
        (
            {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
            [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
            {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
        ),
        (
            {"foo": ["a", "b", "c", "d"]},
            [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
            {"foo": ["a", "c", "d", "b"]},
        ),
        (
            {"foo": ["bar"]},
            [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
            {"foo": ["bar", ["abc", "def"]]},
        ),
        ({"a": {"b": 1}}, [{"op": "copy", "from": "/a", "path": "/c"}], {"a": {"b": 1}, "c": {"b": 1}}),
        (
            {"baz": "qux", "foo": ["a", 2, "c"]},
            [{"op": "test", "path": "/foo/1", "value": 2}],
            {"baz": "qux", "foo": ["a", 2, "c"]},
        ),
        ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
        ({"x": 1}, [{"op": "replace", "path": "", "value": [1]}], [1]),
    ],
)
def test_apply_rfc_examples(doc: Any, ops: list[dict[str, Any]], result: Any) -> None:
    assert apply_patch(doc, ops) == result


@pytest.mark.parametrize(
    ("doc", "op"),
    [
        ({"foo": "bar"}, {"op": "add", "path": "/baz/bat", "value": "qux"}),
        ({"foo": "bar"}, {"op": "remove", "path": "/baz"}),
        ({"foo": "bar"}, {"op": "replace", "path": "/baz", "value": 1}),
        ({"foo": [1]}, {"op": "add", "path": "/foo/2", "value": 1}),
        ({"foo": [1]}, {"op": "add", "path": "/foo/01", "value": 1}),
        ({"foo": [1]}, {"op": "remove", "path": "/foo/-"}),
        ({"foo": [1]}, {"op": "remove", "path": "/foo/1"}),
        ({"baz": "qux"}, {"op": "test", "path": "/baz", "value": "bar"}),
        ({"n": 1}, {"op": "test", "path": "/n", "value": True}),
        ({"foo": "bar"}, {"op": "add", "path": "baz", "value": 1}),
        ({"foo": "bar"}, {"op": "add", "path": "/x"}),
        ({"foo": "bar"}, {"op": "frobnicate", "path": "/x"}),
        ({"a": {"b": 1}}, {"op": "move", "from": "/a", "path": "/a/c"}),
        ({"foo": "bar"}, {"op": "remove", "path": ""}),
        ({"foo": 1}, {"op": "add", "path": "/foo/x", "value": 1}),
    ],
)
def test_apply_errors(doc: Any, op: dict[str, Any]) -> None:
    with pytest.raises(JsonPatchError):
        apply_patch(doc, [op])
