import json
from typing import Any

import pytest

from tests.fixtures import KUBE_1_36
from vgpu_scheduler.wire.extender import (
    MAX_BODY_BYTES,
    ExtenderDecodeError,
    decode_binding_args,
    decode_extender_args,
    encode_binding_result,
    encode_filter_result,
)

FIXTURES = KUBE_1_36 / "extender"


def test_decodes_real_filter_args() -> None:
    args = decode_extender_args((FIXTURES / "filter-args.single-gpu.json").read_bytes())
    assert args.pod is not None and args.pod["metadata"]["name"] == "gpu-single"
    assert args.nodes is None
    assert args.node_names == ["gpu-node-1", "gpu-node-2", "cpu-node-1"]


def test_decodes_full_nodes_request() -> None:
    args = decode_extender_args((FIXTURES / "filter-args.node-cache-false.single-gpu.json").read_bytes())
    assert args.node_names is None
    assert args.nodes is not None and args.nodes["items"]


def test_decodes_real_bind_args() -> None:
    args = decode_binding_args((FIXTURES / "bind-args.json").read_bytes())
    assert (args.pod_name, args.pod_namespace, args.node) == ("gpu-single", "default", "gpu-node-1")
    assert args.pod_uid == "5748c399-a333-4761-a85d-302a5e301e11"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(b'{"pod": {"metadata": {"name": "a"}}, "nodenames": ["n1"]}', ("a", ["n1"]),
                     id="lower-case keys"),
        pytest.param(b'{"POD": {"metadata": {"name": "b"}}, "NODENAMES": null}', ("b", None),
                     id="upper-case keys, null names"),
        pytest.param(b'{"Pod": null}', (None, None), id="null pod"),
        pytest.param(b'{"Pod": {"metadata": {"name": "c"}}, "Unknown": 1} trailing', ("c", None),
                     id="unknown key and trailing text"),
        pytest.param(b"null", (None, None), id="null body"),
    ],
)
def test_case_insensitive_and_lenient(body: bytes, expected: tuple[str | None, list[str] | None]) -> None:
    args = decode_extender_args(body)
    name = None if args.pod is None else args.pod["metadata"]["name"]
    assert (name, args.node_names) == expected


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"Pod": {', "unexpected EOF"),
        (b'{"Pod": 3}', "json: cannot unmarshal number into Go struct field ExtenderArgs.Pod of type v1.Pod"),
        (b'{"NodeNames": "n1"}', "json: cannot unmarshal string into Go struct field ExtenderArgs.NodeNames"),
        (b'{"NodeNames": [1]}', "json: cannot unmarshal number into Go struct field ExtenderArgs.NodeNames"),
        (b"[1, 2]", "json: cannot unmarshal array into Go value of type v1.ExtenderArgs"),
        (b"{not json", "invalid JSON"),
    ],
)
def test_decode_errors(body: bytes, message: str) -> None:
    with pytest.raises(ExtenderDecodeError) as err:
        decode_extender_args(body)
    assert str(err.value).startswith(message)


def test_oversized_body_is_truncated_json() -> None:
    body = b'{"NodeNames": ["' + b"x" * MAX_BODY_BYTES + b'"]}'
    with pytest.raises(ExtenderDecodeError, match="unexpected EOF"):
        decode_extender_args(body)


def test_filter_result_uses_go_field_names() -> None:
    out = json.loads(encode_filter_result(node_names=["n1"]))
    assert out == {
        "Nodes": None,
        "NodeNames": ["n1"],
        "FailedNodes": None,
        "FailedAndUnresolvableNodes": None,
        "Error": "",
    }
    out = json.loads(encode_filter_result(nodes=[{"metadata": {"name": "n"}}], failed={"m": "why"}))
    assert out["Nodes"] == {"metadata": {}, "items": [{"metadata": {"name": "n"}}]}
    assert out["FailedNodes"] == {"m": "why"}


def test_binding_result() -> None:
    assert json.loads(encode_binding_result()) == {"Error": ""}
    assert json.loads(encode_binding_result("boom")) == {"Error": "boom"}
    with pytest.raises(ExtenderDecodeError):
        decode_binding_args(b'{"PodName": 1}')


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param(
            {"failed": {"node-b": "1/2 CardNotHealth", "node-a": "node unregistered", "Node-c": "x"}},
            b'{"Nodes":null,"NodeNames":null,'
            b'"FailedNodes":{"Node-c":"x","node-a":"node unregistered","node-b":"1/2 CardNotHealth"},'
            b'"FailedAndUnresolvableNodes":null,"Error":""}',
            id="failed-nodes-keys-sorted-like-go-maps",
        ),
        pytest.param(
            {"failed_unresolvable": {"z": "1", "y": "2"}},
            b'{"Nodes":null,"NodeNames":null,"FailedNodes":null,'
            b'"FailedAndUnresolvableNodes":{"y":"2","z":"1"},"Error":""}',
            id="unresolvable-keys-sorted",
        ),
        pytest.param(
            {"node_names": ["n2", "n1"]},
            b'{"Nodes":null,"NodeNames":["n2","n1"],"FailedNodes":null,'
            b'"FailedAndUnresolvableNodes":null,"Error":""}',
            id="node-names-keep-their-order",
        ),
    ],
)
def test_filter_result_bytes_match_go_encoding(kwargs: dict[str, Any], expected: bytes) -> None:
    """Go's encoding/json writes map keys sorted; struct fields in declaration order."""
    assert encode_filter_result(**kwargs) == expected


@pytest.mark.parametrize(
    ("tail", "outcome"),
    [
        pytest.param(b"\n", ["a"], id="value-complete-within-limit-newline-after"),
        pytest.param(b" " * MAX_BODY_BYTES, ["a"], id="value-complete-within-limit-padding-after"),
    ],
)
def test_body_limit_cuts_like_a_limit_reader(tail: bytes, outcome: list[str]) -> None:
    """Go decodes the first value from the first 1 MiB: a value that ends inside it decodes."""
    value = b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["a"]}'
    body = value + b" " * (MAX_BODY_BYTES - len(value)) + tail
    assert len(body) > MAX_BODY_BYTES
    assert decode_extender_args(body).node_names == outcome


@pytest.mark.parametrize(
    "cut_inside",
    [
        pytest.param(b"1.", id="number-after-point"),
        pytest.param(b"-", id="number-sign"),
        pytest.param(b"tr", id="literal"),
        pytest.param(b'"ab', id="string"),
    ],
)
def test_value_cut_at_the_limit_is_unexpected_eof(cut_inside: bytes) -> None:
    head = b'{"Pod": {"x": ' + b" " * (MAX_BODY_BYTES - 14 - len(cut_inside)) + cut_inside
    assert len(head) == MAX_BODY_BYTES
    with pytest.raises(ExtenderDecodeError, match=r"^unexpected EOF$"):
        decode_extender_args(head + b"5}}")
