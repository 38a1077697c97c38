"""The informer Store's journal: what changed since a reader last looked."""

from __future__ import annotations

from typing import Any

from vgpu_scheduler.cluster.store import Store


def obj(name: str, rv: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}}


def test_the_journal_starts_when_a_reader_first_asks() -> None:
    store = Store()
    store.upsert(obj("a"))
    assert store.changed_since(0) is None  # nothing was journaled yet: compare everything
    seen = store.writes
    assert store.changed_since(seen) == []
    store.upsert(obj("b"))
    store.upsert(obj("a", 2))
    store.remove("b")
    store.remove("missing")  # not a write
    assert store.changed_since(seen) == ["b", "a", "b"]
    assert store.changed_since(seen + 2) == ["b"]
    assert store.changed_since(store.writes) == []
    assert store.changed_since(seen - 1) is None  # older than the journal
    assert store.changed_since(store.writes + 1) is None


def test_a_full_journal_starts_afresh_and_older_readers_get_none() -> None:
    store = Store()
    store.changed_since(0)
    for i in range(1030):
        store.upsert(obj("a", i))
    assert store.changed_since(0) is None  # the journal was cut (2 per object + 1024 entries)
    recent = store.writes - 3
    assert store.changed_since(recent) == ["a", "a", "a"]
