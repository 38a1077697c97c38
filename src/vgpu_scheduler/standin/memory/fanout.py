"""Watch fan-out: starting watches the way kube-apiserver does, and acting on all open ones.

A watch starts either from "now" (synthetic ADDED events for what exists, optionally closed by the
initial-events-end bookmark) or from a resourceVersion, replayed from the store's history, or is
answered with 410 Expired when the history no longer reaches back that far. After that the store's
`commit` feeds it. The hub also owns the knobs watches read live (tests change them on a running
cluster) and the operations over every open watch (drop, bookmark, count).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from vgpu_scheduler.cluster.api import ResourceType
from vgpu_scheduler.cluster.errors import status_body
from vgpu_scheduler.standin.memory import selectors, statuses
from vgpu_scheduler.standin.memory.codec import encode, event_line
from vgpu_scheduler.standin.memory.store import ObjectStore, ResourceStorage
from vgpu_scheduler.standin.memory.watch import MemoryWatch

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


class WatchHub:
    """Opens watches on an ObjectStore and holds the watch settings; see module docstring."""

    def __init__(self, store: ObjectStore, *, bookmark_interval: float, watch_queue_limit: int) -> None:
        self.store = store
        self.bookmark_interval = bookmark_interval
        self.watch_queue_limit = watch_queue_limit

    def open(
        self,
        rt: ResourceType,
        *,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        resource_version: str | None,
        allow_bookmarks: bool,
        send_initial_events: bool,
        timeout_seconds: float | None,
        decoded: bool = False,
    ) -> MemoryWatch:
        """A registered watch with its first events already queued (`decoded`: see MemoryWatch)."""
        st = self.store.storage(rt)
        lsel, fsel = selectors.parse(rt, label_selector, field_selector)
        w = MemoryWatch(
            self,
            rt,
            namespace=namespace,
            lsel=lsel,
            fsel=fsel,
            allow_bookmarks=allow_bookmarks,
            timeout_seconds=timeout_seconds,
            decoded=decoded,
        )
        rv_text = resource_version or ""
        if rv_text in ("", "0") or send_initial_events:
            # "Get state and start at most recent": synthetic ADDED for what exists now.
            prefix = f"{namespace}/" if namespace and rt.namespaced else ""
            for key in st.sorted_keys():
                if prefix and not key.startswith(prefix):
                    continue
                s = st.objects[key]
                if w.matches_stored(s):
                    w.push(event_line(rt, "ADDED", s))
            if send_initial_events and allow_bookmarks:
                w.push_bookmark({INITIAL_EVENTS_END: "true"})
        else:
            rv = statuses.parse_int(rv_text, "resourceVersion")
            if rv < st.floor:
                oldest = st.history[0].rv if st.history else self.store.rv
                w.push(
                    encode(
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

    def _storages(self, rt: ResourceType | None) -> Iterable[ResourceStorage]:
        return self.store.storages.values() if rt is None else [self.store.storage(rt)]

    def count(self, rt: ResourceType | None) -> int:
        """Open watches on `rt`, or on everything for None."""
        return sum(len(s.watchers) for s in self._storages(rt))

    def drop_all(self, rt: ResourceType | None) -> int:
        """Cut every open watch on `rt` (None: all), like a connection reset; returns how many."""
        n = 0
        for st in self._storages(rt):
            for w in list(st.watchers):
                w.drop()
                n += 1
        return n

    def bookmark_all(self) -> int:
        """Send a BOOKMARK now on every watch that asked for bookmarks; returns how many."""
        n = 0
        for st in self.store.storages.values():
            for w in st.watchers:
                if w.allow_bookmarks:
                    w.push_bookmark()
                    n += 1
        return n
