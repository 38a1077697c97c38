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
    """

    def __init__(self, mark: Callable[[Obj], bool] | None = None) -> None:
        self._items: dict[str, Obj] = {}
        self._mark = mark
        self.marked: set[str] = set()

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

    def upsert(self, obj: Obj) -> Obj | None:
        """Store `obj`; returns the version it replaced (None if new)."""
        key = key_of(obj)
        old = self._items.get(key)
        self._items[key] = obj
        if self._mark is not None:
            if self._mark(obj):
                self.marked.add(key)
            else:
                self.marked.discard(key)
        return old

    def remove(self, key: str) -> Obj | None:
        self.marked.discard(key)
        return self._items.pop(key, None)
