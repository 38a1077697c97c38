"""The REST face of the in-memory cluster: (method, path, query, body) in, (status, JSON bytes) out.

Used by `MemoryTransport` (in process) and by `fakeapi` (over HTTP), so both see the same answers,
error Statuses included. This layer maps a request to a verb, logs it, runs the fault injector, and
decodes/validates what the request carries (bodies, patch content types, query parameters) before
handing it to the operations; errors become the Status body kube-apiserver would send.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

import msgspec

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.api import Obj
from vgpu_scheduler.cluster.errors import ApiError, success_status
from vgpu_scheduler.standin.memory import lifecycle, reads, statuses, writes
from vgpu_scheduler.standin.memory.codec import Stored, decode, encode, list_bytes, out, single_bytes
from vgpu_scheduler.standin.memory.fanout import WatchHub
from vgpu_scheduler.standin.memory.faults import FaultInjector
from vgpu_scheduler.standin.memory.store import ObjectStore
from vgpu_scheduler.standin.memory.watch import MemoryWatch

_Answer = bytes | tuple[api.ResourceType, Stored]
"""What `_dispatch` answers: a body already encoded, or one stored object of a resource type."""

_PATCH_TYPES = {"application/merge-patch+json": "merge", "application/json-patch+json": "json"}


class RestFrontend:
    """Serves REST requests against the store, the watch hub and the fault injector it is given."""

    def __init__(self, store: ObjectStore, hub: WatchHub, faults: FaultInjector) -> None:
        self.store = store
        self.hub = hub
        self.faults = faults
        self.request_log: deque[tuple[str, str, str]] = deque(maxlen=2000)  # (verb, method, path)

    async def handle(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
    ) -> tuple[int, bytes]:
        """Serve one non-watch REST request; returns (HTTP status, JSON body)."""
        status, answer = await self._serve(method, path, params=params, body=body, content_type=content_type)
        if isinstance(answer, bytes):
            return status, answer
        rt, stored = answer
        return status, single_bytes(rt, stored)

    async def handle_decoded(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        answer: bool = True,
    ) -> tuple[int, bytes | Obj]:
        """`handle` for an in-process caller that decodes the answer anyway: an answer that is one
        stored object comes as the dict decoding its bytes would give (kind and apiVersion first),
        made without splicing those bytes first; any other answer comes as bytes. With
        `answer=False` a success comes as {}: the caller reads none of it (the request is served
        all the same; only decoding the object for nobody is left out)."""
        status, served = await self._serve(method, path, params=params, body=body, content_type=content_type)
        if not answer and 200 <= status < 300:
            return status, {}
        if isinstance(served, bytes):
            return status, served
        rt, stored = served
        if rt is api.EVENTS_V1:
            return status, out(rt, stored)
        obj: Obj = {"kind": rt.kind, "apiVersion": rt.api_version, **stored.decoded()}
        return status, obj

    async def _serve(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None,
        body: bytes | None,
        content_type: str | None,
    ) -> tuple[int, _Answer]:
        params = params or {}
        try:
            info = api.parse_path(path)
            if info is None:
                raise statuses.no_such_resource()
            verb = _verb(method, info)
            res = info.rt.plural + (f"/{info.subresource}" if info.subresource else "")
            self.request_log.append((verb, method, path))
            faults = self.faults
            if faults.faults or faults.latency:  # nothing armed (most requests): no coroutine to run
                await faults.before_request(verb, res)
            return self._dispatch(verb, info, params=params, body=body, ctype=content_type)
        except ApiError as exc:
            return exc.status, encode(exc.body)

    async def open_watch(
        self, path: str, params: Mapping[str, str] | None = None, *, decoded: bool = False
    ) -> MemoryWatch:
        """Start a REST watch (`?watch=1`); raises ApiError for what would be a non-200 answer.
        `decoded`: the reader takes `next_event()` dicts (see MemoryWatch)."""
        params = params or {}
        info = api.parse_path(path)
        if info is None or info.name is not None:
            raise statuses.no_such_resource()
        self.request_log.append(("watch", "GET", path))
        await self.faults.before_request("watch", info.rt.plural)
        timeout = params.get("timeoutSeconds")
        return self.hub.open(
            info.rt,
            namespace=info.namespace,
            label_selector=params.get("labelSelector"),
            field_selector=params.get("fieldSelector"),
            resource_version=params.get("resourceVersion"),
            allow_bookmarks=_flag(params.get("allowWatchBookmarks")),
            send_initial_events=_flag(params.get("sendInitialEvents")),
            # Fractions are accepted (the real API takes integers) so tests can use short timeouts.
            timeout_seconds=statuses.parse_float(timeout, "timeoutSeconds") if timeout else None,
            decoded=decoded,
        )

    def _dispatch(
        self,
        verb: str,
        info: api.PathInfo,
        *,
        params: Mapping[str, str],
        body: bytes | None,
        ctype: str | None,
    ) -> tuple[int, _Answer]:
        """(status, answer): the answer is one stored object (the caller encodes or decodes it)
        or a body already encoded."""
        store = self.store
        rt, ns, name, sub = info.rt, info.namespace, info.name, info.subresource
        if (
            sub is not None
            and not (sub == "status" and rt.has_status)
            and not (sub == "binding" and rt is api.PODS)
        ):
            raise statuses.no_such_resource()
        if verb == "get":
            assert name is not None
            return 200, (rt, store.get(rt, ns, name))
        if verb == "list":
            return 200, self._list(rt, ns, params)
        if verb == "create" and sub == "binding":
            assert name is not None and ns is not None
            lifecycle.bind(store, ns, name, _json_object(body, "Binding"))
            return 201, encode(success_status(201))
        if verb == "create":
            if rt.namespaced and ns is None:
                raise ApiError.make(405, "the server does not allow this method on the requested resource")
            obj = _json_object(body, rt.kind)
            return 201, (rt, writes.create(store, rt, namespace=ns, obj=obj))
        assert name is not None
        if verb == "update":
            obj = _json_object(body, rt.kind)
            stored = writes.update(store, rt, namespace=ns, name=name, obj=obj, subresource=sub)
            return 200, (rt, stored)
        if verb == "patch":
            patch_type, patch = _patch_of(body, ctype)
            stored = writes.patch(
                store, rt, namespace=ns, name=name, patch=patch, patch_type=patch_type, subresource=sub
            )
            return 200, (rt, stored)
        if verb == "delete":
            grace, pre = _delete_options(body, params)
            stored = lifecycle.delete(store, rt, namespace=ns, name=name, grace=grace, preconditions=pre)
            return 200, (rt, stored)
        raise ApiError.make(405, "the server does not allow this method on the requested resource")

    def _list(self, rt: api.ResourceType, ns: str | None, params: Mapping[str, str]) -> bytes:
        items, meta = reads.list_objects(
            self.store,
            rt,
            namespace=ns,
            label_selector=params.get("labelSelector"),
            field_selector=params.get("fieldSelector"),
            limit=statuses.parse_int(params.get("limit") or "0", "limit"),
            continue_=params.get("continue"),
            resource_version=params.get("resourceVersion"),
            resource_version_match=params.get("resourceVersionMatch"),
        )
        return list_bytes(rt, items, meta)


def _patch_of(body: bytes | None, ctype: str | None) -> tuple[str, Any]:
    """(patch type, decoded patch) of a PATCH request, or the apiserver's 415 / 400."""
    patch_type = _PATCH_TYPES.get((ctype or "").split(";")[0].strip())
    if patch_type is None:
        raise ApiError.make(
            415,
            "the body of the request was in an unknown format - accepted media "
            "types include: application/json-patch+json, application/merge-patch+json",
        )
    try:
        return patch_type, decode(body or b"null")
    except msgspec.DecodeError as exc:
        raise ApiError.make(400, f"error decoding patch: {exc}") from None


def _delete_options(body: bytes | None, params: Mapping[str, str]) -> tuple[Any, Any]:
    """(grace period, preconditions) of a DELETE: the body's DeleteOptions, the query's grace."""
    opts = _json_object(body, "DeleteOptions") if body else {}
    grace = opts.get("gracePeriodSeconds")
    if "gracePeriodSeconds" in params:
        grace = statuses.parse_int(params["gracePeriodSeconds"], "gracePeriodSeconds")
    return grace, opts.get("preconditions") or {}


def _verb(method: str, info: api.PathInfo) -> str:
    """The Kubernetes verb of a request (what fault injection and the request log match on)."""
    if method == "GET":
        return "list" if info.name is None else "get"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


def _flag(value: str | None) -> bool:
    """A boolean query parameter as the API server reads it."""
    return (value or "").lower() in ("1", "true")


def _json_object(body: bytes | None, kind: str) -> Obj:
    """A request body that must be one JSON object; 400 with the API server's messages otherwise."""
    try:
        obj = decode(body or b"")
    except msgspec.DecodeError as exc:
        raise ApiError.make(400, f"couldn't get version/kind; json parse error: {exc}") from None
    if not isinstance(obj, dict):
        raise ApiError.make(400, f"the body of the request is not a {kind} object")
    return obj
