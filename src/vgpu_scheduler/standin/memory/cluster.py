"""An in-memory cluster that answers like kube-apiserver (+ etcd) for the resources we use.

Two entry points over the same core:
* `handle()` / `open_watch()` take REST requests (method, path, query, body) and answer bytes, used
  by `MemoryTransport` (in process) and by `fakeapi` (over HTTP);
* `create/get/list/patch/...` are a direct Python API with dicts for seeding and assertions (no
  fault injection on that path).
Error bodies are the ones kube-apiserver 1.36 sends (see fixtures/kube-1.36/api/).

`MemoryCluster` is a facade over parts composed by concern, each in its own module:
store (objects, resourceVersions, history, compaction), reads / writes / lifecycle (the REST
semantics of list, create/update/patch, delete/bind), fanout + watch (watch streams), faults,
rest (the request layer) and seeding (snapshots). The parts share one ObjectStore; composition
rather than mixins keeps each part's state and dependencies visible in its constructor.
"""

from __future__ import annotations

import builtins
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.api import Obj, ResourceType
from vgpu_scheduler.cluster.errors import success_status
from vgpu_scheduler.standin.memory import lifecycle, reads, seeding, writes
from vgpu_scheduler.standin.memory.codec import copy, decode, list_bytes, out
from vgpu_scheduler.standin.memory.fanout import INITIAL_EVENTS_END, WatchHub
from vgpu_scheduler.standin.memory.faults import Fault, FaultInjector
from vgpu_scheduler.standin.memory.rest import RestFrontend
from vgpu_scheduler.standin.memory.store import ObjectStore
from vgpu_scheduler.standin.memory.watch import MemoryWatch, WatchDropped
from vgpu_scheduler.wire import objects

__all__ = ["INITIAL_EVENTS_END", "MemoryCluster", "MemoryWatch", "WatchDropped"]


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
        self._store = ObjectStore(
            history_size=history_size, clock=clock or (lambda: datetime.now(UTC)), seed=seed
        )
        self._hub = WatchHub(
            self._store, bookmark_interval=bookmark_interval, watch_queue_limit=watch_queue_limit
        )
        self._faults = FaultInjector()
        self._rest = RestFrontend(self._store, self._hub, self._faults)

    # ------------------------------------------------------------------ settings (read live by the parts)

    @property
    def history_size(self) -> int:
        """Events kept per resource for watches from an old resourceVersion and consistent lists."""
        return self._store.history_size

    @history_size.setter
    def history_size(self, value: int) -> None:
        self._store.history_size = value

    @property
    def bookmark_interval(self) -> float:
        """Seconds between BOOKMARKs on watches that asked for them (new watches and the next one)."""
        return self._hub.bookmark_interval

    @bookmark_interval.setter
    def bookmark_interval(self, value: float) -> None:
        self._hub.bookmark_interval = value

    @property
    def watch_queue_limit(self) -> int:
        """Lines a watch may fall behind before it is cut."""
        return self._hub.watch_queue_limit

    @watch_queue_limit.setter
    def watch_queue_limit(self, value: int) -> None:
        self._hub.watch_queue_limit = value

    @property
    def latency(self) -> float:
        """Seconds added to every REST request (a slow API server)."""
        return self._faults.latency

    @latency.setter
    def latency(self, value: float) -> None:
        self._faults.latency = value

    @property
    def request_log(self) -> deque[tuple[str, str, str]]:
        """The last REST requests as (verb, method, path), for tests counting API calls."""
        return self._rest.request_log

    # ------------------------------------------------------------------ introspection

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion (etcd revision)."""
        return self._store.rv

    def last_write(self, resource: str | ResourceType) -> int:
        """The resourceVersion of the last write to a resource (0: none yet). A watcher of it that
        reached this version has seen every change of it, with or without bookmarks."""
        return self._store.storage(api.resource_type(resource)).last_write

    def count(self, resource: str | ResourceType) -> int:
        """How many objects of a resource exist."""
        return len(self._store.storage(api.resource_type(resource)).objects)

    def watch_count(self, resource: str | ResourceType | None = None) -> int:
        """How many watches are open on a resource (None: on all)."""
        return self._hub.count(None if resource is None else api.resource_type(resource))

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
        self._faults.arm(
            Fault(
                verb=verb, resource=resource, remaining=count, status=status, reason=reason, message=message
            )
        )

    def delay_next(
        self, verb: str, count: int = 1, seconds: float = 0.1, *, resource: str | None = None
    ) -> None:
        """Hold the next `count` REST requests of `verb` for `seconds` before serving them."""
        self._faults.arm(Fault(verb=verb, resource=resource, remaining=count, delay=seconds))

    def drop_watches(self, resource: str | ResourceType | None = None) -> int:
        """Cut every open watch (like a connection reset). Returns how many were cut."""
        return self._hub.drop_all(None if resource is None else api.resource_type(resource))

    def compact(self) -> None:
        """Forget all event history (etcd compaction): watches from any older resourceVersion get
        410 Expired, continue tokens expire."""
        self._store.compact()

    def trigger_bookmarks(self) -> int:
        """Send a BOOKMARK now on every watch that asked for bookmarks."""
        return self._hub.bookmark_all()

    # ------------------------------------------------------------------ REST entry points

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
        return await self._rest.handle(method, path, params=params, body=body, content_type=content_type)

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
        """`handle` for an in-process caller: an answer that is one object comes decoded (a private
        dict, as decoding the body would give), any other as the JSON body. `answer=False`: the
        caller ignores a success's body; {} comes instead (an error's body still comes)."""
        return await self._rest.handle_decoded(
            method, path, params=params, body=body, content_type=content_type, answer=answer
        )

    async def open_watch(
        self, path: str, params: Mapping[str, str] | None = None, *, decoded: bool = False
    ) -> MemoryWatch:
        """Start a REST watch (`?watch=1`); raises ApiError for what would be a non-200 answer.
        `decoded`: read it with `next_event()`, which may hand over committed objects undecoded."""
        return await self._rest.open_watch(path, params, decoded=decoded)

    # ------------------------------------------------------------------ direct Python API

    def create(
        self, resource: str | ResourceType, obj: Mapping[str, Any], namespace: str | None = None
    ) -> Obj:
        """Create an object as a client's POST would (uid, timestamps, defaults, validation)."""
        rt = api.resource_type(resource)
        return out(rt, writes.create(self._store, rt, namespace=namespace, obj=copy(obj)))

    def get(self, resource: str | ResourceType, name: str, namespace: str | None = None) -> Obj:
        """A copy of one object, with kind/apiVersion; ApiError 404 if absent."""
        rt = api.resource_type(resource)
        return out(rt, self._store.get(rt, namespace, name))

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
        items, meta = reads.list_objects(
            self._store,
            rt,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_=continue_,
            resource_version=resource_version,
            resource_version_match=resource_version_match,
        )
        result: Obj = decode(list_bytes(rt, items, meta))
        return result

    def objects(self, resource: str | ResourceType, namespace: str | None = None) -> builtins.list[Obj]:
        """All current objects (copies, with kind/apiVersion), in key order."""
        rt = api.resource_type(resource)
        st = self._store.storage(rt)
        return [
            out(rt, st.objects[k])
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
        """Replace an object as a PUT would (resourceVersion in the body is a precondition)."""
        rt = api.resource_type(resource)
        name = objects.name(obj)
        ns = namespace or objects.namespace(obj) or None
        stored = writes.update(
            self._store, rt, namespace=ns, name=name, obj=copy(obj), subresource=subresource
        )
        return out(rt, stored)

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
        stored = writes.patch(
            self._store,
            rt,
            namespace=namespace,
            name=name,
            patch=copy(patch),
            patch_type=patch_type,
            subresource=subresource,
        )
        return out(rt, stored)

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
        stored = lifecycle.delete(
            self._store,
            rt,
            namespace=namespace,
            name=name,
            grace=grace_period_seconds,
            preconditions=preconditions or {},
        )
        return out(rt, stored)

    def bind(self, namespace: str, name: str, node: str, uid: str | None = None) -> Obj:
        """Bind a pod to a node as the pods/binding subresource would; returns the success Status."""
        binding: Obj = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        if uid is not None:
            binding["metadata"]["uid"] = uid
        lifecycle.bind(self._store, namespace, name, binding)
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
        return self._hub.open(
            api.resource_type(resource),
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            resource_version=resource_version,
            allow_bookmarks=allow_bookmarks,
            send_initial_events=send_initial_events,
            timeout_seconds=timeout_seconds,
        )

    def seed_from_list(self, objs: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> int:
        """Load a kubectl `List` / `PodList` ... (or an iterable of objects) as they are: uid,
        creationTimestamp and status kept, a fresh resourceVersion given. Unknown kinds and broken
        items are skipped with a warning. Returns how many objects were loaded."""
        return seeding.seed_from_list(self._store, objs)

    def load_snapshot(self, path: str | Path) -> int:
        """seed_from_list from a JSON or YAML file (kubectl get -o json|yaml, multi-document YAML)."""
        return seeding.load_snapshot(self._store, path)
