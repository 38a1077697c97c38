"""What the Kubernetes API *is*, independent of any transport: the resource table, REST paths,
continue tokens, merge/JSON patches, the field order of objects, BOOKMARK bodies and the two Event
representations.

Pure functions only (no I/O, no clock), shared by the client (to build requests) and by the
in-memory cluster (to serve them); the selectors and the validation only the in-memory API server
applies live beside it (`memory/selectors.py`, `memory/validation.py`).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import quote, unquote

from vgpu_scheduler.wire.jsonpatch import JsonPatchError, apply_patch

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One REST resource. `storage` names the object store; two resources can share one
    (core/v1 `events` and `events.k8s.io/v1` events are the same objects in two shapes)."""

    plural: str
    kind: str
    group: str
    version: str
    namespaced: bool
    storage: str
    etcd_prefix: str  # for StorageError messages: "/registry/<prefix>/<ns>/<name>"
    has_status: bool  # a /status subresource exists and the main resource ignores status changes

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def qualified(self) -> str:
        """`pods`, `leases.coordination.k8s.io`: how the API names the resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind


PODS = ResourceType("pods", "Pod", "", "v1", True, "pods", "pods", True)
NODES = ResourceType("nodes", "Node", "", "v1", False, "nodes", "minions", True)
RESOURCEQUOTAS = ResourceType(
    "resourcequotas", "ResourceQuota", "", "v1", True, "resourcequotas", "resourcequotas", True
)
LEASES = ResourceType("leases", "Lease", "coordination.k8s.io", "v1", True, "leases", "leases", False)
EVENTS = ResourceType("events", "Event", "", "v1", True, "events", "events", False)
EVENTS_V1 = ResourceType("events", "Event", "events.k8s.io", "v1", True, "events", "events", False)
NAMESPACES = ResourceType("namespaces", "Namespace", "", "v1", False, "namespaces", "namespaces", True)
# Only `vgpu-scheduler certs` uses these two (the webhook serving Secret and its caBundle).
SECRETS = ResourceType("secrets", "Secret", "", "v1", True, "secrets", "secrets", False)
MUTATING_WEBHOOK_CONFIGURATIONS = ResourceType(
    "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", "admissionregistration.k8s.io", "v1",
    False, "mutatingwebhookconfigurations", "mutatingwebhookconfigurations", False,
)

ALL_RESOURCES: tuple[ResourceType, ...] = (
    PODS, NODES, RESOURCEQUOTAS, LEASES, EVENTS, EVENTS_V1, NAMESPACES,
    SECRETS, MUTATING_WEBHOOK_CONFIGURATIONS,
)
_BY_NAME: dict[str, ResourceType] = {}
for _rt in ALL_RESOURCES:
    _BY_NAME[_rt.qualified] = _rt
    _BY_NAME.setdefault(_rt.plural, _rt)  # bare "events" is core/v1, like kubectl
_BY_NAME["events.events.k8s.io"] = EVENTS_V1
_BY_KIND: dict[tuple[str, str], ResourceType] = {(rt.api_version, rt.kind): rt for rt in ALL_RESOURCES}
_BY_PATH: dict[tuple[str, str, str], ResourceType] = {}
for _rt in ALL_RESOURCES:  # (group, version, plural) -> the first resource type with them
    _BY_PATH.setdefault((_rt.group, _rt.version, _rt.plural), _rt)


def resource_type(name: str | ResourceType) -> ResourceType:
    """Look up `pods`, `nodes`, `resourcequotas`, `leases`, `events` (core/v1),
    `events.events.k8s.io`, `namespaces` (also `<plural>.<group>` spellings)."""
    if isinstance(name, ResourceType):
        return name
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown resource {name!r}") from None


def resource_for_kind(api_version: str, kind: str) -> ResourceType | None:
    return _BY_KIND.get((api_version, kind))


# --------------------------------------------------------------------------- paths


def resource_path(
    rt: ResourceType, namespace: str | None = None, name: str | None = None, subresource: str | None = None
) -> str:
    """The REST path, e.g. /api/v1/namespaces/default/pods/x/binding."""
    base = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    if rt.namespaced and namespace:
        base += f"/namespaces/{_quote(namespace)}"
    base += f"/{rt.plural}"
    if name is not None:
        base += f"/{_quote(name)}"
        if subresource:
            base += f"/{subresource}"
    return base


_UNRESERVED_RE = re.compile(r"[A-Za-z0-9_.~-]*")


def _quote(segment: str) -> str:
    """One path segment percent-encoded (`quote(segment, safe="")`); Kubernetes names, made of
    characters that need none, are returned as they are without going through `quote`."""
    return segment if _UNRESERVED_RE.fullmatch(segment) else quote(segment, safe="")


@dataclass(frozen=True, slots=True)
class PathInfo:
    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


@lru_cache(maxsize=8192)
def parse_path(path: str) -> PathInfo | None:
    """Inverse of `resource_path`; None for anything that is not one of our resources. Cached:
    the in-memory API server parses the same few paths (one per object) over and over."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    if "%" in path:
        parts = [unquote(p) for p in parts]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace: str | None = None
    # /namespaces/{ns}/{plural}... is a namespaced resource; /namespaces/{name}[/status] is a Namespace.
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] != "status":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    rt = _BY_PATH.get((group, version, rest[0]))
    if rt is None or (namespace is not None and not rt.namespaced):
        return None
    name = rest[1] if len(rest) >= 2 else None
    sub = rest[2] if len(rest) == 3 else None
    return PathInfo(rt, namespace, name, sub)


def object_key(namespace: str | None, name: str) -> str:
    """Store key: `ns/name` for namespaced objects, `name` otherwise (etcd key order)."""
    return f"{namespace}/{name}" if namespace else name


def key_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return object_key(meta.get("namespace"), meta.get("name", ""))


# --------------------------------------------------------------------------- continue tokens


def encode_continue(rv: int, start: str) -> str:
    """Unpadded base64url of {"v":"meta.k8s.io/v1","rv":R,"start":"<next key>"} (as the apiserver)."""
    raw = json.dumps(
        {"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"), ensure_ascii=False
    )
    return base64.urlsafe_b64encode(raw.encode()).rstrip(b"=").decode()


def decode_continue(token: str) -> tuple[int, str]:
    """(resourceVersion, start key); ValueError with the apiserver's message when malformed."""
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except Exception as exc:  # binascii.Error, UnicodeDecodeError, JSONDecodeError
        raise ValueError(f"continue key is not valid: {exc}") from None
    if not isinstance(data, dict) or data.get("v") != "meta.k8s.io/v1":
        raise ValueError(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        )
    rv, start = data.get("rv"), data.get("start")
    if not isinstance(rv, int) or not isinstance(start, str) or not start:
        raise ValueError("continue key is not valid: encoded start key empty")
    return rv, start


# --------------------------------------------------------------------------- patches


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch. Never mutates `target`; `null` deletes a key; lists are replaced."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class PatchError(ValueError):
    """A JSON patch that cannot be applied (bad pointer, failed test)."""


def json_patch(target: Any, ops: Any, *, share: bool = False) -> Any:
    """RFC 6902 JSON patch on a copy of `target` (the webhook's own applier, errors as PatchError);
    `share`: the result shares what the patch leaves alone with `target` (see apply_patch)."""
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        raise PatchError("json patch must be a list of operations")
    try:
        return apply_patch(target, ops, share=share)
    except JsonPatchError as exc:
        raise PatchError(str(exc)) from exc


# --------------------------------------------------------------------------- object shape

_META_ORDER = (
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
)


def order_metadata(meta: Mapping[str, Any]) -> Obj:
    """ObjectMeta in Go field order (what kube-apiserver writes)."""
    if isinstance(meta, dict):
        return {k: meta[k] for k in _meta_order(tuple(meta))}
    out = {k: meta[k] for k in _META_ORDER if k in meta}
    out.update((k, v) for k, v in meta.items() if k not in out)
    return out


def order_object(obj: Mapping[str, Any]) -> Obj:
    """kind, apiVersion, metadata first; the other top-level keys keep their order."""
    if isinstance(obj, dict):
        return {
            k: order_metadata(obj[k] or {}) if k == "metadata" else obj[k]
            for k in _object_order(tuple(obj))
        }
    out: Obj = {}
    for k in ("kind", "apiVersion"):
        if k in obj:
            out[k] = obj[k]
    if "metadata" in obj:
        out["metadata"] = order_metadata(obj["metadata"] or {})
    out.update((k, v) for k, v in obj.items() if k not in out)
    return out


# The orders, cached by the keys an object has: every write of an object orders the same keys.
@lru_cache(maxsize=1024)
def _meta_order(keys: tuple[str, ...]) -> tuple[str, ...]:
    return (*(k for k in _META_ORDER if k in keys), *(k for k in keys if k not in _META_ORDER))


@lru_cache(maxsize=1024)
def _object_order(keys: tuple[str, ...]) -> tuple[str, ...]:
    first = tuple(k for k in ("kind", "apiVersion", "metadata") if k in keys)
    return (*first, *(k for k in keys if k not in first))


# Zero-valued objects of each kind, as Go serialises them inside BOOKMARK events.
_BOOKMARK_BODY: dict[str, Obj] = {
    "Pod": {"spec": {"containers": None}, "status": {}},
    "Node": {
        "spec": {},
        "status": {
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "",
                "containerRuntimeVersion": "",
                "kubeletVersion": "",
                "kubeProxyVersion": "",
                "operatingSystem": "",
                "architecture": "",
            },
        },
    },
    "ResourceQuota": {"spec": {}, "status": {}},
    "Lease": {"spec": {}},
    "Namespace": {"spec": {}, "status": {}},
}


def bookmark_object(rt: ResourceType, rv: int, annotations: Mapping[str, str] | None = None) -> Obj:
    meta: Obj = {"resourceVersion": str(rv)}
    if annotations:
        meta["annotations"] = dict(annotations)
    if rt.kind == "Event":
        body: Obj = (
            {
                "eventTime": None,
                "reportingController": "",
                "reportingInstance": "",
                "regarding": {},
                "deprecatedSource": {},
                "deprecatedFirstTimestamp": None,
                "deprecatedLastTimestamp": None,
            }
            if rt.group
            else {
                "involvedObject": {},
                "source": {},
                "firstTimestamp": None,
                "lastTimestamp": None,
                "eventTime": None,
                "reportingComponent": "",
                "reportingInstance": "",
            }
        )
    else:
        body = json.loads(json.dumps(_BOOKMARK_BODY.get(rt.kind, {})))
    return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta, **body}


# --------------------------------------------------------------------------- Events, two shapes

# (core/v1 key, events.k8s.io/v1 key) for fields that are only renamed.
_EVENT_RENAMES = (
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
)


def event_to_core(ev: Mapping[str, Any]) -> Obj:
    """An events.k8s.io/v1 Event as core/v1 stores it (no kind/apiVersion)."""
    rename = {new: old for old, new in _EVENT_RENAMES}
    src = {rename.get(k, k): v for k, v in ev.items() if k not in ("kind", "apiVersion")}
    return core_event_shape(src)


def core_event_shape(ev: Mapping[str, Any]) -> Obj:
    """core/v1 Event with Go's field order and zero values (source {}, null timestamps, empty
    reportingComponent/Instance), as in fixtures event.*.core-v1.raw.json."""
    out: Obj = {"metadata": ev.get("metadata") or {}, "involvedObject": ev.get("involvedObject") or {}}
    for k in ("reason", "message"):
        if ev.get(k):
            out[k] = ev[k]
    out["source"] = ev.get("source") or {}
    out["firstTimestamp"] = ev.get("firstTimestamp")
    out["lastTimestamp"] = ev.get("lastTimestamp")
    if ev.get("count"):
        out["count"] = ev["count"]
    if ev.get("type"):
        out["type"] = ev["type"]
    out["eventTime"] = ev.get("eventTime")
    for k in ("series", "action", "related"):
        if ev.get(k):
            out[k] = ev[k]
    out["reportingComponent"] = ev.get("reportingComponent") or ""
    out["reportingInstance"] = ev.get("reportingInstance") or ""
    return out


def event_to_events_v1(core: Mapping[str, Any]) -> Obj:
    """The events.k8s.io/v1 view of a stored core/v1 Event (fixture key order)."""
    out: Obj = {
        "kind": "Event",
        "apiVersion": "events.k8s.io/v1",
        "metadata": core.get("metadata") or {},
        "eventTime": core.get("eventTime"),
    }
    if core.get("series"):
        out["series"] = core["series"]
    for k_core, k_new in (
        ("reportingComponent", "reportingController"),
        ("reportingInstance", None),
        ("action", None),
        ("reason", None),
    ):
        if core.get(k_core):
            out[k_new or k_core] = core[k_core]
    out["regarding"] = core.get("involvedObject") or {}
    if core.get("related"):
        out["related"] = core["related"]
    if core.get("message"):
        out["note"] = core["message"]
    if core.get("type"):
        out["type"] = core["type"]
    out["deprecatedSource"] = core.get("source") or {}
    out["deprecatedFirstTimestamp"] = core.get("firstTimestamp")
    out["deprecatedLastTimestamp"] = core.get("lastTimestamp")
    if core.get("count"):
        out["deprecatedCount"] = core["count"]
    return out


def with_kind(rt: ResourceType, obj: Mapping[str, Any]) -> Obj:
    """A stored object (no kind/apiVersion) as the API returns a single object."""
    if rt is EVENTS_V1:
        return event_to_events_v1(obj)
    return {
        "kind": rt.kind,
        "apiVersion": rt.api_version,
        **{k: v for k, v in obj.items() if k not in ("kind", "apiVersion")},
    }
