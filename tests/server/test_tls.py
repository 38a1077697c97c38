import asyncio
import logging
import ssl
from datetime import UTC, datetime
from pathlib import Path

import pytest
import trustme
from aiohttp import web
from cryptography import x509
from prometheus_client import CollectorRegistry

from vgpu_scheduler.server.certmetrics import EXPIRY, FAILURES, RELOADS, CertCollector
from vgpu_scheduler.server.metrics import exposition
from vgpu_scheduler.server.tls import CertDetails, ReloadingCertificate


def _write_pair(ca: trustme.CA, tmp: Path, common_name: str) -> None:
    cert = ca.issue_cert("127.0.0.1", common_name=common_name)
    cert.private_key_pem.write_to_path(str(tmp / "tls.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp / "tls.crt"))


async def _peer_common_name(port: int, ca: trustme.CA) -> str:
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
    cert = writer.get_extra_info("peercert")
    writer.close()
    await writer.wait_closed()
    subject = dict(item[0] for item in cert["subject"])
    return str(subject["commonName"])


async def test_new_connections_get_the_rotated_certificate(tmp_path: Path) -> None:
    ca = trustme.CA()
    _write_pair(ca, tmp_path, "first")
    cert = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    app = web.Application()
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=cert.context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        assert await _peer_common_name(port, ca) == "first"
        assert not cert.reload_if_changed()
        _write_pair(ca, tmp_path, "second")
        assert cert.reload_if_changed()
        assert await _peer_common_name(port, ca) == "second"
    finally:
        await runner.cleanup()


def test_broken_rotation_keeps_the_old_pair(tmp_path: Path) -> None:
    ca = trustme.CA()
    _write_pair(ca, tmp_path, "first")
    cert = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    (tmp_path / "tls.key").write_text("not a key")
    assert not cert.reload_if_changed()
    assert cert.reloads == 1


def test_the_loaded_pair_is_described_by_serial_and_expiry(tmp_path: Path) -> None:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", not_after=datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC))
    leaf.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    expected = x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes()).serial_number
    assert cert.details == CertDetails(expected, datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC))
    assert cert.details.expiry_timestamp == datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC).timestamp()


def test_a_broken_state_is_logged_once_until_the_files_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca = trustme.CA()
    _write_pair(ca, tmp_path, "first")
    cert = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    serving = cert.details
    assert serving is not None
    with caplog.at_level(logging.WARNING, logger="vgpu_scheduler.server.tls"):
        # The key of another certificate, as when the key file is swapped before the certificate.
        (tmp_path / "tls.key").write_bytes(ca.issue_cert("127.0.0.1").private_key_pem.bytes())
        assert not cert.reload_if_changed()
        assert not caplog.records  # maybe a rotation halfway through: not logged at first sight
        for _ in range(3):
            assert not cert.reload_if_changed()
        assert len(caplog.records) == 1
        line = caplog.records[0].getMessage()
        assert "TLS certificate reload from" in line and "still serving the loaded one" in line
        assert f"serial {serving.serial:x}" in line
        (tmp_path / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\nhalf writ")  # another broken state
        assert not cert.reload_if_changed()
        assert not cert.reload_if_changed()
        assert len(caplog.records) == 2
        (tmp_path / "tls.crt").unlink()
        for _ in range(3):
            assert not cert.reload_if_changed()
        assert len(caplog.records) == 3 and "unreadable" in caplog.records[2].getMessage()
    assert cert.details == serving and cert.failures == 3 and cert.reloads == 1
    _write_pair(ca, tmp_path, "second")
    assert cert.reload_if_changed()
    assert cert.details != serving and cert.reloads == 2


def test_the_collector_reports_expiry_reloads_and_failures(tmp_path: Path) -> None:
    ca = trustme.CA()
    _write_pair(ca, tmp_path, "first")
    cert = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CertCollector(cert))
    assert cert.details is not None
    assert registry.get_sample_value(EXPIRY) == cert.details.expiry_timestamp
    assert registry.get_sample_value(RELOADS + "_total") == 1
    assert registry.get_sample_value(FAILURES + "_total") == 0
    text = exposition(registry).decode()
    assert f"# TYPE {EXPIRY} gauge" in text and f"# TYPE {RELOADS}_total counter" in text


def test_a_pair_replaced_one_file_at_a_time_is_not_worth_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca = trustme.CA()
    _write_pair(ca, tmp_path, "first")
    cert = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    new = ca.issue_cert("127.0.0.1", common_name="second")
    with caplog.at_level(logging.WARNING, logger="vgpu_scheduler.server.tls"):
        new.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))  # the certificate first
        assert not cert.reload_if_changed()  # a poll in between: new certificate, old key
        new.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
        assert cert.reload_if_changed()
    assert not caplog.records and cert.failures == 0 and cert.reloads == 2


async def test_a_certificate_without_its_key_never_reaches_a_handshake(tmp_path: Path) -> None:
    """Loaded in place, the new certificate would replace the old one before its key is checked,
    and every handshake would then fail until the key arrives."""
    ca = trustme.CA()
    _write_pair(ca, tmp_path, "first")
    cert = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    runner = web.AppRunner(web.Application())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=cert.context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        new = ca.issue_cert("127.0.0.1", common_name="second")
        new.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))  # the certificate first
        assert not cert.reload_if_changed()
        assert await _peer_common_name(port, ca) == "first"
        new.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
        assert cert.reload_if_changed()
        assert await _peer_common_name(port, ca) == "second"
    finally:
        await runner.cleanup()
