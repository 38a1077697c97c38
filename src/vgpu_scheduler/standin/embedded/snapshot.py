"""Load a cluster snapshot for the simulator from a file.

Accepted: what `kubectl get nodes,pods,resourcequotas -A -o yaml` (or `-o json`) prints — a `v1 List`
— raw API list bodies (`NodeList`, `PodList`, `ResourceQuotaList`, whose items carry no kind), single
objects, multi-document YAML, or a top-level JSON/YAML array of objects.

Any problem raises SnapshotError with ONE message naming the file and the offending object (document
number, item index, kind and name where known), so the CLI can print it and exit 2 without writing
anything.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from vgpu_scheduler.wire import objects

# The C loader is much faster on large snapshots; the pure-Python one is the fallback.
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _SnapshotLoader(_BaseLoader):  # type: ignore[misc]
    """Safe loader that keeps unquoted timestamps as strings, as Kubernetes' YAML-to-JSON does, so
    objects stay JSON-serialisable."""


_SnapshotLoader.add_constructor("tag:yaml.org,2002:timestamp", _SnapshotLoader.construct_yaml_str)

ALLOWED_KINDS = ("Node", "Pod", "ResourceQuota")
LIST_KINDS = {"List": None, "NodeList": "Node", "PodList": "Pod", "ResourceQuotaList": "ResourceQuota"}
"""List kind -> kind of its items (None: each item names its own kind)."""
NAMESPACED_KINDS = ("Pod", "ResourceQuota")


class SnapshotError(ValueError):
    """A snapshot file that cannot be used; the message is meant for the user as is."""


@dataclass(slots=True)
class Snapshot:
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    resourcequotas: list[dict[str, Any]] = field(default_factory=list)


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, Mapping):
        return "mapping"
    return type(value).__name__


def _parse(path: str, text: str) -> list[Any]:
    """The documents of the file (JSON first, then YAML); empty documents are dropped."""
    stripped = text.lstrip()
    json_error: json.JSONDecodeError | None = None
    if stripped.startswith(("{", "[")):
        try:
            return [json.loads(text)]
        except json.JSONDecodeError as exc:
            json_error = exc  # may still be YAML flow style; report the JSON error if YAML fails too
    try:
        docs = list(yaml.load_all(text, Loader=_SnapshotLoader))
    except yaml.YAMLError as exc:
        if json_error is not None:
            e = json_error
            where = f"line {e.lineno}, column {e.colno}"
            raise SnapshotError(f"{path}: invalid JSON at {where}: {e.msg}") from None
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SnapshotError(f"{path}: invalid YAML{where}: {problem}") from None
    return [d for d in docs if d is not None]


def _describe(where: str, obj: Mapping[str, Any], kind: str | None) -> str:
    name = objects.name(obj)
    bits = []
    if kind:
        bits.append(f"kind {kind}")
    if name:
        ns = objects.namespace(obj)
        bits.append(f"name {ns}/{name}" if ns else f"name {name}")
    return f"{where} ({', '.join(bits)})" if bits else where


def _objects(path: str, docs: list[Any]) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(location, object, kind) for every object, lists flattened."""
    single = len(docs) == 1
    for d, doc in enumerate(docs, start=1):
        doc_where = "the document" if single else f"document {d}"
        if isinstance(doc, list):  # a bare array of objects
            for i, item in enumerate(doc):
                yield from _checked(path, f"{doc_where}, item [{i}]", item, None)
        else:
            yield from _checked(path, doc_where, doc, None)


def _error(path: str, where: str, obj: Mapping[str, Any], kind: str | None, *, problem: str) -> SnapshotError:
    return SnapshotError(f"{path}: {_describe(where, obj, kind)}: {problem}")


def _checked(
    path: str, where: str, obj: object, implied_kind: str | None
) -> Iterator[tuple[str, dict[str, Any], str]]:
    if not isinstance(obj, dict):
        got = _type_name(obj)
        raise SnapshotError(f"{path}: {where}: expected a Kubernetes object (a mapping), got {got}")
    kind = obj.get("kind", implied_kind)
    if kind is None:
        raise _error(path, where, obj, None, problem="kind is missing")
    if not isinstance(kind, str):
        raise _error(path, where, obj, None, problem=f"kind must be a string, got {_type_name(kind)}")
    if kind not in ALLOWED_KINDS and kind not in LIST_KINDS:
        allowed = ", ".join(sorted((*ALLOWED_KINDS, *LIST_KINDS)))
        raise _error(path, where, obj, kind, problem=f"unsupported kind {kind!r} (allowed: {allowed})")
    api_version = obj.get("apiVersion", "v1" if implied_kind else None)
    if api_version is None:
        raise _error(path, where, obj, kind, problem="apiVersion is missing (expected 'v1')")
    if api_version != "v1":
        problem = f"unsupported apiVersion {api_version!r} for kind {kind} (expected 'v1')"
        raise _error(path, where, obj, kind, problem=problem)
    if kind in LIST_KINDS:
        items = obj.get("items")
        if items is None:
            items = []
        if not isinstance(items, list):
            raise _error(path, where, obj, kind, problem=f"items must be a list, got {_type_name(items)}")
        for i, item in enumerate(items):
            yield from _checked(path, f"{where}, items[{i}]", item, LIST_KINDS[kind])
        return
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        got = _type_name(meta)
        problem = "metadata is missing" if meta is None else f"metadata must be a mapping, got {got}"
        raise _error(path, where, obj, kind, problem=problem)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise _error(path, where, obj, kind, problem="metadata.name is missing or empty")
    if kind in NAMESPACED_KINDS:
        ns = meta.get("namespace")
        if ns is None:
            meta["namespace"] = "default"  # as `kubectl apply` would put it
        elif not isinstance(ns, str) or not ns:
            raise _error(path, where, obj, kind, problem="metadata.namespace must be a non-empty string")
    # Items of typed API lists carry no kind/apiVersion; give them one so callers see whole objects.
    obj.setdefault("kind", kind)
    obj.setdefault("apiVersion", "v1")
    yield where, obj, kind


def load_snapshot(path: str | os.PathLike[str]) -> Snapshot:
    """Nodes, pods and resource quotas of the file, each in file order."""
    shown = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as exc:
        raise SnapshotError(f"{shown}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise SnapshotError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    snapshot = Snapshot()
    targets = {"Node": snapshot.nodes, "Pod": snapshot.pods, "ResourceQuota": snapshot.resourcequotas}
    seen: dict[tuple[str, str, str], str] = {}
    for where, obj, kind in _objects(shown, _parse(shown, text)):
        meta = obj["metadata"]
        identity = (kind, meta.get("namespace", "") if kind in NAMESPACED_KINDS else "", meta["name"])
        if identity in seen:
            raise _error(shown, where, obj, kind,
                problem=f"duplicate {kind} (first defined at {seen[identity]})")
        seen[identity] = where
        targets[kind].append(obj)
    return snapshot
