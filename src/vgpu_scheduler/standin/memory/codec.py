"""Bytes in and out of the in-memory cluster: the JSON shapes kube-apiserver writes.

Objects are stored encoded next to their decoded form, so answers are spliced from stored bytes
(`kind`/`apiVersion` put in front, list items joined) instead of re-encoding a dict per request;
`decode(encode(x))` is also the cheapest private deep copy. events.k8s.io/v1 shares storage with
core v1 Events and is converted on the way out.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.api import Obj, ResourceType

encode = msgspec.json.Encoder().encode
decode = msgspec.json.Decoder().decode


def rfc3339(moment: datetime) -> str:
    """A timestamp as metav1.Time serialises it (UTC, whole seconds)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def copy(obj: Any) -> Any:
    """A deep copy that shares nothing with the caller (stored objects must never be mutated)."""
    return decode(encode(obj))


class Stored:
    """One version of an object. Shared by the store, the history and watch queues, so never mutated.

    `raw` is the encoded object (list item shape, no kind/apiVersion), and all that is kept: answers
    and watch lines are spliced from it, and a write decodes it once into the private copy it edits
    anyway. The decoded form is held only while `commit` tells the watchers (`forget_obj` after);
    keeping it for every current object doubled the memory of a large cluster (a decoded pod is
    five times its JSON) for reads that decode a copy regardless.
    """

    __slots__ = ("_obj", "raw")

    def __init__(self, obj: Obj, raw: bytes) -> None:
        self._obj: Obj | None = obj  # never mutated once stored, never handed out
        self.raw = raw

    @property
    def obj(self) -> Obj:
        """The object, to read only (it may be the one being committed)."""
        obj = self._obj
        if obj is None:
            decoded: Obj = decode(self.raw)
            return decoded
        return obj

    def decoded(self) -> Obj:
        """A private copy of the object, free to edit."""
        obj: Obj = decode(self.raw)
        return obj

    def forget_obj(self) -> None:
        """Keep the bytes only."""
        self._obj = None


def with_kind_raw(rt: ResourceType, raw: bytes) -> bytes:
    """Stored bytes (list item shape) with kind and apiVersion first, as single objects are sent."""
    head = b'{"kind":"' + rt.kind.encode() + b'","apiVersion":"' + rt.api_version.encode() + b'"'
    return head + (b"," + raw[1:] if len(raw) > 2 else b"}")


def single_bytes(rt: ResourceType, stored: Stored) -> bytes:
    """The body of a GET / write answer for one object."""
    if rt is api.EVENTS_V1:
        return encode(api.event_to_events_v1(stored.obj))
    return with_kind_raw(rt, stored.raw)


def out(rt: ResourceType, stored: Stored) -> Obj:
    """A caller's private dict copy of one object, with kind/apiVersion (the direct Python API)."""
    result: Obj = decode(single_bytes(rt, stored))
    return result


def list_bytes(rt: ResourceType, items: list[Stored], meta: Obj) -> bytes:
    """The List body (kind PodList ...); items carry no kind/apiVersion, like the real API."""
    if rt is api.EVENTS_V1:
        raws = [
            encode(
                {k: v for k, v in api.event_to_events_v1(s.obj).items() if k not in ("kind", "apiVersion")}
            )
            for s in items
        ]
    else:
        raws = [s.raw for s in items]
    head = encode({"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta})
    return head[:-1] + b',"items":[' + b",".join(raws) + b"]}"


def event_line(rt: ResourceType, type_: str, stored: Stored) -> bytes:
    """One watch stream line (without the newline)."""
    obj = encode(api.event_to_events_v1(stored.obj)) if rt is api.EVENTS_V1 else with_kind_raw(rt, stored.raw)
    return b'{"type":"' + type_.encode() + b'","object":' + obj + b"}"
