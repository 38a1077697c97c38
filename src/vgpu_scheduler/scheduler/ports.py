"""What the extender verbs talk to: the event sink and the API calls a bind makes.

One concern: the two Protocols (and the event types) the filter and bind rooms are written against,
so each can be read, and faked in a test, without the cluster client behind it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

NORMAL = "Normal"
WARNING = "Warning"


class EventSink(Protocol):
    def record(self, pod: Mapping[str, Any], type_: str, reason: str, message: str) -> None: ...


class BindApi(Protocol):
    async def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    async def patch_pod(
        self, namespace: str, name: str, merge_patch: Mapping[str, Any]
    ) -> dict[str, Any]: ...

    async def bind_pod(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        *,
        resource_version: str | None = None,
        answer: bool = True,
    ) -> dict[str, Any]: ...
