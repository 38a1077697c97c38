"""The object store under the in-memory cluster: what etcd is to kube-apiserver.

One global resourceVersion counter (like etcd's revision) shared by every resource, objects kept
per resource under "namespace/name" keys, and a bounded per-resource event history. The history is
what lets watches start from an old resourceVersion and paginated lists stay consistent at their
first page's resourceVersion; `floor` says how far back it still reaches (compaction moves it on).
Every write goes through `commit`, the one place that bumps the revision and tells the watchers.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.api import Obj, ResourceType
from vgpu_scheduler.standin.memory import statuses
from vgpu_scheduler.standin.memory.codec import Stored, decode, encode


@dataclass(slots=True)
class Event:
    """One committed change, kept in the history for watches and consistent lists."""

    rv: int
    type: str  # ADDED / MODIFIED / DELETED
    key: str
    namespace: str
    new: Stored  # for DELETED: the final state, carrying the deletion resourceVersion
    old: Stored | None
    # Encoded watch lines by (type, API group): many watches of one resource share one encoding.
    lines: dict[tuple[str, str], bytes] = field(default_factory=dict)
    # While commit tells the watchers: the committed dict, which nothing else holds, handed to the
    # first in-process watcher that takes decoded events instead of decoding a copy of its line.
    owned: Obj | None = None


class Watcher(Protocol):
    """An open watch (watch.MemoryWatch) as the store and the hub see it: `commit` offers it each
    change; the hub cuts it or sends it a bookmark."""

    allow_bookmarks: bool

    def offer(self, ev: Event) -> None: ...

    def push_bookmark(self, annotations: Mapping[str, str] | None = None) -> None: ...

    def drop(self) -> None: ...


@dataclass(slots=True)
class ResourceStorage:
    """The objects, history and open watches of one storage resource (events and events.k8s.io
    share one, as in kube-apiserver)."""

    objects: dict[str, Stored] = field(default_factory=dict)
    history: list[Event] = field(default_factory=list)
    floor: int = 0  # every event with rv > floor is still in `history`
    last_write: int = 0  # the resourceVersion of the last commit here
    watchers: set[Watcher] = field(default_factory=set)
    _sorted: list[str] | None = None

    def sorted_keys(self) -> list[str]:
        """The keys in order (lists and initial watch events walk them); cached until a key comes
        or goes, since most writes modify an existing object."""
        if self._sorted is None:
            self._sorted = sorted(self.objects)
        return self._sorted

    def keys_changed(self) -> None:
        """Drop the key order cache (an object was added or deleted)."""
        self._sorted = None


class ObjectStore:
    """The state every operation of the cluster shares: storages, the revision, and the clock and
    random source that writes draw timestamps, uids and generated names from (seeded, so a
    simulation replays identically)."""

    def __init__(self, *, history_size: int, clock: Callable[[], datetime], seed: int | None) -> None:
        self.history_size = history_size
        self.clock = clock
        self.rng = random.Random(seed)
        self.rv = 1
        self.storages: dict[str, ResourceStorage] = {
            rt.storage: ResourceStorage() for rt in api.ALL_RESOURCES
        }

    def storage(self, rt: ResourceType) -> ResourceStorage:
        """The storage that holds `rt` (events.k8s.io/v1 maps to the core Events one)."""
        return self.storages[rt.storage]

    @staticmethod
    def key(rt: ResourceType, namespace: str | None, name: str) -> str:
        """The storage key; the namespace is ignored for cluster-scoped resources."""
        return api.object_key(namespace if rt.namespaced else None, name)

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Stored:
        """The current object, or 404."""
        stored = self.storage(rt).objects.get(self.key(rt, namespace, name))
        if stored is None:
            raise statuses.not_found(rt, name)
        return stored

    def commit(self, st: ResourceStorage, key: str, obj: Obj | None, type_: str) -> Stored:
        """Write (or delete, obj=None) under the next resourceVersion and tell the watchers."""
        self.rv += 1
        rv = st.last_write = self.rv
        old = st.objects.get(key)
        if obj is None:
            assert old is not None
            obj = decode(old.raw)
            obj["metadata"]["resourceVersion"] = str(rv)
            stored = Stored(obj, encode(obj))
            del st.objects[key]
            st.keys_changed()
        else:
            obj["metadata"]["resourceVersion"] = str(rv)
            stored = Stored(obj, encode(obj))
            if old is None:
                st.keys_changed()
            st.objects[key] = stored
        ns = obj["metadata"].get("namespace") or ""
        ev = Event(rv, type_, key, ns, stored, old, owned=obj)
        st.history.append(ev)
        if len(st.history) > self.history_size + self.history_size // 4:
            cut = len(st.history) - self.history_size  # amortised trimming
            st.floor = st.history[cut - 1].rv
            del st.history[:cut]
        for w in list(st.watchers):
            w.offer(ev)
        ev.owned = None  # the history keeps the bytes only
        stored.forget_obj()  # see Stored: the bytes are what is kept
        if old is not None:
            old.forget_obj()
        # The watchers queued their lines; the history keeps no copy (a watch replaying from an
        # older resourceVersion encodes again): 10,000 events of pod-sized lines otherwise.
        ev.lines.clear()
        return stored

    def compact(self) -> None:
        """Forget all event history (etcd compaction)."""
        # Move the revision on (a live cluster always has writes, e.g. lease renewals) so that every
        # resourceVersion handed out so far is older than the compaction point.
        self.rv += 1
        for st in self.storages.values():
            st.history.clear()
            st.floor = self.rv
