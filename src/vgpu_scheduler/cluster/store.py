"""The informer cache: the latest version of every object a reflector has seen, keyed ns/name."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

from vgpu_scheduler.cluster.api import key_of, object_key
from vgpu_scheduler.wire import objects

Obj = dict[str, Any]


class Store:
    """Objects are shared with the reflector's handlers: treat them as read-only.

    `mark(obj)`, when given, keeps `marked`: the keys of the stored objects it is true for (an
    index kept on every write, so a reader asking "which objects have X" needs no scan).

    `writes` counts upserts and removes; once a reader has asked `changed_since`, a bounded journal
    of the keys written lets it catch up on what changed without scanning every object.
    """

    def __init__(self, mark: Callable[[Obj], bool] | None = None) -> None:
        self._items: dict[str, Obj] = {}
        self._mark = mark
        self.marked: set[str] = set()
        self.writes = 0
        self._journal: list[str] | None = None  # None until a reader asks for it
        self._journal_start = 0  # `writes` before the journal's first entry

    @staticmethod
    def key(obj: Obj) -> str:
        return key_of(obj)

    def get(self, namespace: str | None, name: str) -> Obj | None:
        """Namespaced objects by (namespace, name); cluster-scoped ones with namespace None or ""."""
        return self._items.get(object_key(namespace, name))

    def get_by_key(self, key: str) -> Obj | None:
        return self._items.get(key)

    def list(self, namespace: str | None = None) -> builtins.list[Obj]:
        if namespace is None:
            return builtins.list(self._items.values())
        return [o for o in self._items.values() if objects.namespace(o) == namespace]

    def all_keys(self) -> builtins.list[str]:
        """A snapshot of the keys (safe to modify the store while iterating it)."""
        return builtins.list(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def changed_since(self, writes: int) -> builtins.list[str] | None:
        """The keys upserted or removed after the store's `writes` was `writes`, oldest first (a key
        written twice appears twice); None when that is not known (a reader's first call, or one
        older than the journal reaches): then compare everything."""
        journal = self._journal
        if journal is None:
            self._journal, self._journal_start = [], self.writes
            return None
        if not self._journal_start <= writes <= self.writes:
            return None
        return journal[writes - self._journal_start :]

    def _note(self, key: str) -> None:
        journal = self._journal
        if journal is not None:
            if len(journal) >= 2 * len(self._items) + 1024:  # bounded: old readers rescan
                self._journal_start = self.writes
                journal.clear()
            journal.append(key)
        self.writes += 1

    def upsert(self, obj: Obj) -> Obj | None:
        """Store `obj`; returns the version it replaced (None if new)."""
        key = key_of(obj)
        old = self._items.get(key)
        self._items[key] = obj
        self._note(key)
        if self._mark is not None:
            if self._mark(obj):
                self.marked.add(key)
            else:
                self.marked.discard(key)
        return old

    def remove(self, key: str) -> Obj | None:
        self.marked.discard(key)
        old = self._items.pop(key, None)
        if old is not None:
            self._note(key)
        return old
