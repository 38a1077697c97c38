"""CREATE, UPDATE (PUT) and PATCH with kube-apiserver's semantics.

What the API server does to a body before it is stored is what clients observe, so it is
reproduced here: defaulting and validation, server-owned metadata (uid, creationTimestamp,
generation, resourceVersion) kept or set, optimistic concurrency on resourceVersion, the status
subresource split, and no-op writes that do not bump the resourceVersion. Key order follows Go's
(api.order_object) so answers compare byte for byte with the fixtures.
"""

from __future__ import annotations

import uuid
from typing import Any

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.api import Obj, ResourceType
from vgpu_scheduler.cluster.errors import ApiError, details
from vgpu_scheduler.standin.memory import statuses, validation
from vgpu_scheduler.standin.memory.codec import Stored, decode, rfc3339, single_bytes
from vgpu_scheduler.standin.memory.store import ObjectStore

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's generateName alphabet


def create(
    store: ObjectStore, rt: ResourceType, *, namespace: str | None, obj: Obj, seeding: bool = False
) -> Stored:
    """Store a new object. `seeding` keeps what a snapshot brings (uid, creationTimestamp,
    deletionTimestamp, status) instead of setting them as for a client's create."""
    st = store.storage(rt)
    obj.pop("kind", None)
    obj.pop("apiVersion", None)
    if rt is api.EVENTS_V1:
        obj = api.event_to_core(obj)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    validation.check_meta_types(rt, meta)
    if rt.namespaced:
        body_ns = meta.get("namespace")
        if namespace and body_ns and body_ns != namespace:
            raise ApiError.make(
                400,
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        meta["namespace"] = namespace or body_ns or "default"
    else:
        meta.pop("namespace", None)
    if not meta.get("name") and meta.get("generateName"):
        for _ in range(100):
            meta["name"] = meta["generateName"] + "".join(store.rng.choices(_NAME_CHARS, k=5))
            if store.key(rt, meta.get("namespace"), meta["name"]) not in st.objects:
                break
    name = meta.get("name") or ""
    if not seeding or not meta.get("uid"):
        meta["uid"] = str(uuid.UUID(int=store.rng.getrandbits(128), version=4))
    if not seeding or not meta.get("creationTimestamp"):
        meta["creationTimestamp"] = rfc3339(store.clock())
    for k in ("deletionTimestamp", "deletionGracePeriodSeconds") if not seeding else ():
        meta.pop(k, None)
    meta["resourceVersion"] = ""  # placeholder so the key lands in its Go position; set on commit
    if rt is api.PODS:
        validation.default_pod(obj, seeding)
    if rt is api.EVENTS:
        obj = api.core_event_shape(obj)
    validation.raise_invalid(rt, name, validation.validate(rt, obj))
    key = store.key(rt, meta.get("namespace"), name)
    if key in st.objects:
        raise ApiError.make(
            409,
            f'{rt.qualified} "{name}" already exists',
            reason="AlreadyExists",
            details=details(name, rt.plural, rt.group),
        )
    return store.commit(st, key, api.order_object(obj), "ADDED")


def update(
    store: ObjectStore,
    rt: ResourceType,
    *,
    namespace: str | None,
    name: str,
    obj: Obj,
    subresource: str | None,
) -> Stored:
    """PUT: replace the object; a resourceVersion in the body must match the stored one (409)."""
    current = store.get(rt, namespace, name)
    obj.pop("kind", None)
    obj.pop("apiVersion", None)
    if rt is api.EVENTS_V1:
        obj = api.event_to_core(obj)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    if meta.get("name") not in (None, name):
        raise ApiError.make(
            400,
            f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})",
        )
    old = current.decoded()
    rv = meta.get("resourceVersion")
    if rv and rv != old["metadata"].get("resourceVersion"):
        raise statuses.conflict(rt, name, statuses.MODIFIED)
    return _write(store, rt, current, old, new=obj, subresource=subresource)


def patch(
    store: ObjectStore,
    rt: ResourceType,
    *,
    namespace: str | None,
    name: str,
    patch: Any,
    patch_type: str,
    subresource: str | None,
) -> Stored:
    """PATCH with patch_type "merge" (RFC 7386) or "json" (RFC 6902), applied to the object as the
    client sees it (events.k8s.io/v1 shape included)."""
    current = store.get(rt, namespace, name)
    old = current.decoded()  # private: the patched object may share its untouched parts
    base: Obj
    if rt is api.EVENTS_V1:
        base = decode(single_bytes(rt, current))
    elif isinstance(patch, dict) and patch_type == "merge" and not ("kind" in patch or "apiVersion" in patch):
        # What merging into the object as a GET shows it gives once kind and apiVersion are
        # dropped again below, without that copy (stored objects carry neither).
        base = old
    else:
        base = {"kind": rt.kind, "apiVersion": rt.api_version, **old}  # as a GET shows it
    try:
        if patch_type == "merge":
            if not isinstance(patch, dict):
                raise ApiError.make(400, "merge patch must be a JSON object")
            new = api.merge_patch(base, patch)
        elif patch_type == "json":
            # Copy on write, like the merge patch: a deep copy of a node costs five decodes.
            new = api.json_patch(base, patch, share=True)
        else:
            raise ValueError(f"unknown patch type {patch_type!r}")
    except api.PatchError as exc:
        raise ApiError.make(422 if "test" in str(exc) else 400, str(exc)) from None
    if not isinstance(new, dict):
        raise ApiError.make(400, "patch result is not an object")
    new.pop("kind", None)
    new.pop("apiVersion", None)
    if rt is api.EVENTS_V1:
        new = api.event_to_core(new)
    meta = new.get("metadata")
    if not isinstance(meta, dict):
        meta = new["metadata"] = {}
    # A resourceVersion inside the patch is a precondition (fixture patch-409-conflict.json);
    # a patch that nulls it makes the update unconditional.
    rv = meta.get("resourceVersion")
    if rv is not None and rv != old["metadata"].get("resourceVersion"):
        raise statuses.conflict(rt, name, statuses.MODIFIED)
    return _write(store, rt, current, old, new=new, subresource=subresource)


def _write(
    store: ObjectStore, rt: ResourceType, current: Stored, old: Obj, *, new: Obj, subresource: str | None
) -> Stored:
    """Replace `current` (decoded as `old`, a private copy) with `new` (already holding the caller's
    changes), keeping what the API server keeps: identity metadata, and status (main resource) or
    everything but status (status subresource). `new` may share parts with `old` (a merge patch
    copies only what it changes): neither is edited below their top level and metadata."""
    st = store.storage(rt)
    old_meta = old["metadata"]
    meta = new.get("metadata")
    # A copy: a patch that did not touch metadata shares old's, and old must stay as it was.
    meta = new["metadata"] = dict(meta) if isinstance(meta, dict) else {}
    validation.check_meta_types(rt, meta)
    for k in (
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ):
        if k in old_meta:
            meta[k] = old_meta[k]
        else:
            meta.pop(k, None)
    if subresource == "status":
        new = {**old, "status": new.get("status") or {}}
        new["metadata"] = dict(old_meta)
    elif rt.has_status:
        if "status" in old:
            new["status"] = old["status"]
        else:
            new.pop("status", None)
    if rt is api.EVENTS:
        new = api.core_event_shape(new)
    name = old_meta.get("name", "")
    if rt is api.PODS and subresource is None:
        validation.check_pod_spec_update(name, old.get("spec") or {}, new.get("spec") or {})
    validation.raise_invalid(rt, name, validation.validate(rt, new))
    if rt is api.PODS and new.get("spec") != old.get("spec") and isinstance(meta.get("generation"), int):
        meta["generation"] += 1
    meta["resourceVersion"] = old_meta.get("resourceVersion")
    new = api.order_object(new)
    if new == old:
        return current  # no-op writes do not bump the resourceVersion, like etcd guaranteed updates
    key = api.key_of(old)
    if meta.get("deletionTimestamp") and not meta.get("finalizers") and old_meta.get("finalizers"):
        # The last finalizer is gone from an object being deleted: the delete completes.
        store.commit(st, key, new, "MODIFIED")
        return store.commit(st, key, None, "DELETED")
    return store.commit(st, key, new, "MODIFIED")
