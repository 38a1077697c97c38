"""KubeClient: the verbs we use on the Kubernetes API, returning plain dicts.

It only builds paths and bodies and turns non-2xx answers into ApiError; the transport decides
whether that goes over HTTP or into the in-memory cluster.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.api import ResourceType
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.cluster.transport import Transport
from vgpu_scheduler.wire import objects

Obj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class KubeClient:
    """The write verbs take `answer=False` from a caller that reads nothing of what a success
    answers: {} comes back then, without decoding the object the server sent (a failure still
    raises ApiError with its Status)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    async def close(self) -> None:
        await self.transport.close()

    def with_own_rate_limit(self, qps: float | None = None, burst: int | None = None) -> KubeClient:
        """A client on the same connection whose calls do not share this one's rate limit (by
        default one of the same qps and burst)."""
        return KubeClient(self.transport.with_own_rate_limit(qps, burst))

    async def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
        answer: bool = True,
    ) -> Obj:
        status, data = await self.transport.request(
            method, path, params=params, json_body=body, content_type=content_type, answer=answer
        )
        if not 200 <= status < 300:
            raise ApiError(status, data)
        return data

    # ------------------------------------------------------------------ generic verbs

    async def get(self, resource: str | ResourceType, name: str, namespace: str | None = None) -> Obj:
        rt = api.resource_type(resource)
        return await self._call("GET", api.resource_path(rt, namespace, name))

    async def list(
        self,
        resource: str | ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
        continue_: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> Obj:
        """One page: the List object (`items`, `metadata.resourceVersion`, `metadata.continue`).
        limit=0 asks for everything in one answer."""
        rt = api.resource_type(resource)
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if limit:
            params["limit"] = str(limit)
        if continue_:
            params["continue"] = continue_
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if resource_version_match:
            params["resourceVersionMatch"] = resource_version_match
        return await self._call("GET", api.resource_path(rt, namespace), params=params)

    async def list_all(
        self,
        resource: str | ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        each: Callable[[Obj], Obj] | None = None,
    ) -> tuple[builtins.list[Obj], str]:
        """Every item over all pages, and the list's resourceVersion (watch from there).

        `each`, when given, maps every item as its page arrives: what it drops is freed before the
        next page is decoded, so the next page reuses that memory.

        An expired continue token (410 in the middle) falls back to one unpaginated list, as
        client-go's pager does: the pages already read belong to a snapshot that is gone."""
        items: builtins.list[Obj] = []
        token: str | None = None
        rv = ""
        while True:
            try:
                page = await self.list(resource, namespace, label_selector=label_selector,
                    field_selector=field_selector, limit=page_size, continue_=token)
            except ApiError as exc:
                if token is None or exc.status != 410:
                    raise
                page = await self.list(resource, namespace, label_selector=label_selector,
                    field_selector=field_selector, limit=0)
                items = []
                token = None
            page_items = page.get("items") or []
            items.extend(page_items if each is None else map(each, page_items))
            meta = page.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or rv)
            token = meta.get("continue") or None
            if not token:
                return items, rv

    async def watch(
        self,
        resource: str | ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: float | None = None,
        allow_bookmarks: bool = True,
        send_initial_events: bool = False,
    ) -> AsyncGenerator[tuple[str, Obj], None]:
        """Yields (type, object) for ADDED, MODIFIED, DELETED and BOOKMARK. An ERROR event is raised
        as ApiError (410 Expired for a too-old resourceVersion), so both shapes of 410 — HTTP 410 and
        an in-stream ERROR — reach the caller the same way."""
        rt = api.resource_type(resource)
        params: dict[str, str] = {"watch": "1"}
        if allow_bookmarks:
            params["allowWatchBookmarks"] = "true"
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if timeout_seconds is not None:
            t = timeout_seconds
            params["timeoutSeconds"] = str(int(t)) if float(t).is_integer() else str(t)
        if send_initial_events:
            params["sendInitialEvents"] = "true"
            params["resourceVersionMatch"] = "NotOlderThan"
        stream = self.transport.stream(api.resource_path(rt, namespace), params)
        try:
            async for event in stream:
                type_ = event.get("type")
                obj = event.get("object")
                if not isinstance(obj, dict) or not isinstance(type_, str):
                    continue
                if type_ == "ERROR":
                    raise ApiError(int(obj.get("code") or 500), obj)
                yield type_, obj
        finally:
            await stream.aclose()  # close the connection now, not when the generator is collected

    async def create(
        self,
        resource: str | ResourceType,
        obj: Mapping[str, Any],
        namespace: str | None = None,
        *,
        answer: bool = True,
    ) -> Obj:
        rt = api.resource_type(resource)
        ns = namespace or (objects.namespace(obj) if rt.namespaced else None)
        return await self._call("POST", api.resource_path(rt, ns), body=obj, answer=answer)

    async def replace(
        self, resource: str | ResourceType, name: str, obj: Mapping[str, Any], namespace: str | None = None
    ) -> Obj:
        """PUT; a metadata.resourceVersion in `obj` makes it conditional (409 when stale)."""
        rt = api.resource_type(resource)
        return await self._call("PUT", api.resource_path(rt, namespace, name), body=obj)

    async def patch(
        self,
        resource: str | ResourceType,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        content_type: str = MERGE_PATCH,
        answer: bool = True,
    ) -> Obj:
        """Merge patch by default (RFC 7386: null deletes a key). `metadata.resourceVersion` inside
        the patch is a precondition: the API answers 409 Conflict when the object changed since."""
        rt = api.resource_type(resource)
        return await self._call(
            "PATCH",
            api.resource_path(rt, namespace, name, subresource),
            body=patch,
            content_type=content_type,
            answer=answer,
        )

    async def delete(
        self,
        resource: str | ResourceType,
        name: str,
        namespace: str | None = None,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> Obj:
        """DELETE with optional DeleteOptions preconditions (409 Conflict when they do not hold)."""
        rt = api.resource_type(resource)
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        pre = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if pre:
            options["preconditions"] = pre
        return await self._call("DELETE", api.resource_path(rt, namespace, name), body=options)

    # ------------------------------------------------------------------ typed helpers

    async def get_pod(self, namespace: str, name: str) -> Obj:
        return await self.get(api.PODS, name, namespace)

    async def get_node(self, name: str) -> Obj:
        return await self.get(api.NODES, name)

    async def patch_pod(
        self, namespace: str, name: str, merge_patch: Mapping[str, Any], *, answer: bool = True
    ) -> Obj:
        return await self.patch(api.PODS, name, merge_patch, namespace, answer=answer)

    async def patch_pod_labels(
        self,
        namespace: str,
        name: str,
        labels: Mapping[str, str | None],
        resource_version: str | None = None,
    ) -> Obj:
        """Set labels (None removes one); with resource_version, only if the pod is unchanged."""
        meta: Obj = {"labels": dict(labels)}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return await self.patch_pod(namespace, name, {"metadata": meta})

    async def patch_node(
        self,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        answer: bool = True,
        content_type: str = MERGE_PATCH,
    ) -> Obj:
        """A merge patch by default; a JSON patch (a list of operations) with JSON_PATCH."""
        return await self.patch(api.NODES, name, patch, content_type=content_type, answer=answer)

    async def bind_pod(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        *,
        resource_version: str | None = None,
        answer: bool = True,
    ) -> Obj:
        """POST pods/binding with the body kube-scheduler's binder sends (fixtures
        extender/binding-api.request.json); answers the 201 Status. A stale uid gives 409.

        With `resource_version` the Binding is also a precondition on the pod's version (the API
        server checks it like the uid): it binds only the pod exactly as we last wrote it."""
        meta: Obj = {"name": name, "namespace": namespace, "uid": uid}
        if resource_version:
            meta["resourceVersion"] = resource_version
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        return await self._call(
            "POST", api.resource_path(api.PODS, namespace, name, "binding"), body=binding, answer=answer
        )

    async def create_event(self, namespace: str, event: Mapping[str, Any], *, answer: bool = True) -> Obj:
        """Create a core/v1 Event (use `create("events.events.k8s.io", ...)` for the new API);
        `answer=False`: {} instead of the created Event, its body not decoded."""
        body = {"apiVersion": "v1", "kind": "Event", **event}
        return await self.create(api.EVENTS, body, namespace, answer=answer)

    async def get_lease(self, namespace: str, name: str) -> Obj:
        return await self.get(api.LEASES, name, namespace)

    async def list_leases(
        self, namespace: str, label_selector: str | None = None, field_selector: str | None = None
    ) -> builtins.list[Obj]:
        items, _ = await self.list_all(api.LEASES, namespace, label_selector=label_selector,
            field_selector=field_selector)
        return items

    async def list_pods(
        self,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[Obj]:
        items, _ = await self.list_all(api.PODS, namespace, label_selector=label_selector,
            field_selector=field_selector)
        return items
