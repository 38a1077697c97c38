"""Label and field selectors as lists and watches of the in-memory cluster apply them.

Shared by both so that a list and a watch with the same selectors see the same objects (a
reflector relies on that to stay in sync).
"""

from __future__ import annotations

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.api import Obj, ResourceType
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.wire import objects


def parse(
    rt: ResourceType, label_selector: str | None, field_selector: str | None
) -> tuple[api.LabelSelector, api.FieldSelector]:
    """Both selectors of a request; 400 with the parser's message if either is malformed."""
    try:
        return api.parse_label_selector(label_selector), api.parse_field_selector(field_selector, rt)
    except ValueError as exc:
        raise ApiError.make(400, str(exc)) from None


def matches(rt: ResourceType, obj: Obj, lsel: api.LabelSelector, fsel: api.FieldSelector) -> bool:
    """Whether a stored object passes both selectors. Field selectors on events.k8s.io/v1 name
    that version's fields, so the object is converted before matching."""
    if not lsel.matches(objects.labels(obj)):
        return False
    if fsel.empty:
        return True
    return fsel.matches(api.event_to_events_v1(obj) if rt is api.EVENTS_V1 else obj)
