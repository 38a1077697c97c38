"""LIST with kube-apiserver's semantics: namespaces, selectors, limit/continue pagination and the
resourceVersion / resourceVersionMatch rules, including their error Statuses.

A paginated list must be consistent at the resourceVersion of its first page even while writes go
on (informers and our reflector depend on it), so later pages are served from the current objects
with the history's events after that revision undone, and expire (410) once the history no longer
reaches back that far.
"""

from __future__ import annotations

import bisect

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.api import Obj, ResourceType
from vgpu_scheduler.cluster.errors import ApiError, status_body
from vgpu_scheduler.standin.memory import selectors, statuses
from vgpu_scheduler.standin.memory.codec import Stored
from vgpu_scheduler.standin.memory.store import ObjectStore, ResourceStorage


def list_objects(
    store: ObjectStore,
    rt: ResourceType,
    *,
    namespace: str | None,
    label_selector: str | None,
    field_selector: str | None,
    limit: int,
    continue_: str | None,
    resource_version: str | None,
    resource_version_match: str | None,
) -> tuple[list[Stored], Obj]:
    """One page of a list: its items and the List metadata (resourceVersion, continue,
    remainingItemCount)."""
    st = store.storage(rt)
    lsel, fsel = selectors.parse(rt, label_selector, field_selector)
    prefix = f"{namespace}/" if namespace and rt.namespaced else ""
    at_rv: int | None = None  # None: the current state
    start = prefix
    if continue_:
        if resource_version:
            raise ApiError.make(400, "specifying resource version is not allowed when using continue")
        try:
            token_rv, rel_start = api.decode_continue(continue_)
        except ValueError as exc:
            raise ApiError.make(400, str(exc)) from None
        start = prefix + rel_start
        if token_rv >= 0:
            if token_rv < st.floor:
                raise ApiError(
                    410,
                    status_body(
                        410,
                        "Expired",
                        statuses.EXPIRED_CONTINUE,
                        continue_token=(api.encode_continue(-1, rel_start)),
                    ),
                )
            at_rv = token_rv
    elif resource_version_match:
        if not resource_version:
            raise ApiError.make(400, "resourceVersionMatch is forbidden unless resourceVersion is provided")
        if resource_version_match not in ("Exact", "NotOlderThan"):
            raise ApiError.make(400, f'resourceVersionMatch: Unsupported value: "{resource_version_match}"')
        rv = statuses.parse_int(resource_version, "resourceVersion")
        _check_not_too_large(store, rv)
        if resource_version_match == "Exact":
            if rv < st.floor:
                raise ApiError.make(410, "The resourceVersion for the provided list is too old.")
            at_rv = rv
    elif resource_version and resource_version != "0":
        _check_not_too_large(store, statuses.parse_int(resource_version, "resourceVersion"))
    list_rv = store.rv if at_rv is None else at_rv
    items, last_key, more, remaining = _page(
        store, st, rt, at_rv=at_rv, prefix=prefix, start=start, limit=limit, lsel=lsel, fsel=fsel
    )
    meta: Obj = {"resourceVersion": str(list_rv)}
    if more and last_key is not None:
        meta["continue"] = api.encode_continue(list_rv, last_key[len(prefix) :] + "\x00")
        if lsel.empty and fsel.empty:
            meta["remainingItemCount"] = remaining
    return items, meta


def _check_not_too_large(store: ObjectStore, rv: int) -> None:
    if rv > store.rv:
        raise statuses.too_large_rv(rv, store.rv)


def _prefix_end(prefix: str) -> str:
    """The first key after every key that starts with `prefix` (all keys for an empty prefix)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else "\U0010ffff"


def _page(
    store: ObjectStore,
    st: ResourceStorage,
    rt: ResourceType,
    *,
    at_rv: int | None,
    prefix: str,
    start: str,
    limit: int,
    lsel: selectors.LabelSelector,
    fsel: selectors.FieldSelector,
) -> tuple[list[Stored], str | None, bool, int]:
    """One page of the list as it was at `at_rv`: the current objects with the events after
    at_rv undone (the history window guarantees they are all there)."""
    end = _prefix_end(prefix)
    overrides: dict[str, Stored | None] = {}
    if at_rv is not None and at_rv < store.rv:
        for ev in reversed(st.history):
            if ev.rv <= at_rv:
                break
            overrides[ev.key] = ev.old  # the oldest event after at_rv wins: the state at at_rv
    keys = st.sorted_keys()
    lo, hi = bisect.bisect_left(keys, start), bisect.bisect_left(keys, end)
    ov_keys = sorted(k for k in overrides if start <= k < end)
    check = not (lsel.empty and fsel.empty)
    items: list[Stored] = []
    last_key: str | None = None
    more = False
    i, j = lo, 0
    while i < hi or j < len(ov_keys):
        # Merge the current keys with the undone ones, in key order.
        if j >= len(ov_keys) or (i < hi and keys[i] < ov_keys[j]):
            key = keys[i]
            i += 1
        else:
            key = ov_keys[j]
            j += 1
            if i < hi and keys[i] == key:
                i += 1
        stored = overrides[key] if key in overrides else st.objects[key]
        if stored is None:
            continue
        if limit and len(items) >= limit:
            more = True
            break
        if check and not selectors.matches(rt, stored.obj, lsel, fsel):
            continue
        items.append(stored)
        last_key = key
    remaining = 0
    if more and last_key is not None:
        after = hi - bisect.bisect_right(keys, last_key, lo, hi)
        for k, old in overrides.items():
            if last_key < k < end and k.startswith(prefix):
                after += (old is not None) - (k in st.objects)
        remaining = after
    return items, last_key, more, remaining
