"""Label and field selectors as kube-apiserver parses and applies them, and the label value and
qualified-name checks they share with validation.

Lists and watches of the in-memory cluster share `parse` and `matches`, so that a list and a watch
with the same selectors see the same objects (a reflector relies on that to stay in sync); errors
carry the apiserver's texts."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.api import (
    EVENTS,
    EVENTS_V1,
    LEASES,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCEQUOTAS,
    SECRETS,
    Obj,
    ResourceType,
)
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.wire import objects

# --------------------------------------------------------------------------- names and labels

_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

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
    if "/" in key and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN_RE.match(prefix)):
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


def parse(
    rt: ResourceType, label_selector: str | None, field_selector: str | None
) -> tuple[LabelSelector, FieldSelector]:
    """Both selectors of a request; 400 with the parser's message if either is malformed."""
    try:
        return parse_label_selector(label_selector), parse_field_selector(field_selector, rt)
    except ValueError as exc:
        raise ApiError.make(400, str(exc)) from None


def matches(rt: ResourceType, obj: Obj, lsel: LabelSelector, fsel: FieldSelector) -> bool:
    """Whether a stored object passes both selectors. Field selectors on events.k8s.io/v1 name
    that version's fields, so the object is converted before matching."""
    if not lsel.matches(objects.labels(obj)):
        return False
    if fsel.empty:
        return True
    return fsel.matches(api.event_to_events_v1(obj) if rt is api.EVENTS_V1 else obj)
