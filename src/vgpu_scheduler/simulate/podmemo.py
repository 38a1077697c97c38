"""What the loop computes once per pod instead of on every retry: a pod is tried many times before
it binds, and thousands of pending pods of a few shapes get equal answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from vgpu_scheduler.simulate.predicates import extender_interested

Obj = dict[str, Any]

FAILED_POOL_SIZE = 256
"""Distinct FailedNodes answers `shared_failed` keeps for sharing (then it starts afresh)."""

_encode = msgspec.json.Encoder().encode


class PodMemo:
    __slots__ = ("_encoded", "_failed_pool", "_interest", "_managed")

    def __init__(self, managed: frozenset[str]) -> None:
        self._managed = managed
        self._encoded: dict[str, tuple[Obj, bytes]] = {}  # see pod_json
        self._interest: dict[str, tuple[Any, bool]] = {}  # see interested
        self._failed_pool: dict[bytes, msgspec.Raw] = {}  # see shared_failed

    def pod_json(self, key: str, pod: Obj) -> bytes:
        """The pod's JSON, encoded once while the informer hands out the same object (the informer
        replaces the objects it updates)."""
        known = self._encoded.get(key)
        if known is not None and known[0] is pod:
            return known[1]
        raw = _encode(pod)
        self._encoded[key] = (pod, raw)
        return raw

    def interested(self, key: str, pod: Obj) -> bool:
        """`extender_interested`, once per pod (uid): it reads the containers' resources, which a
        pod cannot change."""
        uid = (pod.get("metadata") or {}).get("uid")
        known = self._interest.get(key)
        if known is None or known[0] != uid:
            known = self._interest[key] = (uid, extender_interested(pod, self._managed))
        return known[1]

    def shared_failed(self, failed: Mapping[str, str] | msgspec.Raw) -> Mapping[str, str] | msgspec.Raw:
        """The extender's FailedNodes JSON, kept for the pod's report without the rest of the answer
        (a Raw holds its whole body) and shared with equal ones: a pending pod keeps its last answer,
        one entry per node (gigabytes at 5,000 nodes otherwise)."""
        if not isinstance(failed, msgspec.Raw):
            return failed
        data = bytes(failed)
        shared = self._failed_pool.get(data)
        if shared is None:
            if len(self._failed_pool) >= FAILED_POOL_SIZE:
                self._failed_pool.clear()
            shared = self._failed_pool[data] = msgspec.Raw(data)
        return shared

    def forget(self, key: str) -> None:
        """The pod is bound: it will not be tried again."""
        self._encoded.pop(key, None)
        self._interest.pop(key, None)
