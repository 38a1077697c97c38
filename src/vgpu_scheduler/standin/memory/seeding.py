"""Loading a cluster state into the in-memory cluster: kubectl output, lists or plain objects.

Snapshots come from real clusters (`kubectl get -o json|yaml`), so objects are kept as they are
(uid, creationTimestamp, status, deletionTimestamp) and only get a fresh resourceVersion. A
snapshot is taken as it comes: unknown kinds and broken items are skipped with a warning, so one
odd object does not stop a simulation of thousands.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.gctuning import gc_paused
from vgpu_scheduler.standin.memory import writes
from vgpu_scheduler.standin.memory.codec import copy
from vgpu_scheduler.standin.memory.store import ObjectStore

log = logging.getLogger(__name__)


def seed_from_list(store: ObjectStore, objs: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> int:
    """Load a `List` / `PodList` ... (or an iterable of objects); returns how many were loaded."""
    default_kind: tuple[str, str] | None = None
    if isinstance(objs, Mapping):
        kind = str(objs.get("kind", ""))
        if kind.endswith("List") and kind != "List":
            # Items of a typed list may omit their kind (the API server's own lists do).
            default_kind = (str(objs.get("apiVersion", "v1")), kind[:-4])
        items: Iterable[Any] = objs.get("items") or []
    else:
        items = objs
    loaded = 0
    with gc_paused():  # bulk load: see transport.gc_paused
        for item in items:
            loaded += _seed_one(store, item, default_kind)
    return loaded


def _seed_one(store: ObjectStore, item: Any, default_kind: tuple[str, str] | None) -> int:
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
        obj = copy(item)
        if av == "events.k8s.io/v1":
            obj = api.event_to_core(obj)
        writes.create(store, rt, namespace=None, obj=obj, seeding=True)
    except ApiError as exc:
        log.warning("snapshot: skipping %s: %s", kind, exc.message)
        return 0
    return 1


def load_snapshot(store: ObjectStore, path: str | Path) -> int:
    """seed_from_list from a JSON or YAML file (multi-document YAML too); returns how many loaded."""
    import yaml  # only needed here

    text = Path(path).read_text()
    try:
        docs: list[Any] = [json.loads(text)]
    except json.JSONDecodeError:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        docs = [d for d in yaml.load_all(text, Loader=loader) if d is not None]
    total = 0
    for doc in docs:
        if isinstance(doc, Mapping) and "items" in doc:
            total += seed_from_list(store, doc)
        elif isinstance(doc, Mapping):
            total += seed_from_list(store, [doc])
    return total
