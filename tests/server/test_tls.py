import asyncio
import ssl
from pathlib import Path

import trustme
from aiohttp import web

from vgpu_scheduler.server.tls import ReloadingCertificate


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
