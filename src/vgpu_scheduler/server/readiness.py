"""GET /readyz: 200 once the informers have synced, else 503 naming what it still waits for.

HAMi answers 200 always (§8.1). The listeners start before the first LIST so the probes answer
during a long initial sync (as kube-scheduler's do); until then the caches are empty, and the
chart's readinessProbe on /readyz keeps the Service (the webhook's traffic) away from the pod. The
200 keeps HAMi's empty body; the leader is only logged, as HAMi does, so a follower is ready too.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from vgpu_scheduler.scheduler.process import SchedulerProcess

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def waiting_for(process: SchedulerProcess) -> list[str]:
    """What readiness still waits for, in the order an operator reads it (empty: ready)."""
    waits = [
        f"{reflector.rt.qualified} informer sync"
        for reflector in (process.nodes, process.pods, process.quotas)
        if not reflector.has_synced
    ]
    if not process.leader.has_synced:  # the Lease informer, only with --leader-elect
        waits.append("leases informer sync")
    return waits


def readyz_handler(process: SchedulerProcess) -> Handler:
    async def readyz(_request: web.Request) -> web.StreamResponse:
        waits = waiting_for(process)
        if waits:
            return web.Response(status=503, text=f"waiting for: {', '.join(waits)}\n")
        log.debug("readyz: leader=%s", process.leader.is_leader())
        return web.Response(status=200)

    return readyz
