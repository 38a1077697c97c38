"""kube-scheduler extender payloads (§5.9).

The Go types carry no JSON tags, so keys are Go field names on output and are matched
case-insensitively on input, like encoding/json. Go's decoder also ignores unknown fields and
stops after the first JSON value; both are kept so any body kube-scheduler accepts, we accept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import msgspec

from vgpu_scheduler.gocompat.parsing import json_kind

MAX_BODY_BYTES = 1 << 20
"""HAMi reads at most 1 MiB of a request body; a longer one decodes as truncated JSON."""


class ExtenderDecodeError(ValueError):
    """The body is not an acceptable extender payload; the message goes into the `Error` field."""


@dataclass(slots=True)
class ExtenderArgs:
    pod: dict[str, Any] | None
    nodes: dict[str, Any] | None
    node_names: list[str] | None


@dataclass(slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


_decoder = msgspec.json.Decoder()


def _decode_object(body: bytes, type_name: str) -> dict[str, Any]:
    # Go decodes the first JSON value from an io.LimitReader of 1 MiB: the body is cut there, and
    # a value that does not end before the cut reports "unexpected EOF".
    body = body[:MAX_BODY_BYTES]
    try:
        value = _decoder.decode(body)
    except msgspec.DecodeError as exc:
        text = str(exc)
        if "truncated" in text or _fails_at_end(text, body):
            raise ExtenderDecodeError("unexpected EOF") from exc
        if not body.strip():
            raise ExtenderDecodeError("EOF") from exc
        # Go stops at the end of the first value; accept trailing data the same way.
        value = _first_value(body, exc)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ExtenderDecodeError(
            f"json: cannot unmarshal {json_kind(value)} into Go value of type {type_name}"
        )
    return value


_BYTE_POSITION = re.compile(r"\(byte (\d+)\)$")


def _fails_at_end(text: str, body: bytes) -> bool:
    """The error is at the very end of the input (e.g. a number cut after "1." or "-"): Go's
    decoder would have wanted more bytes, which is an unexpected EOF, not a syntax error."""
    match = _BYTE_POSITION.search(text)
    return match is not None and int(match.group(1)) >= len(body.rstrip())


def _first_value(body: bytes, original: msgspec.DecodeError) -> Any:
    import json

    try:
        value, _end = json.JSONDecoder().raw_decode(body.decode("utf-8", errors="replace").lstrip())
    except json.JSONDecodeError as exc:
        raise ExtenderDecodeError(f"invalid JSON: {original}") from exc
    return value


def _fields(obj: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """Pick Go struct fields: exact key first, else the last case-insensitive match."""
    by_lower: dict[str, Any] = {}
    for key, value in obj.items():
        by_lower[key.lower()] = value
    picked: dict[str, Any] = {}
    for name in names:
        if name in obj:
            picked[name] = obj[name]
        elif name.lower() in by_lower:
            picked[name] = by_lower[name.lower()]
    return picked


def _typed(value: Any, want: type, *, struct: str, field: str, go_type: str) -> Any:
    if value is None or isinstance(value, want):
        return value
    raise ExtenderDecodeError(
        f"json: cannot unmarshal {json_kind(value)} into Go struct field {struct}.{field} of type {go_type}"
    )


def decode_extender_args(body: bytes) -> ExtenderArgs:
    obj = _decode_object(body, "v1.ExtenderArgs")
    fields = _fields(obj, ("Pod", "Nodes", "NodeNames"))
    pod = _typed(fields.get("Pod"), dict, struct="ExtenderArgs", field="Pod", go_type="v1.Pod")
    nodes = _typed(fields.get("Nodes"), dict, struct="ExtenderArgs", field="Nodes", go_type="v1.NodeList")
    names = _typed(fields.get("NodeNames"), list, struct="ExtenderArgs", field="NodeNames",
        go_type="[]string")
    if names is not None and not all(map(isinstance, names, repeat(str))):  # C speed when all are
        for name in names:
            _typed(name, str, struct="ExtenderArgs", field="NodeNames", go_type="string")
    if nodes is not None:
        items = _typed(nodes.get("items"), list, struct="ExtenderArgs", field="Nodes.items",
            go_type="[]v1.Node")
        for item in items or ():
            _typed(item, dict, struct="ExtenderArgs", field="Nodes.items", go_type="v1.Node")
    return ExtenderArgs(pod=pod, nodes=nodes, node_names=names)


def decode_binding_args(body: bytes) -> BindingArgs:
    obj = _decode_object(body, "v1.ExtenderBindingArgs")
    fields = _fields(obj, ("PodName", "PodNamespace", "PodUID", "Node"))
    values = {
        name: _typed(fields.get(name), str, struct="ExtenderBindingArgs", field=name, go_type="string") or ""
        for name in ("PodName", "PodNamespace", "PodUID", "Node")
    }
    return BindingArgs(values["PodName"], values["PodNamespace"], values["PodUID"], values["Node"])


_encoder = msgspec.json.Encoder()


def encode_filter_result(
    *,
    node_names: list[str] | None = None,
    nodes: list[dict[str, Any]] | None = None,
    failed: dict[str, str] | None = None,
    failed_unresolvable: dict[str, str] | None = None,
    error: str = "",
) -> bytes:
    """ExtenderFilterResult with Go field names, nulls for unset fields.

    Go's encoding/json writes map keys sorted, so the failed-node maps are written sorted too:
    the same answer gives the same bytes whatever order the nodes were evaluated in.
    """
    encode = _encoder.encode
    # Field by field, in the Go struct's order; the string maps by an encoder sorting their keys.
    return b"".join(
        (
            b'{"Nodes":',
            encode(None if nodes is None else {"metadata": {}, "items": nodes}),
            b',"NodeNames":',
            encode(node_names),
            b',"FailedNodes":',
            _encode_sorted(failed),
            b',"FailedAndUnresolvableNodes":',
            _encode_sorted(failed_unresolvable),
            b',"Error":',
            encode(error),
            b"}",
        )
    )


_encode_sorted = msgspec.json.Encoder(order="sorted").encode
"""For flat str -> str maps only: it would sort the keys of nested objects too."""


def encode_binding_result(error: str = "") -> bytes:
    return _encoder.encode({"Error": error})
