"""A transport into the in-memory API server: the client stack (reflectors, lockers, the
extender) runs unchanged against the embedded cluster, with bodies encoded and decoded as on
the wire but no sockets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from vgpu_scheduler.cluster.apistats import WATCH, ApiStats
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.cluster.transport import decode_body, decode_watch_line, encode_body
from vgpu_scheduler.cluster.writeguard import check_write
from vgpu_scheduler.standin.memory import MemoryCluster


class MemoryTransport:
    """Calls a MemoryCluster directly (no sockets), through the same REST entry points the fake API
    server uses, with bodies encoded and decoded like on the wire."""

    def __init__(self, cluster: MemoryCluster) -> None:
        self.cluster = cluster
        self.stats = ApiStats()  # the same metrics as over HTTP (--cluster-snapshot mode)

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Any = None,
        content_type: str | None = None,
        answer: bool = True,
    ) -> tuple[int, dict[str, Any]]:
        await asyncio.sleep(0)  # a network call would yield to the loop; keep that interleaving
        check_write(method)
        body = None if json_body is None else encode_body(json_body)
        started = time.perf_counter()
        # One object's answer comes decoded from its stored bytes: the same dict, without first
        # splicing kind and apiVersion into a copy of those bytes.
        status, got = await self.cluster.handle_decoded(
            method,
            path,
            params=params,
            body=body,
            content_type=content_type or "application/json",
            answer=answer,
        )
        self.stats.record(method, status, time.perf_counter() - started)
        return status, got if isinstance(got, dict) else decode_body(got)

    async def stream(
        self, path: str, params: Mapping[str, str] | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        await asyncio.sleep(0)
        try:
            # Decoded events: the cluster may hand over the object it committed (nothing else holds
            # it) instead of a line this would decode into an equal private copy.
            watch = await self.cluster.open_watch(path, params, decoded=True)
        except ApiError as exc:
            self.stats.record(WATCH, exc.status, None)
            raise
        self.stats.record(WATCH, 200, None)
        try:
            while True:
                try:
                    item = await watch.next_event()
                except StopAsyncIteration:
                    return
                yield item if isinstance(item, dict) else decode_watch_line(item)
        finally:
            watch.close()

    async def close(self) -> None:
        return None

    def with_own_rate_limit(self, qps: float | None = None, burst: int | None = None) -> MemoryTransport:
        return self  # no client-side rate limit in memory
