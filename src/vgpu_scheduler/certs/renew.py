"""`vgpu-scheduler certs --every DURATION`: the same sync, again and again, in a container beside
the extender, so the certificate is renewed (within `--rotate-before` of its expiry) without a pod
restart. The files are rewritten in place; the extender reloads them (server/tls.py).

A failed round (API down, a lost race beyond the retries) is logged and retried at the next round:
the certificate in use stays valid for `--rotate-before` more, far longer than a round."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from vgpu_scheduler.certs.sync import CertsConfig, CertsError, Outcome, sync
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError

log = logging.getLogger(__name__)


def changed(outcome: Outcome) -> bool:
    """Whether a round did anything worth a log line (a quiet round is the usual one)."""
    return outcome.secret != "kept" or outcome.ca_bundle == "patched" or bool(outcome.files)


async def renew_forever(
    client: KubeClient,
    cfg: CertsConfig,
    every: timedelta,
    write_dir: Path | None,
    *,
    report: Callable[[Outcome], None],
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Sync every `every` until cancelled; `report` gets each round that changed something."""
    while True:
        try:
            outcome = await sync(client, cfg, now(), write_dir)
        except (ApiError, ApiConnectionError, CertsError, OSError) as exc:
            log.warning("certificate renewal round failed, retrying in %s: %s", every, exc)
        else:
            if changed(outcome):
                report(outcome)
        await sleep(every.total_seconds())
