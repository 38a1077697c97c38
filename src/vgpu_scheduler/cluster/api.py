"""What the Kubernetes API *is*, independent of any transport: the resource table, REST paths,
label/field selectors, continue tokens, merge/JSON patches, the two Event representations, and the
validation and defaulting kube-apiserver applies to the objects we handle.

Pure functions only (no I/O, no clock), shared by the client (to build requests) and by the
in-memory cluster (to serve them).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import quote, unquote

from vgpu_scheduler.cluster.errors import ApiError, status_body
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


# --------------------------------------------------------------------------- names and labels

_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
    "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


@lru_cache(maxsize=4096)  # pure; every write re-validates the same few values
def label_value_error(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters"
    return None if _LABEL_VALUE_RE.match(value) else LABEL_VALUE_MSG


@lru_cache(maxsize=4096)  # pure; every write re-validates the same few keys
def qualified_name_error(key: str) -> str | None:
    """Label and annotation keys: optional DNS subdomain prefix + '/' + name of ≤ 63 characters."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    return None if _QUALIFIED_NAME_RE.match(name) else QUALIFIED_NAME_MSG


# --------------------------------------------------------------------------- label selectors


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        if self.op in ("=", "in"):
            return has and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not has or labels[self.key] not in self.values
        if not has:
            return False
        try:  # gt/lt compare integers, like apimachinery
            return (
                int(labels[self.key]) > int(self.values[0])
                if self.op == "gt"
                else (int(labels[self.key]) < int(self.values[0]))
            )
        except ValueError:
            return False


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


_SELECTOR_STOP = set(" \t=!,()<>")


def parse_label_selector(text: str | None) -> LabelSelector:
    """Equality (`a=b`, `a==b`, `a!=b`), existence (`a`, `!a`), set (`a in (x,y)`, `a notin (x)`)
    and `a>1`/`a<1`. Raises ValueError with the apiserver's wording on bad input."""
    s = text or ""
    i, n = 0, len(s)
    reqs: list[Requirement] = []

    def skip_ws() -> None:
        nonlocal i
        while i < n and s[i] in " \t":
            i += 1

    def read_word() -> str:
        nonlocal i
        start = i
        while i < n and s[i] not in _SELECTOR_STOP:
            i += 1
        return s[start:i]

    while True:
        skip_ws()
        if i >= n:
            break
        negate = s[i] == "!"
        if negate:
            i += 1
            skip_ws()
        key = read_word()
        if not key:
            raise ValueError(f"unable to parse requirement: found '{s[i : i + 1]}', expected: identifier")
        if (err := qualified_name_error(key)) is not None:
            raise ValueError(f"unable to parse requirement: key: Invalid value: {key!r}: {err}")
        skip_ws()
        if negate:
            reqs.append(Requirement(key, "!", ()))
        elif i >= n or s[i] == ",":
            reqs.append(Requirement(key, "exists", ()))
        elif s.startswith("==", i) or s.startswith("!=", i) or s[i] in "=<>":
            op = "!=" if s.startswith("!=", i) else {"<": "lt", ">": "gt"}.get(s[i], "=")
            i += 2 if s.startswith(("==", "!="), i) else 1
            skip_ws()
            value = read_word()
            _check_value(value)
            if op in ("gt", "lt") and not re.fullmatch(r"-?\d+", value):
                raise ValueError(
                    f"unable to parse requirement: for 'gt', 'lt' operators, the value must "
                    f"be an integer: {value!r}"
                )
            reqs.append(Requirement(key, op, (value,)))
        else:
            word = read_word()
            if word not in ("in", "notin"):
                raise ValueError(
                    f"unable to parse requirement: found '{word or s[i]}', expected: "
                    "in, notin, =, ==, !=, gt, lt"
                )
            skip_ws()
            if i >= n or s[i] != "(":
                raise ValueError("unable to parse requirement: found '', expected: '('")
            i += 1
            values: list[str] = []
            while True:
                skip_ws()
                values.append(read_word())
                skip_ws()
                if i < n and s[i] == ",":
                    i += 1
                    continue
                if i < n and s[i] == ")":
                    i += 1
                    break
                raise ValueError("unable to parse requirement: found '', expected: ',', ')'")
            for v in values:
                _check_value(v)
            reqs.append(Requirement(key, word, tuple(values)))
        skip_ws()
        if i < n:
            if s[i] != ",":
                raise ValueError(f"found '{s[i]}', expected: ',' or 'end of string'")
            i += 1
    return LabelSelector(tuple(reqs))


def _check_value(value: str) -> None:
    if (err := label_value_error(value)) is not None:
        raise ValueError(f"unable to parse requirement: values[0]: Invalid value: {value!r}: {err}")


# --------------------------------------------------------------------------- field selectors

_COMMON_FIELDS = ("metadata.name", "metadata.namespace")
_EVENT_REF = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
# Which fields each resource can be selected on (the apiserver rejects all others).
SELECTABLE_FIELDS: dict[ResourceType, tuple[str, ...]] = {
    PODS: (
        *_COMMON_FIELDS,
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    NODES: (*_COMMON_FIELDS, "spec.unschedulable"),
    RESOURCEQUOTAS: _COMMON_FIELDS,
    LEASES: _COMMON_FIELDS,
    NAMESPACES: (*_COMMON_FIELDS, "status.phase"),
    SECRETS: (*_COMMON_FIELDS, "type"),
    MUTATING_WEBHOOK_CONFIGURATIONS: _COMMON_FIELDS,
    EVENTS: (
        *_COMMON_FIELDS,
        *(f"involvedObject.{f}" for f in _EVENT_REF),
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    EVENTS_V1: (
        *_COMMON_FIELDS,
        *(f"regarding.{f}" for f in _EVENT_REF),
        "reason",
        "reportingController",
        "type",
    ),
}


@dataclass(frozen=True, slots=True)
class FieldSelector:
    terms: tuple[tuple[str, bool, str], ...] = ()  # (field path, equal?, value)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, path) == value) == eq for path, eq, value in self.terms)

    @property
    def empty(self) -> bool:
        return not self.terms


def parse_field_selector(text: str | None, rt: ResourceType) -> FieldSelector:
    """`a=b,c!=d` (also `==`); only the resource's selectable fields. ValueError on bad input."""
    terms: list[tuple[str, bool, str]] = []
    allowed = SELECTABLE_FIELDS.get(rt, _COMMON_FIELDS)
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"([^=!]+?)\s*(==|!=|=)\s*(.*)", part)
        if m is None:
            raise ValueError(f"invalid selector: '{text}'; can't understand '{part}'")
        path, op, value = m.group(1), m.group(2), m.group(3)
        if path not in allowed:
            raise ValueError(f"field label not supported: {path}")
        terms.append((path, op != "!=", value))
    return FieldSelector(tuple(terms))


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string a field selector compares with: missing → "", booleans → "true"/"false"."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


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


# --------------------------------------------------------------------------- validation and defaulting
# What kube-apiserver's registry strategies check and fill in (the subset a scheduler meets).


_STR_ONLY = frozenset({str})


def _all_str(values: Iterable[Any]) -> bool:
    """Every value is a str: their types compared at C speed (decoded JSON makes exact strs), item
    by item only when some type is another (a str subclass passes)."""
    values = list(values)
    return _STR_ONLY.issuperset(map(type, values)) or all(isinstance(v, str) for v in values)


def check_meta_types(rt: ResourceType, meta: Obj) -> None:
    """What Go's JSON decoding into ObjectMeta would refuse (400 BadRequest)."""
    for fld in ("labels", "annotations"):
        value = meta.get(fld)
        if value is None:
            continue
        if not isinstance(value, dict) or not _all_str(value.values()):
            raise ApiError.make(
                400,
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                f"json: cannot unmarshal into Go struct field ObjectMeta.metadata.{fld} of type "
                "map[string]string",
            )
    for fld in ("name", "namespace", "generateName", "resourceVersion", "uid"):
        if fld in meta and meta[fld] is not None and not isinstance(meta[fld], str):
            raise ApiError.make(
                400,
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                f"json: cannot unmarshal into Go struct field ObjectMeta.metadata.{fld} of type string",
            )


_DNS_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


@lru_cache(maxsize=8192)
def _name_errors(name: str) -> tuple[tuple[str, str, str], ...]:
    """`validate`'s errors for metadata.name."""
    if not name:
        return (("metadata.name", "FieldValueRequired", "Required value: name or generateName is required"),)
    if len(name) > 253 or not _DNS1123_SUBDOMAIN_RE.match(name):
        return (("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {_DNS_SUBDOMAIN_MSG}'),)
    return ()


@lru_cache(maxsize=4096)
def _label_errors(labels: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str, str], ...]:
    """`validate`'s errors for metadata.labels (its items, in order)."""
    errs: list[tuple[str, str, str]] = []
    for key, value in labels:
        if (err := qualified_name_error(key)) is not None:
            errs.append(("metadata.labels", "FieldValueInvalid", f'Invalid value: "{key}": {err}'))
        if (err := label_value_error(value)) is not None:
            errs.append(("metadata.labels", "FieldValueInvalid", f'Invalid value: "{value}": {err}'))
    return tuple(errs)


@lru_cache(maxsize=4096)
def _annotation_key_errors(keys: tuple[str, ...]) -> tuple[tuple[str, str, str], ...]:
    """`validate`'s errors for the keys of metadata.annotations, in order."""
    return tuple(
        ("metadata.annotations", "FieldValueInvalid", f'Invalid value: "{key}": {err}')
        for key in keys
        if (err := qualified_name_error(key.lower())) is not None
    )


def validate(rt: ResourceType, obj: Obj) -> list[tuple[str, str, str]]:
    """(field, cause reason, message) for what kube-apiserver validation rejects (a subset)."""
    meta = obj["metadata"]
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    # The checks of names, labels and annotation keys are cached on what they read: every write
    # of an object re-validates the same few of them.
    errs = [
        *_name_errors(meta.get("name") or ""),
        *_label_errors(tuple(labels.items())),
        *_annotation_key_errors(tuple(annotations)),
    ]
    if sum(map(len, annotations)) + sum(map(len, annotations.values())) > 256 * 1024:
        errs.append(("metadata.annotations", "FieldValueTooLong", "Too long: must have at most 262144 bytes"))
    if rt is EVENTS_V1:  # obj is already in the core/v1 shape here
        for core_key, v1_key in (
            ("eventTime", "eventTime"),
            ("reportingComponent", "reportingController"),
            ("reportingInstance", "reportingInstance"),
            ("action", "action"),
            ("reason", "reason"),
        ):
            if not obj.get(core_key):
                errs.append((v1_key, "FieldValueRequired", "Required value"))
        if obj.get("type") not in ("Normal", "Warning"):
            errs.append(
                (
                    "type",
                    "FieldValueInvalid",
                    f'Invalid value: "{obj.get("type") or ""}": has invalid '
                    "value, must be one of Normal, Warning",
                )
            )
    if rt is PODS:
        containers = (obj.get("spec") or {}).get("containers")
        if not isinstance(containers, list) or not containers:
            errs.append(("spec.containers", "FieldValueRequired", "Required value"))
    return errs


def raise_invalid(rt: ResourceType, name: str, errs: list[tuple[str, str, str]]) -> None:
    if not errs:
        return
    texts = [f"{f}: {m}" for f, _, m in errs]
    summary = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    det: Obj = {"name": name}
    if rt.group:
        det["group"] = rt.group
    det["kind"] = rt.kind
    det["causes"] = [{"reason": r, "message": m, "field": f} for f, r, m in errs]
    raise ApiError(422, status_body(422, "Invalid", f'{rt.kind} "{name}" is invalid: {summary}', det))


_MUTABLE_POD_SPEC = (
    "activeDeadlineSeconds",
    "tolerations",
    "terminationGracePeriodSeconds",
    "schedulingGates",
)


def check_pod_spec_update(name: str, old: Obj, new: Obj) -> None:
    """Pod spec is immutable but for a few fields (and spec.nodeName only moves through binding)."""

    def strip(spec: Obj) -> Obj:
        out = {k: v for k, v in spec.items() if k not in _MUTABLE_POD_SPEC}
        for group in ("containers", "initContainers"):
            if isinstance(out.get(group), list):
                out[group] = [
                    {k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                    for c in out[group]
                ]
        return out

    if old is not new and strip(old) != strip(new):  # a patch that left the spec alone shares it
        msg = (
            "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
            "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions "
            "to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it "
            "was previously negative)"
        )
        raise ApiError(
            422,
            status_body(
                422,
                "Invalid",
                f'Pod "{name}" is invalid: {msg}',
                {
                    "name": name,
                    "kind": "Pod",
                    "causes": [{"reason": "FieldValueForbidden", "message": msg[6:], "field": "spec"}],
                },
            ),
        )


def default_pod(pod: Obj, seeding: bool) -> None:
    """The defaulting kube-apiserver applies to a new Pod that matters to a scheduler: limits copied
    into missing requests, schedulerName, phase Pending, qosClass, generation 1."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    if not seeding:
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("priority", 0)
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            res = c.get("resources") if isinstance(c, dict) else None
            if isinstance(res, dict) and isinstance(res.get("limits"), dict):
                requests = res.setdefault("requests", {})
                if isinstance(requests, dict):
                    for k, v in res["limits"].items():
                        requests.setdefault(k, v)
    status = pod.get("status")
    if not isinstance(status, dict):
        status = pod["status"] = {}
    if "phase" not in status:
        pod["status"] = status = {"phase": "Pending", **status}
    status.setdefault("qosClass", qos_class(spec))
    meta = pod["metadata"]
    if not seeding or "generation" not in meta:
        meta["generation"] = 1


def qos_class(spec: Obj) -> str:
    containers = [
        c for g in ("initContainers", "containers") for c in spec.get(g) or [] if isinstance(c, dict)
    ]
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for r in ("cpu", "memory"):
            if r in req or r in lim:
                any_set = True
            if r not in lim or req.get(r, lim.get(r)) != lim.get(r):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


# --------------------------------------------------------------------------- watches
