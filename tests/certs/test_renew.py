"""`certs --every`: rounds that renew the certificate near its expiry and rewrite the files (which the
extender reloads), quiet rounds that report nothing, a failed round that does not end the loop."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from vgpu_scheduler.certs import pki
from vgpu_scheduler.certs.cli import main as certs_main
from vgpu_scheduler.certs.renew import renew_forever
from vgpu_scheduler.certs.sync import CertsConfig, Outcome
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiConnectionError
from vgpu_scheduler.server.tls import ReloadingCertificate
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport

START = datetime(2026, 3, 1, tzinfo=UTC)
CFG = CertsConfig(namespace="ns", secret_name="tls", service_name="svc", webhook_name=None,
                  validity=timedelta(days=10), rotate_before=timedelta(days=3))


class _Stop(Exception):
    pass


async def test_rounds_renew_near_expiry_and_the_server_reloads(tmp_path: Path) -> None:
    client = KubeClient(MemoryTransport(MemoryCluster(seed=1)))
    clock = [START]
    reports: list[Outcome] = []
    rounds = 0

    async def sleep(_seconds: float) -> None:
        nonlocal rounds
        rounds += 1
        if rounds == 1:  # the files exist after the first round: the server starts on them
            server.append(ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")))
        clock[0] += timedelta(days=4)
        if rounds == 3:
            raise _Stop

    server: list[ReloadingCertificate] = []
    with pytest.raises(_Stop):
        await renew_forever(client, CFG, timedelta(days=4), tmp_path, report=reports.append,
                            now=lambda: clock[0], sleep=sleep)
    await client.close()
    # Round 1 created the Secret and the files; round 2 (4 days in, 6 left) kept it quietly;
    # round 3 (8 days in, 2 left, within rotate_before) renewed it and rewrote the files.
    assert [r.secret for r in reports] == ["created", "rotated"]
    assert reports[1].files == ["ca.crt", "tls.crt", "tls.key"]
    cert = server[0]
    first = cert.details
    assert cert.reload_if_changed()
    assert cert.details is not None and first is not None and cert.details.serial != first.serial
    renewed = pki.cert_info((tmp_path / "tls.crt").read_bytes()).not_after
    assert cert.details.not_after == renewed == START + timedelta(days=8) + CFG.validity


async def test_a_failed_round_is_logged_and_the_loop_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    client = KubeClient(MemoryTransport(MemoryCluster(seed=1)))
    calls = 0

    async def flaky_sync(*args: Any) -> Outcome:
        nonlocal calls
        calls += 1
        raise ApiConnectionError("connection refused")

    monkeypatch.setattr("vgpu_scheduler.certs.renew.sync", flaky_sync)

    async def sleep(_seconds: float) -> None:
        if calls == 2:
            raise _Stop

    with pytest.raises(_Stop):
        await renew_forever(client, CFG, timedelta(hours=1), None, report=lambda o: None, sleep=sleep)
    await client.close()
    assert calls == 2
    assert sum("renewal round failed" in r.getMessage() for r in caplog.records) == 2


def test_every_must_be_shorter_than_rotate_before(capsys: pytest.CaptureFixture[str]) -> None:
    assert certs_main(["--namespace=x", "--every=800h"]) == 2
    assert "--every must be shorter than --rotate-before" in capsys.readouterr().err


def test_every_is_cancelled_cleanly() -> None:
    async def run() -> None:
        client = KubeClient(MemoryTransport(MemoryCluster(seed=1)))
        task = asyncio.create_task(renew_forever(client, CFG, timedelta(hours=1), None, report=print))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await client.close()

    asyncio.run(run())
