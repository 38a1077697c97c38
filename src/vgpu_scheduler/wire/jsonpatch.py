"""RFC 6902 JSON Patch: a diff (`make_patch`) and an applier (`apply_patch`) for JSON-shaped data.

The admission webhook answers with the patch that turns the pod it received into the mutated pod
(§7). The diff emits only semantic operations: `add`/`remove`/`replace` at the deepest
path where the documents differ, so a patch reads like HAMi's (`add /spec/containers/0/env/-`,
`replace /spec/schedulerName`). Equality is JSON equality: `true` differs from `1`, `1` equals
`1.0`. Paths use RFC 6901 escaping (`~` → `~0`, `/` → `~1`, so `nvidia.com/gpu` → `nvidia.com~1gpu`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import msgspec

Op = dict[str, Any]

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class JsonPatchError(ValueError):
    """A patch that cannot be applied to the document."""


def escape_token(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def unescape_token(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value (dicts, lists, strings, numbers, bools, None, as a JSON decoder
    gives them): an encode and decode in C, a few times cheaper than `copy.deepcopy` on a pod.
    Anything msgspec cannot encode is deep-copied instead."""
    try:
        return _decode(_encode(value))
    except (TypeError, ValueError, msgspec.MsgspecError):
        return copy.deepcopy(value)


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: bools are not numbers, dict order does not matter."""
    if a is b and not isinstance(a, float):  # a NaN is not equal to itself
        return True
    # JSON-equal values are equal in Python too, so Python's (C) inequality is exact; Python's
    # equality is not (True == 1): equal encodings settle it, a key order or 1 vs 1.0 goes on.
    if a != b:
        return False
    try:
        if _encode(a) == _encode(b):
            return True
    except (TypeError, ValueError, msgspec.MsgspecError):
        pass
    return _json_equal_strict(a, b)


def _json_equal_strict(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal_strict(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal_strict(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


# --- diff ---------------------------------------------------------------------------------------


def make_patch(before: Any, after: Any) -> list[Op]:
    """Operations that turn `before` into `after` (empty when they are JSON-equal)."""
    ops: list[Op] = []
    _diff(before, after, "", ops)
    return ops


def _diff(a: Any, b: Any, path: str, ops: list[Op]) -> None:
    if json_equal(a, b):
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key, value in b.items():
            child = f"{path}/{escape_token(key)}"
            if key in a:
                _diff(a[key], value, child, ops)
            else:
                ops.append({"op": "add", "path": child, "value": json_copy(value)})
        for key in a:
            if key not in b:
                ops.append({"op": "remove", "path": f"{path}/{escape_token(key)}"})
    elif isinstance(a, list) and isinstance(b, list):
        _diff_list(a, b, path, ops)
    else:
        ops.append({"op": "replace", "path": path, "value": json_copy(b)})


def _diff_list(a: list[Any], b: list[Any], path: str, ops: list[Op]) -> None:
    # Strip the common head and tail; what differs is a[p:len(a)-s] versus b[p:len(b)-s].
    limit = min(len(a), len(b))
    p = 0
    while p < limit and json_equal(a[p], b[p]):
        p += 1
    s = 0
    while s < limit - p and json_equal(a[len(a) - 1 - s], b[len(b) - 1 - s]):
        s += 1
    old, new = a[p : len(a) - s], b[p : len(b) - s]
    # Pair up the middle element by element, then insert or delete the rest right after it.
    paired = min(len(old), len(new))
    for i in range(paired):
        _diff(old[i], new[i], f"{path}/{p + i}", ops)
    at = p + paired
    for i in range(paired, len(new)):
        at_end = s == 0
        index = "-" if at_end else str(p + i)
        ops.append({"op": "add", "path": f"{path}/{index}", "value": json_copy(new[i])})
    for _ in range(paired, len(old)):
        ops.append({"op": "remove", "path": f"{path}/{at}"})


# --- apply --------------------------------------------------------------------------------------


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise JsonPatchError(f"invalid JSON pointer {pointer!r}: must be empty or start with '/'")
    return [unescape_token(t) for t in pointer[1:].split("/")]


def _index(container: list[Any], token: str, pointer: str, *, allow_end: bool) -> int:
    if allow_end and token == "-":
        return len(container)
    if not token.isascii() or not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise JsonPatchError(f"invalid array index {token!r} in {pointer!r}")
    index = int(token)
    if index > len(container) or (index == len(container) and not allow_end):
        raise JsonPatchError(f"array index {index} out of range in {pointer!r}")
    return index


def _resolve(doc: Any, tokens: Sequence[str], pointer: str) -> Any:
    node = doc
    for token in tokens:
        if isinstance(node, dict):
            if token not in node:
                raise JsonPatchError(f"path {pointer!r} does not exist")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, pointer, allow_end=False)]
        else:
            raise JsonPatchError(f"path {pointer!r} does not exist")
    return node


Owned = dict[int, Any]
"""The containers a copy-on-write patch made (by id; held so that no id is reused meanwhile)."""


def _shallow(value: Any, owned: Owned) -> Any:
    if isinstance(value, dict | list):
        value = dict(value) if isinstance(value, dict) else list(value)
        owned[id(value)] = value
    return value


def _parent(doc: Any, tokens: Sequence[str], pointer: str, owned: Owned | None) -> Any:
    """The container an operation edits, at `tokens` in `doc`. Copy-on-write (`owned` given):
    every container on the way that this patch has not copied yet is copied first and put in
    place of the original, so what the patch edits is never shared with the document it read."""
    if owned is None:
        return _resolve(doc, tokens, pointer)
    node = doc
    for token in tokens:
        if isinstance(node, dict):
            if token not in node:
                raise JsonPatchError(f"path {pointer!r} does not exist")
            key: Any = token
        elif isinstance(node, list):
            key = _index(node, token, pointer, allow_end=False)
        else:
            raise JsonPatchError(f"path {pointer!r} does not exist")
        child = node[key]
        if id(child) not in owned:
            child = node[key] = _shallow(child, owned)
        node = child
    return node


def _add(doc: Any, pointer: str, value: Any, owned: Owned | None = None) -> Any:
    tokens = _tokens(pointer)
    if not tokens:
        return value
    parent = _parent(doc, tokens[:-1], pointer, owned)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, pointer, allow_end=True), value)
    else:
        raise JsonPatchError(f"cannot add at {pointer!r}: parent is not an object or array")
    return doc


def _remove(doc: Any, pointer: str, owned: Owned | None = None) -> tuple[Any, Any]:
    tokens = _tokens(pointer)
    if not tokens:
        raise JsonPatchError("cannot remove the whole document")
    parent = _parent(doc, tokens[:-1], pointer, owned)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise JsonPatchError(f"path {pointer!r} does not exist")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, pointer, allow_end=False))
    raise JsonPatchError(f"path {pointer!r} does not exist")


def _require(op: Op, key: str) -> Any:
    if key not in op:
        raise JsonPatchError(f"operation {op.get('op')!r} is missing {key!r}")
    return op[key]


def apply_patch(doc: Any, ops: Sequence[Op], *, share: bool = False) -> Any:
    """Apply RFC 6902 operations to a copy of `doc` and return the result (`doc` is untouched).

    `share`: copy on write instead of a deep copy first. The result shares with `doc` everything
    no operation edits; only the objects and arrays on an edited path are copied (as a merge
    patch does), which for a small patch of a large document is much cheaper."""
    owned: Owned | None = {} if share else None
    result = _shallow(doc, owned) if owned is not None else copy.deepcopy(doc)
    for op in ops:
        kind = op.get("op")
        path = _require(op, "path")
        if not isinstance(path, str):
            raise JsonPatchError(f"path must be a string, not {path!r}")
        if kind == "add":
            result = _add(result, path, copy.deepcopy(_require(op, "value")), owned)
        elif kind == "remove":
            result, _ = _remove(result, path, owned)
        elif kind == "replace":
            _resolve(result, _tokens(path), path)  # the target must exist
            result, _ = _remove(result, path, owned) if path else (result, None)
            result = _add(result, path, copy.deepcopy(_require(op, "value")), owned)
        elif kind in ("move", "copy"):
            source = _require(op, "from")
            if not isinstance(source, str):
                raise JsonPatchError(f"from must be a string, not {source!r}")
            if kind == "move":
                if path.startswith(source + "/"):
                    raise JsonPatchError(f"cannot move {source!r} into its own child {path!r}")
                result, value = _remove(result, source, owned) if source else (None, result)
            else:
                value = copy.deepcopy(_resolve(result, _tokens(source), source))
            result = _add(result, path, value, owned)
        elif kind == "test":
            if not json_equal(_resolve(result, _tokens(path), path), _require(op, "value")):
                raise JsonPatchError(f"test failed at {path!r}")
        else:
            raise JsonPatchError(f"unknown operation {kind!r}")
        if owned is not None and id(result) not in owned:
            result = _shallow(result, owned)  # a new root (moved, or a whole-document add)
    return result
