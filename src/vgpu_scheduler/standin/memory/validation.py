"""The validation and defaulting kube-apiserver's registry strategies apply to the objects a
scheduler meets (names, labels, annotation keys, the pod spec's immutable fields, a pod's defaults
and QoS class): the in-memory API server refuses and fills in what the real one does."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from vgpu_scheduler.cluster.api import (
    EVENTS_V1,
    PODS,
    Obj,
    ResourceType,
)
from vgpu_scheduler.cluster.errors import ApiError, status_body
from vgpu_scheduler.standin.memory.selectors import (
    DNS1123_SUBDOMAIN_RE,
    label_value_error,
    qualified_name_error,
)

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
    if len(name) > 253 or not DNS1123_SUBDOMAIN_RE.match(name):
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
