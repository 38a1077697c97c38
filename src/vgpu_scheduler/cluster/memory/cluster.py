"""An in-memory cluster that answers like kube-apiserver (+ etcd) for the resources we use.

One global resourceVersion counter (like etcd's revision), objects stored as msgspec-encoded JSON
next to their decoded form (handing out `decode(raw)` gives callers private copies for free), a
bounded per-resource event history that serves watches from an old resourceVersion and consistent
paginated lists at the first page's resourceVersion, and fault hooks for tests.

Two entry points over the same core:
* `handle()` / `open_watch()` take REST requests (method, path, query, body) and answer bytes, used
  by `MemoryTransport` (in process) and by `fakeapi` (over HTTP);
* `create/get/list/patch/...` are a direct Python API with dicts for seeding and assertions (no
  fault injection on that path).
Error bodies are the ones kube-apiserver 1.36 sends (see fixtures/kube-1.36/api/).
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
import json
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.api import Obj, ResourceType
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError, details, status_body, success_status
from vgpu_scheduler.cluster.transport import gc_paused

log = logging.getLogger(__name__)

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


class WatchDropped(ApiConnectionError):
    """The in-memory cluster cut a watch (fault injection or a consumer too slow to keep up)."""


@dataclass(slots=True)
class _Stored:
    obj: Obj  # never mutated once stored, never handed out
    raw: bytes  # encoded obj, without kind/apiVersion (list item shape)


@dataclass(slots=True)
class _Event:
    rv: int
    type: str  # ADDED / MODIFIED / DELETED
    key: str
    namespace: str
    new: _Stored  # for DELETED: the final state, carrying the deletion resourceVersion
    old: _Stored | None
    lines: dict[tuple[str, str], bytes] = field(default_factory=dict)


@dataclass(slots=True)
class _Storage:
    objects: dict[str, _Stored] = field(default_factory=dict)
    history: list[_Event] = field(default_factory=list)
    floor: int = 0  # every event with rv > floor is still in `history`
    watchers: set[MemoryWatch] = field(default_factory=set)
    _sorted: list[str] | None = None

    def sorted_keys(self) -> list[str]:
        if self._sorted is None:
            self._sorted = sorted(self.objects)
        return self._sorted


@dataclass(slots=True)
class _Fault:
    verb: str
    resource: str | None
    remaining: int
    status: int | None = None
    reason: str | None = None
    message: str | None = None
    delay: float = 0.0


def _now_rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _prefix_end(prefix: str) -> str:
    return prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else "\U0010ffff"


class MemoryCluster:
    """See module docstring. All methods must be called from one event loop / thread."""

    def __init__(
        self,
        *,
        history_size: int = 10_000,
        bookmark_interval: float = 60.0,
        watch_queue_limit: int = 200_000,
        clock: Callable[[], datetime] | None = None,
        seed: int | None = None,
    ) -> None:
        self.history_size = history_size
        self.bookmark_interval = bookmark_interval
        self.watch_queue_limit = watch_queue_limit
        self._clock = clock or (lambda: datetime.now(UTC))
        self._rng = random.Random(seed)
        self._rv = 1
        self._storages: dict[str, _Storage] = {rt.storage: _Storage() for rt in api.ALL_RESOURCES}
        self._faults: builtins.list[_Fault] = []
        self.latency = 0.0  # seconds added to every REST request (slow API server)
        self.request_log: deque[tuple[str, str, str]] = deque(maxlen=2000)  # (verb, method, path)

    # ------------------------------------------------------------------ introspection

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion (etcd revision)."""
        return self._rv

    def count(self, resource: str | ResourceType) -> int:
        return len(self._storage(api.resource_type(resource)).objects)

    def watch_count(self, resource: str | ResourceType | None = None) -> int:
        storages = (
            self._storages.values() if resource is None else [self._storage(api.resource_type(resource))]
        )
        return sum(len(s.watchers) for s in storages)

    # ------------------------------------------------------------------ fault injection

    def fail_next(
        self,
        verb: str,
        count: int = 1,
        status: int = 500,
        *,
        resource: str | None = None,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the next `count` REST requests of `verb` (get, list, watch, create, update, patch,
        delete or "*"; binding is create on "pods/binding") with a failure Status."""
        self._faults.append(_Fault(verb, resource, count, status, reason, message))

    def delay_next(
        self, verb: str, count: int = 1, seconds: float = 0.1, *, resource: str | None = None
    ) -> None:
        """Hold the next `count` REST requests of `verb` for `seconds` before serving them."""
        self._faults.append(_Fault(verb, resource, count, delay=seconds))

    def drop_watches(self, resource: str | ResourceType | None = None) -> int:
        """Cut every open watch (like a connection reset). Returns how many were cut."""
        storages = (
            self._storages.values() if resource is None else [self._storage(api.resource_type(resource))]
        )
        n = 0
        for st in storages:
            for w in list(st.watchers):
                w.drop()
                n += 1
        return n

    def compact(self) -> None:
        """Forget all event history (etcd compaction): watches from any older resourceVersion get
        410 Expired, continue tokens expire."""
        # Move the revision on (a live cluster always has writes, e.g. lease renewals) so that every
        # resourceVersion handed out so far is older than the compaction point.
        self._rv += 1
        for st in self._storages.values():
            st.history.clear()
            st.floor = self._rv

    def trigger_bookmarks(self) -> int:
        """Send a BOOKMARK now on every watch that asked for bookmarks."""
        n = 0
        for st in self._storages.values():
            for w in st.watchers:
                if w.allow_bookmarks:
                    w.push_bookmark()
                    n += 1
        return n

    async def _apply_faults(self, verb: str, resource: str) -> None:
        for f in list(self._faults):
            if f.verb not in ("*", verb) or (f.resource is not None and f.resource != resource):
                continue
            f.remaining -= 1
            if f.remaining <= 0:
                self._faults.remove(f)
            if f.delay:
                await asyncio.sleep(f.delay)
            if f.status is not None:
                raise ApiError.make(
                    f.status, f.message or f"injected failure for {verb} {resource}", reason=f.reason
                )

    # ------------------------------------------------------------------ REST entry points

    async def handle(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
    ) -> tuple[int, bytes]:
        """Serve one non-watch REST request; returns (HTTP status, JSON body)."""
        params = params or {}
        try:
            info = api.parse_path(path)
            if info is None:
                raise ApiError.make(404, "the server could not find the requested resource", details={})
            verb = _verb(method, info)
            res = info.rt.plural + (f"/{info.subresource}" if info.subresource else "")
            self.request_log.append((verb, method, path))
            if self.latency:
                await asyncio.sleep(self.latency)
            await self._apply_faults(verb, res)
            return self._dispatch(verb, info, params, body, content_type)
        except ApiError as exc:
            return exc.status, _encode(exc.body)

    async def open_watch(self, path: str, params: Mapping[str, str] | None = None) -> MemoryWatch:
        """Start a REST watch (`?watch=1`); raises ApiError for what would be a non-200 answer."""
        params = params or {}
        info = api.parse_path(path)
        if info is None or info.name is not None:
            raise ApiError.make(404, "the server could not find the requested resource", details={})
        res = info.rt.plural
        self.request_log.append(("watch", "GET", path))
        if self.latency:
            await asyncio.sleep(self.latency)
        await self._apply_faults("watch", res)
        timeout = params.get("timeoutSeconds")
        return self.watch(
            info.rt,
            namespace=info.namespace,
            label_selector=params.get("labelSelector"),
            field_selector=params.get("fieldSelector"),
            resource_version=params.get("resourceVersion"),
            allow_bookmarks=_flag(params.get("allowWatchBookmarks")),
            send_initial_events=_flag(params.get("sendInitialEvents")),
            # Fractions are accepted (the real API takes integers) so tests can use short timeouts.
            timeout_seconds=_parse_float(timeout, "timeoutSeconds") if timeout else None,
        )

    def _dispatch(
        self, verb: str, info: api.PathInfo, params: Mapping[str, str], body: bytes | None, ctype: str | None
    ) -> tuple[int, bytes]:
        rt, ns, name, sub = info.rt, info.namespace, info.name, info.subresource
        if (
            sub is not None
            and not (sub == "status" and rt.has_status)
            and not (sub == "binding" and rt is api.PODS)
        ):
            raise ApiError.make(404, "the server could not find the requested resource", details={})
        if verb == "get":
            assert name is not None
            return 200, self._single_bytes(rt, self._get(rt, ns, name))
        if verb == "list":
            items, meta = self._list(
                rt,
                ns,
                params.get("labelSelector"),
                params.get("fieldSelector"),
                _parse_int(params.get("limit") or "0", "limit"),
                params.get("continue"),
                params.get("resourceVersion"),
                params.get("resourceVersionMatch"),
            )
            return 200, self._list_bytes(rt, items, meta)
        if verb == "create" and sub == "binding":
            assert name is not None and ns is not None
            self._bind(ns, name, _json_object(body, "Binding"))
            return 201, _encode(success_status(201))
        if verb == "create":
            if rt.namespaced and ns is None:
                raise ApiError.make(405, "the server does not allow this method on the requested resource")
            obj = _json_object(body, rt.kind)
            return 201, self._single_bytes(rt, self._create(rt, ns, obj))
        assert name is not None
        if verb == "update":
            obj = _json_object(body, rt.kind)
            return 200, self._single_bytes(rt, self._update(rt, ns, name, obj, sub))
        if verb == "patch":
            patch_type = (ctype or "").split(";")[0].strip()
            if patch_type not in ("application/merge-patch+json", "application/json-patch+json"):
                raise ApiError.make(
                    415,
                    "the body of the request was in an unknown format - accepted media "
                    "types include: application/json-patch+json, application/merge-patch+json",
                )
            try:
                patch = _decode(body or b"null")
            except msgspec.DecodeError as exc:
                raise ApiError.make(400, f"error decoding patch: {exc}") from None
            kind = "merge" if patch_type == "application/merge-patch+json" else "json"
            return 200, self._single_bytes(rt, self._patch(rt, ns, name, patch, kind, sub))
        if verb == "delete":
            opts = _json_object(body, "DeleteOptions") if body else {}
            grace = opts.get("gracePeriodSeconds")
            if "gracePeriodSeconds" in params:
                grace = _parse_int(params["gracePeriodSeconds"], "gracePeriodSeconds")
            pre = opts.get("preconditions") or {}
            return 200, self._single_bytes(rt, self._delete(rt, ns, name, grace, pre))
        raise ApiError.make(405, "the server does not allow this method on the requested resource")

    # ------------------------------------------------------------------ direct Python API

    def create(
        self, resource: str | ResourceType, obj: Mapping[str, Any], namespace: str | None = None
    ) -> Obj:
        rt = api.resource_type(resource)
        return self._out(rt, self._create(rt, namespace, _copy(obj)))

    def get(self, resource: str | ResourceType, name: str, namespace: str | None = None) -> Obj:
        rt = api.resource_type(resource)
        return self._out(rt, self._get(rt, namespace, name))

    def list(
        self,
        resource: str | ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> Obj:
        """The List object (kind PodList ...), items without kind/apiVersion like the real API."""
        rt = api.resource_type(resource)
        items, meta = self._list(
            rt,
            namespace,
            label_selector,
            field_selector,
            limit,
            continue_,
            resource_version,
            resource_version_match,
        )
        out: Obj = _decode(self._list_bytes(rt, items, meta))
        return out

    def objects(self, resource: str | ResourceType, namespace: str | None = None) -> builtins.list[Obj]:
        """All current objects (copies, with kind/apiVersion), in key order."""
        rt = api.resource_type(resource)
        st = self._storage(rt)
        return [
            self._out(rt, st.objects[k])
            for k in st.sorted_keys()
            if namespace is None or k.startswith(namespace + "/")
        ]

    def update(
        self,
        resource: str | ResourceType,
        obj: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> Obj:
        rt = api.resource_type(resource)
        name = (obj.get("metadata") or {}).get("name", "")
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        return self._out(rt, self._update(rt, ns, name, _copy(obj), subresource))

    def patch(
        self,
        resource: str | ResourceType,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
    ) -> Obj:
        """patch_type "merge" (RFC 7386) or "json" (RFC 6902); subresource None or "status"."""
        rt = api.resource_type(resource)
        return self._out(rt, self._patch(rt, namespace, name, _copy(patch), patch_type, subresource))

    def delete(
        self,
        resource: str | ResourceType,
        name: str,
        namespace: str | None = None,
        *,
        grace_period_seconds: int | None = None,
        preconditions: Mapping[str, str] | None = None,
    ) -> Obj:
        """Returns the object's last state. Bound pods are deleted gracefully (deletionTimestamp)
        unless grace_period_seconds=0, like the real API without a kubelet."""
        rt = api.resource_type(resource)
        return self._out(rt, self._delete(rt, namespace, name, grace_period_seconds, preconditions or {}))

    def bind(self, namespace: str, name: str, node: str, uid: str | None = None) -> Obj:
        binding: Obj = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        if uid is not None:
            binding["metadata"]["uid"] = uid
        self._bind(namespace, name, binding)
        return success_status(201)

    def watch(
        self,
        resource: str | ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        allow_bookmarks: bool = False,
        send_initial_events: bool = False,
        timeout_seconds: float | None = None,
    ) -> MemoryWatch:
        """A watch; iterate it for JSON lines (bytes) exactly as the HTTP stream carries them."""
        rt = api.resource_type(resource)
        st = self._storage(rt)
        lsel, fsel = self._selectors(rt, label_selector, field_selector)
        w = MemoryWatch(self, rt, st, namespace, lsel, fsel, allow_bookmarks, timeout_seconds)
        rv_text = resource_version or ""
        if rv_text in ("", "0") or send_initial_events:
            # "Get state and start at most recent": synthetic ADDED for what exists now.
            prefix = f"{namespace}/" if namespace and rt.namespaced else ""
            for key in st.sorted_keys():
                if prefix and not key.startswith(prefix):
                    continue
                s = st.objects[key]
                if w.matches(s.obj):
                    w.push(_event_line(rt, "ADDED", s))
            if send_initial_events and allow_bookmarks:
                w.push_bookmark({INITIAL_EVENTS_END: "true"})
        else:
            rv = _parse_int(rv_text, "resourceVersion")
            if rv < st.floor:
                oldest = st.history[0].rv if st.history else self._rv
                w.push(
                    _encode(
                        {
                            "type": "ERROR",
                            "object": status_body(
                                410, "Expired", f"too old resource version: {rv} ({oldest})"
                            ),
                        }
                    )
                )
                w.finish()
                return w
            start = bisect.bisect_right([e.rv for e in st.history], rv)
            for ev in st.history[start:]:
                w.offer(ev)
        st.watchers.add(w)
        return w

    def seed_from_list(self, objs: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> int:
        """Load a kubectl `List` / `PodList` ... (or an iterable of objects) as they are: uid,
        creationTimestamp and status kept, a fresh resourceVersion given. Unknown kinds and broken
        items are skipped with a warning. Returns how many objects were loaded."""
        default_kind: tuple[str, str] | None = None
        if isinstance(objs, Mapping):
            kind = str(objs.get("kind", ""))
            if kind.endswith("List") and kind != "List":
                default_kind = (str(objs.get("apiVersion", "v1")), kind[:-4])
            items: Iterable[Any] = objs.get("items") or []
        else:
            items = objs
        loaded = 0
        with gc_paused():  # bulk load: see transport.gc_paused
            for item in items:
                loaded += self._seed_one(item, default_kind)
        return loaded

    def _seed_one(self, item: Any, default_kind: tuple[str, str] | None) -> int:
        if not isinstance(item, Mapping):
            log.warning("snapshot: skipping a non-object item")
            return 0
        av, kind = str(item.get("apiVersion", "")), str(item.get("kind", ""))
        if not kind and default_kind is not None:
            av, kind = default_kind
        rt = api.EVENTS if kind == "Event" else api.resource_for_kind(av, kind)
        if rt is None:
            log.warning("snapshot: skipping unsupported kind %s/%s", av, kind)
            return 0
        try:
            obj = _copy(item)
            if av == "events.k8s.io/v1":
                obj = api.event_to_core(obj)
            self._create(rt, None, obj, seeding=True)
        except ApiError as exc:
            log.warning("snapshot: skipping %s: %s", kind, exc.message)
            return 0
        return 1

    def load_snapshot(self, path: str | Path) -> int:
        """seed_from_list from a JSON or YAML file (kubectl get -o json|yaml, multi-document YAML)."""
        import yaml  # only needed here

        text = Path(path).read_text()
        try:
            docs: builtins.list[Any] = [json.loads(text)]
        except json.JSONDecodeError:
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            docs = [d for d in yaml.load_all(text, Loader=loader) if d is not None]
        total = 0
        for doc in docs:
            if isinstance(doc, Mapping) and "items" in doc:
                total += self.seed_from_list(doc)
            elif isinstance(doc, Mapping):
                total += self.seed_from_list([doc])
        return total

    # ------------------------------------------------------------------ core operations

    def _storage(self, rt: ResourceType) -> _Storage:
        return self._storages[rt.storage]

    def _out(self, rt: ResourceType, stored: _Stored) -> Obj:
        out: Obj = _decode(self._single_bytes(rt, stored))
        return out

    def _single_bytes(self, rt: ResourceType, stored: _Stored) -> bytes:
        if rt is api.EVENTS_V1:
            return _encode(api.event_to_events_v1(stored.obj))
        return _with_kind_raw(rt, stored.raw)

    def _list_bytes(self, rt: ResourceType, items: builtins.list[_Stored], meta: Obj) -> bytes:
        if rt is api.EVENTS_V1:
            raws = [
                _encode(
                    {
                        k: v
                        for k, v in api.event_to_events_v1(s.obj).items()
                        if k not in ("kind", "apiVersion")
                    }
                )
                for s in items
            ]
        else:
            raws = [s.raw for s in items]
        head = _encode({"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta})
        return head[:-1] + b',"items":[' + b",".join(raws) + b"]}"

    def _key(self, rt: ResourceType, namespace: str | None, name: str) -> str:
        return api.object_key(namespace if rt.namespaced else None, name)

    def _not_found(self, rt: ResourceType, name: str) -> ApiError:
        return ApiError.make(
            404, f'{rt.qualified} "{name}" not found', details=details(name, rt.plural, rt.group)
        )

    def _conflict(self, rt: ResourceType, name: str, why: str) -> ApiError:
        return ApiError.make(
            409,
            f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}',
            details=details(name, rt.plural, rt.group),
        )

    def _get(self, rt: ResourceType, namespace: str | None, name: str) -> _Stored:
        stored = self._storage(rt).objects.get(self._key(rt, namespace, name))
        if stored is None:
            raise self._not_found(rt, name)
        return stored

    def _selectors(
        self, rt: ResourceType, label_selector: str | None, field_selector: str | None
    ) -> tuple[api.LabelSelector, api.FieldSelector]:
        try:
            return api.parse_label_selector(label_selector), api.parse_field_selector(field_selector, rt)
        except ValueError as exc:
            raise ApiError.make(400, str(exc)) from None

    def _list(
        self,
        rt: ResourceType,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        limit: int,
        continue_: str | None,
        resource_version: str | None,
        resource_version_match: str | None,
    ) -> tuple[builtins.list[_Stored], Obj]:
        st = self._storage(rt)
        lsel, fsel = self._selectors(rt, label_selector, field_selector)
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
                            _EXPIRED_CONTINUE,
                            continue_token=(api.encode_continue(-1, rel_start)),
                        ),
                    )
                at_rv = token_rv
        elif resource_version_match:
            if not resource_version:
                raise ApiError.make(
                    400, "resourceVersionMatch is forbidden unless resourceVersion is provided"
                )
            if resource_version_match not in ("Exact", "NotOlderThan"):
                raise ApiError.make(
                    400, f'resourceVersionMatch: Unsupported value: "{resource_version_match}"'
                )
            rv = _parse_int(resource_version, "resourceVersion")
            self._check_not_too_large(rv)
            if resource_version_match == "Exact":
                if rv < st.floor:
                    raise ApiError.make(410, "The resourceVersion for the provided list is too old.")
                at_rv = rv
        elif resource_version and resource_version != "0":
            self._check_not_too_large(_parse_int(resource_version, "resourceVersion"))
        list_rv = self._rv if at_rv is None else at_rv
        items, last_key, more, remaining = self._page(st, rt, at_rv, prefix, start, limit, lsel, fsel)
        meta: Obj = {"resourceVersion": str(list_rv)}
        if more and last_key is not None:
            meta["continue"] = api.encode_continue(list_rv, last_key[len(prefix) :] + "\x00")
            if lsel.empty and fsel.empty:
                meta["remainingItemCount"] = remaining
        return items, meta

    def _check_not_too_large(self, rv: int) -> None:
        if rv > self._rv:
            raise ApiError(
                504,
                status_body(
                    504,
                    "Timeout",
                    f"Too large resource version: {rv}, current: {self._rv}",
                    {
                        "causes": [
                            {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                        ],
                        "retryAfterSeconds": 1,
                    },
                ),
            )

    def _page(
        self,
        st: _Storage,
        rt: ResourceType,
        at_rv: int | None,
        prefix: str,
        start: str,
        limit: int,
        lsel: api.LabelSelector,
        fsel: api.FieldSelector,
    ) -> tuple[builtins.list[_Stored], str | None, bool, int]:
        """One page of the list as it was at `at_rv`: the current objects with the events after
        at_rv undone (the history window guarantees they are all there)."""
        end = _prefix_end(prefix)
        overrides: dict[str, _Stored | None] = {}
        if at_rv is not None and at_rv < self._rv:
            for ev in reversed(st.history):
                if ev.rv <= at_rv:
                    break
                overrides[ev.key] = ev.old  # the oldest event after at_rv wins: the state at at_rv
        keys = st.sorted_keys()
        lo, hi = bisect.bisect_left(keys, start), bisect.bisect_left(keys, end)
        ov_keys = sorted(k for k in overrides if start <= k < end)
        check = not (lsel.empty and fsel.empty)
        items: builtins.list[_Stored] = []
        last_key: str | None = None
        more = False
        i, j = lo, 0
        while i < hi or j < len(ov_keys):
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
            if check and not _matches(rt, stored.obj, lsel, fsel):
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

    def _create(self, rt: ResourceType, namespace: str | None, obj: Obj, *, seeding: bool = False) -> _Stored:
        st = self._storage(rt)
        obj.pop("kind", None)
        obj.pop("apiVersion", None)
        if rt is api.EVENTS_V1:
            obj = api.event_to_core(obj)
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = obj["metadata"] = {}
        api.check_meta_types(rt, meta)
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
                meta["name"] = meta["generateName"] + "".join(self._rng.choices(_NAME_CHARS, k=5))
                if self._key(rt, meta.get("namespace"), meta["name"]) not in st.objects:
                    break
        name = meta.get("name") or ""
        if not seeding or not meta.get("uid"):
            meta["uid"] = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        if not seeding or not meta.get("creationTimestamp"):
            meta["creationTimestamp"] = _now_rfc3339(self._clock())
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds") if not seeding else ():
            meta.pop(k, None)
        meta["resourceVersion"] = ""  # placeholder so the key lands in its Go position; set on commit
        if rt is api.PODS:
            api.default_pod(obj, seeding)
        if rt is api.EVENTS:
            obj = api.core_event_shape(obj)
        api.raise_invalid(rt, name, api.validate(rt, obj))
        key = self._key(rt, meta.get("namespace"), name)
        if key in st.objects:
            raise ApiError.make(
                409,
                f'{rt.qualified} "{name}" already exists',
                reason="AlreadyExists",
                details=details(name, rt.plural, rt.group),
            )
        return self._commit(rt, st, key, api.order_object(obj), "ADDED")

    def _update(
        self, rt: ResourceType, namespace: str | None, name: str, obj: Obj, sub: str | None
    ) -> _Stored:
        current = self._get(rt, namespace, name)
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
        rv = meta.get("resourceVersion")
        if rv and rv != current.obj["metadata"].get("resourceVersion"):
            raise self._conflict(rt, name, _MODIFIED)
        return self._write(rt, current, obj, sub)

    def _patch(
        self, rt: ResourceType, namespace: str | None, name: str, patch: Any, kind: str, sub: str | None
    ) -> _Stored:
        current = self._get(rt, namespace, name)
        base: Obj = _decode(self._single_bytes(rt, current))
        try:
            if kind == "merge":
                if not isinstance(patch, dict):
                    raise ApiError.make(400, "merge patch must be a JSON object")
                new = api.merge_patch(base, patch)
            elif kind == "json":
                new = api.json_patch(base, patch)
            else:
                raise ValueError(f"unknown patch type {kind!r}")
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
        if rv is not None and rv != current.obj["metadata"].get("resourceVersion"):
            raise self._conflict(rt, name, _MODIFIED)
        return self._write(rt, current, new, sub)

    def _write(self, rt: ResourceType, current: _Stored, new: Obj, sub: str | None) -> _Stored:
        """Replace `current` with `new` (already holding the caller's changes), keeping what the API
        server keeps: identity metadata, and status (main resource) or everything but status
        (status subresource)."""
        st = self._storage(rt)
        old = current.obj
        old_meta = old["metadata"]
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            meta = new["metadata"] = {}
        api.check_meta_types(rt, meta)
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
        if sub == "status":
            new = {**_copy(old), "status": new.get("status") or {}}
            new["metadata"] = _copy(old_meta)
        elif rt.has_status:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        if rt is api.EVENTS:
            new = api.core_event_shape(new)
        name = old_meta.get("name", "")
        if rt is api.PODS and sub is None:
            api.check_pod_spec_update(name, old.get("spec") or {}, new.get("spec") or {})
        api.raise_invalid(rt, name, api.validate(rt, new))
        if rt is api.PODS and new.get("spec") != old.get("spec") and isinstance(meta.get("generation"), int):
            meta["generation"] += 1
        meta["resourceVersion"] = old_meta.get("resourceVersion")
        new = api.order_object(new)
        if new == old:
            return current  # no-op writes do not bump the resourceVersion, like etcd guaranteed updates
        key = api.key_of(old)
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and old_meta.get("finalizers"):
            # The last finalizer is gone from an object being deleted: the delete completes.
            self._commit(rt, st, key, new, "MODIFIED")
            return self._commit(rt, st, key, None, "DELETED")
        return self._commit(rt, st, key, new, "MODIFIED")

    def _delete(
        self, rt: ResourceType, namespace: str | None, name: str, grace: Any, pre: Mapping[str, Any]
    ) -> _Stored:
        st = self._storage(rt)
        current = self._get(rt, namespace, name)
        meta = current.obj["metadata"]
        key = api.key_of(current.obj)
        for field_name, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            want = pre.get(field_name)
            if want and want != meta.get(field_name):
                raise self._conflict(
                    rt,
                    name,
                    _storage_error(
                        rt,
                        key,
                        f"Precondition failed: {label} in precondition: {want}, {label} in object meta: "
                        f"{meta.get(field_name)}",
                    ),
                )
        if grace is not None and (not isinstance(grace, int) or isinstance(grace, bool)):
            raise ApiError.make(400, "gracePeriodSeconds must be an integer")
        finalizers = bool(meta.get("finalizers"))
        if rt is not api.PODS:
            if not finalizers:
                return self._commit(rt, st, key, None, "DELETED")
            if meta.get("deletionTimestamp"):
                return current
            new = _copy(current.obj)
            new["metadata"]["deletionTimestamp"] = _now_rfc3339(self._clock())
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            return self._commit(rt, st, key, api.order_object(new), "MODIFIED")
        # Pods: graceful deletion (registry/generic BeforeDelete + pod CheckGracefulDelete).
        spec = current.obj.get("spec") or {}
        period = grace if grace is not None else spec.get("terminationGracePeriodSeconds", 30)
        if not spec.get("nodeName") or (current.obj.get("status") or {}).get("phase") in (
            "Succeeded",
            "Failed",
        ):
            period = 0
        period = max(int(period), 0)
        new = _copy(current.obj)
        nmeta = new["metadata"]
        if meta.get("deletionTimestamp"):
            old_period = meta.get("deletionGracePeriodSeconds")
            if not old_period:
                return self._commit(rt, st, key, None, "DELETED") if not finalizers else current
            if period > 0 and period >= old_period:
                return current  # only a shorter grace period may be asked for
        elif isinstance(nmeta.get("generation"), int):
            nmeta["generation"] += 1
        nmeta["deletionTimestamp"] = _now_rfc3339(self._clock() + timedelta(seconds=period))
        nmeta["deletionGracePeriodSeconds"] = period
        stored = self._commit(rt, st, key, api.order_object(new), "MODIFIED")
        if period == 0 and not finalizers:
            return self._commit(rt, st, key, None, "DELETED")
        return stored

    def _bind(self, namespace: str, name: str, binding: Obj) -> None:
        """pods/binding: sets spec.nodeName and the PodScheduled condition; errors as in the fixtures
        pods-binding.{pod-not-found,wrong-uid,already-bound}.response.json."""
        rt = api.PODS
        bmeta = binding.get("metadata") or {}
        if not isinstance(bmeta, dict):
            raise ApiError.make(400, "Binding metadata must be an object")
        if bmeta.get("name") and bmeta["name"] != name:
            raise ApiError.make(400, "name in URL does not match name in body")
        target = binding.get("target") or {}
        node = target.get("name") if isinstance(target, dict) else None
        if not isinstance(node, str) or not node:
            raise ApiError.make(
                422,
                f'Binding "{name}" is invalid: target.name: Required value',
                reason="Invalid",
                details={
                    "name": name,
                    "kind": "Binding",
                    "causes": [
                        {"reason": "FieldValueRequired", "message": "Required value", "field": "target.name"}
                    ],
                },
            )
        current = self._get(rt, namespace, name)
        meta = current.obj["metadata"]
        key = api.key_of(current.obj)
        want_uid = bmeta.get("uid")
        if want_uid and want_uid != meta.get("uid"):
            raise self._conflict(
                rt,
                name,
                _storage_error(
                    rt,
                    key,
                    f"Precondition failed: UID in precondition: {want_uid}, UID in object meta: "
                    f"{meta.get('uid')}",
                ),
            )
        spec = current.obj.get("spec") or {}
        bound_to = spec.get("nodeName")
        if meta.get("deletionTimestamp"):
            raise ApiError.make(
                409,
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is being '
                "deleted, cannot be assigned to a host",
                details=details(name, "pods/binding"),
            )
        if bound_to:
            raise ApiError.make(
                409,
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                f'already assigned to node "{bound_to}"',
                details=details(name, "pods/binding"),
            )
        new = _copy(current.obj)
        new.setdefault("spec", {})["nodeName"] = node
        if isinstance(bmeta.get("annotations"), dict) and bmeta["annotations"]:
            new["metadata"]["annotations"] = {
                **(new["metadata"].get("annotations") or {}),
                **bmeta["annotations"],
            }
        status = new.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": _now_rfc3339(self._clock()),
            }
        )
        status["conditions"] = conditions
        if "phase" in status and next(iter(status)) != "phase":
            new["status"] = {"phase": status.pop("phase"), **status}
        self._commit(rt, self._storage(rt), key, api.order_object(new), "MODIFIED")

    def _commit(self, rt: ResourceType, st: _Storage, key: str, obj: Obj | None, type_: str) -> _Stored:
        """Write (or delete, obj=None) under the next resourceVersion and tell the watchers."""
        self._rv += 1
        rv = self._rv
        old = st.objects.get(key)
        if obj is None:
            assert old is not None
            obj = _decode(old.raw)
            obj["metadata"]["resourceVersion"] = str(rv)
            stored = _Stored(obj, _encode(obj))
            del st.objects[key]
            st._sorted = None
        else:
            obj["metadata"]["resourceVersion"] = str(rv)
            stored = _Stored(obj, _encode(obj))
            if old is None:
                st._sorted = None
            st.objects[key] = stored
        ns = obj["metadata"].get("namespace") or ""
        ev = _Event(rv, type_, key, ns, stored, old)
        st.history.append(ev)
        if len(st.history) > self.history_size + self.history_size // 4:
            cut = len(st.history) - self.history_size  # amortised trimming
            st.floor = st.history[cut - 1].rv
            del st.history[:cut]
        for w in list(st.watchers):
            w.offer(ev)
        return stored

    def _forget(self, w: MemoryWatch) -> None:
        self._storage(w.rt).watchers.discard(w)


_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's generateName alphabet
_MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"
_EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list."
)


def _storage_error(rt: ResourceType, key: str, msg: str) -> str:
    return (
        f"StorageError: invalid object, Code: 4, Key: /registry/{rt.etcd_prefix}/{key}, ResourceVersion: 0, "
        f"AdditionalErrorMsg: {msg}"
    )


def _verb(method: str, info: api.PathInfo) -> str:
    if method == "GET":
        return "list" if info.name is None else "get"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true")


def _parse_int(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ApiError.make(400, f"invalid {what}: {value!r}") from None


def _parse_float(value: str, what: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ApiError.make(400, f"invalid {what}: {value!r}") from None


def _json_object(body: bytes | None, kind: str) -> Obj:
    try:
        obj = _decode(body or b"")
    except msgspec.DecodeError as exc:
        raise ApiError.make(400, f"couldn't get version/kind; json parse error: {exc}") from None
    if not isinstance(obj, dict):
        raise ApiError.make(400, f"the body of the request is not a {kind} object")
    return obj


def _copy(obj: Any) -> Any:
    return _decode(_encode(obj))


def _with_kind_raw(rt: ResourceType, raw: bytes) -> bytes:
    head = b'{"kind":"' + rt.kind.encode() + b'","apiVersion":"' + rt.api_version.encode() + b'"'
    return head + (b"," + raw[1:] if len(raw) > 2 else b"}")


def _event_line(rt: ResourceType, type_: str, stored: _Stored) -> bytes:
    obj = (
        _encode(api.event_to_events_v1(stored.obj)) if rt is api.EVENTS_V1 else _with_kind_raw(rt, stored.raw)
    )
    return b'{"type":"' + type_.encode() + b'","object":' + obj + b"}"


def _matches(rt: ResourceType, obj: Obj, lsel: api.LabelSelector, fsel: api.FieldSelector) -> bool:
    if not lsel.matches((obj.get("metadata") or {}).get("labels")):
        return False
    if fsel.empty:
        return True
    return fsel.matches(api.event_to_events_v1(obj) if rt is api.EVENTS_V1 else obj)


_DROP = object()
_END = object()


class MemoryWatch:
    """One watch stream: an async iterator of JSON lines (bytes, no newline). It ends after
    `timeout_seconds`; raises WatchDropped when cut by `drop_watches()`. Bookmarks come every
    `bookmark_interval`, 2 s before the timeout (as kube-apiserver does), and on `trigger_bookmarks()`."""

    def __init__(
        self,
        cluster: MemoryCluster,
        rt: ResourceType,
        storage: _Storage,
        namespace: str | None,
        lsel: api.LabelSelector,
        fsel: api.FieldSelector,
        allow_bookmarks: bool,
        timeout_seconds: float | None,
    ) -> None:
        self.cluster = cluster
        self.rt = rt
        self._storage = storage
        self.namespace = namespace if rt.namespaced else None
        self._lsel, self._fsel = lsel, fsel
        self._filtered = not (lsel.empty and fsel.empty)
        self.allow_bookmarks = allow_bookmarks
        self._queue: deque[Any] = deque()
        self._wakeup: asyncio.Event | None = None
        now = time.monotonic()
        self._deadline = now + timeout_seconds if timeout_seconds else None
        self._final_bookmark_at = (
            self._deadline - 2.0 if self._deadline and timeout_seconds and timeout_seconds > 4 else None
        )
        self._next_bookmark = now + cluster.bookmark_interval
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def matches(self, obj: Obj) -> bool:
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return not self._filtered or _matches(self.rt, obj, self._lsel, self._fsel)

    def offer(self, ev: _Event) -> None:
        """Queue an event if it concerns this watch. With selectors, an object that stops matching
        is reported DELETED and one that starts matching ADDED (like the watch cache)."""
        if self._closed:
            return
        if self.namespace is not None and ev.namespace != self.namespace:
            return
        type_ = ev.type
        if self._filtered:
            new_ok = _matches(self.rt, ev.new.obj, self._lsel, self._fsel)
            if type_ == "MODIFIED":
                old_ok = ev.old is not None and _matches(self.rt, ev.old.obj, self._lsel, self._fsel)
                if not (old_ok or new_ok):
                    return
                type_ = "MODIFIED" if old_ok and new_ok else ("ADDED" if new_ok else "DELETED")
            elif not new_ok:
                return
        cache_key = (type_, self.rt.group)
        line = ev.lines.get(cache_key)
        if line is None:
            line = ev.lines[cache_key] = _event_line(self.rt, type_, ev.new)
        self.push(line)

    def push(self, item: Any) -> None:
        if self._closed:
            return
        if len(self._queue) >= self.cluster.watch_queue_limit:
            # Like the apiserver with a consumer that cannot keep up: terminate the watch.
            log.warning(
                "memory cluster: watch on %s fell %d events behind; dropping it",
                self.rt.plural,
                len(self._queue),
            )
            self._queue.clear()
            self.drop()
            return
        self._queue.append(item)
        if self._wakeup is not None:
            self._wakeup.set()

    def push_bookmark(self, annotations: Mapping[str, str] | None = None) -> None:
        self.push(
            _encode(
                {
                    "type": "BOOKMARK",
                    "object": api.bookmark_object(self.rt, self.cluster.resource_version, annotations),
                }
            )
        )

    def drop(self) -> None:
        self.push(_DROP)
        self._detach()

    def finish(self) -> None:
        self.push(_END)
        self._detach()

    def _detach(self) -> None:
        self._closed = True
        self.cluster._forget(self)
        if self._wakeup is not None:
            self._wakeup.set()

    def close(self) -> None:
        """Stop the watch (the consumer went away)."""
        self._detach()
        self._queue.clear()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        while True:
            if self._queue:
                item = self._queue.popleft()
                if item is _DROP:
                    self._queue.clear()
                    raise WatchDropped("watch connection dropped")
                if item is _END:
                    raise StopAsyncIteration
                line: bytes = item
                return line
            if self._closed:
                raise StopAsyncIteration
            now = time.monotonic()
            if self._deadline is not None and now >= self._deadline:
                self.close()
                raise StopAsyncIteration
            if self.allow_bookmarks and (
                now >= self._next_bookmark
                or (self._final_bookmark_at is not None and now >= self._final_bookmark_at)
            ):
                if self._final_bookmark_at is not None and now >= self._final_bookmark_at:
                    self._final_bookmark_at = None
                self._next_bookmark = now + self.cluster.bookmark_interval
                self.push_bookmark()
                continue
            wake_at = [
                t
                for t in (
                    self._deadline,
                    self._next_bookmark if self.allow_bookmarks else None,
                    self._final_bookmark_at if self.allow_bookmarks else None,
                )
                if t is not None
            ]
            if self._wakeup is None:
                self._wakeup = asyncio.Event()
            self._wakeup.clear()
            # A timer sets the event rather than `asyncio.wait_for`: on Python 3.11 wait_for swallows
            # a cancellation that lands just as the wait completes (an event pushed in the same loop
            # iteration), and the consumer would then read on until the watch times out.
            timer = (
                asyncio.get_running_loop().call_later(max(min(wake_at) - now, 0), self._wakeup.set)
                if wake_at
                else None
            )
            try:
                await self._wakeup.wait()
            finally:
                if timer is not None:
                    timer.cancel()
