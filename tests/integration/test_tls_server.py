"""The real server with --cert_file/--key_file: HTTPS filter works, and after the files are
replaced (as kubelet swaps a mounted Secret) new connections get the new certificate."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from cryptography import x509

from tests.builders import gpu_node, gpu_pod
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.server.certmetrics import EXPIRY, FAILURES
from vgpu_scheduler.server.main import start, stop
from vgpu_scheduler.standin.fakeapi import serve
from vgpu_scheduler.standin.memory import MemoryCluster


def _write_pair(
    ca: trustme.CA, directory: Path, common_name: str | None = None, *, not_after: datetime | None = None
) -> tuple[Path, Path]:
    """Write a pair for 127.0.0.1 atomically (new files renamed over the old ones)."""
    cert = ca.issue_cert("127.0.0.1", common_name=common_name, not_after=not_after)
    crt, key = directory / "tls.crt", directory / "tls.key"
    cert.private_key_pem.write_to_path(str(directory / "tls.key.new"))
    cert.cert_chain_pems[0].write_to_path(str(directory / "tls.crt.new"))
    os.replace(directory / "tls.key.new", key)
    os.replace(directory / "tls.crt.new", crt)
    return crt, key


async def _served_common_name(port: int, ctx: ssl.SSLContext) -> str:
    """The subject CN of the certificate a brand-new connection is given."""
    _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    try:
        cert = writer.get_extra_info("peercert")
    finally:
        writer.close()
        await writer.wait_closed()
    subject = dict(item[0] for item in cert["subject"])
    return str(subject["commonName"])


async def test_https_filter_and_certificate_rotation(
    it: Any, cluster: MemoryCluster, launch: Any, tmp_path: Path
) -> None:
    ca = trustme.CA()
    crt, key = _write_pair(ca, tmp_path, "first")
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    cluster.create("nodes", gpu_node("gpu-a"))
    stack = await launch(cert_file=str(crt), key_file=str(key), scheme="https", ssl=client_ctx)
    assert stack.url.startswith("https://")
    port = int(stack.url.rsplit(":", 1)[1])

    pod = cluster.create("pods", gpu_pod("p", mem=1000), namespace="default")
    assert (await stack.filter(pod, ["gpu-a"]))["NodeNames"] == ["gpu-a"]
    assert await stack.healthz() == 200
    assert await _served_common_name(port, client_ctx) == "first"

    _write_pair(ca, tmp_path, "second")

    async def rotated() -> bool:
        return await _served_common_name(port, client_ctx) == "second"

    await it.eventually(rotated, "the new certificate on new connections", timeout=4.0)
    # The server keeps working over HTTPS after the reload (a fresh connection, new certificate).
    await stack.session.close()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ctx)) as session:
        stack.session = session
        assert await stack.bind(pod, "gpu-a") == ""
    assert cluster.get("pods", "p", "default")["spec"]["nodeName"] == "gpu-a"


async def test_plain_http_to_the_tls_port_gets_no_answer(
    it: Any, cluster: MemoryCluster, launch: Any, tmp_path: Path
) -> None:
    ca = trustme.CA()
    crt, key = _write_pair(ca, tmp_path, "only")
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    stack = await launch(cert_file=str(crt), key_file=str(key), scheme="https", ssl=client_ctx)
    port = int(stack.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert b"HTTP/1.1 200" not in answer
    assert await stack.healthz() == 200  # still serving TLS


async def test_api_server_over_tls_with_client_certificate(it: Any, tmp_path: Path) -> None:
    """The usual production shape: kube-apiserver over HTTPS, a kubeconfig with the cluster CA and
    a client certificate (no token). The whole stack starts and schedules through it."""
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    ca.configure_trust(server_ctx)
    server_ctx.verify_mode = ssl.CERT_OPTIONAL  # a verified client certificate authenticates
    client = ca.issue_cert("kube-scheduler.example", common_name="system:kube-scheduler")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    client.cert_chain_pems[0].write_to_path(str(tmp_path / "client.crt"))
    client.private_key_pem.write_to_path(str(tmp_path / "client.key"))

    cluster = MemoryCluster(seed=3)
    cluster.create("nodes", gpu_node("gpu-a"))
    api = await serve(cluster, "127.0.0.1", 0, ssl=server_ctx, token="nobody-has-this-token")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": api.url, "certificate-authority": str(tmp_path / "ca.crt")},
                    }
                ],
                "users": [
                    {
                        "name": "u",
                        "user": {
                            "client-certificate": str(tmp_path / "client.crt"),
                            "client-key": str(tmp_path / "client.key"),
                        },
                    }
                ],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    opts = SchedulerOptions(
        http_bind="127.0.0.1:0", metrics_bind_address="127.0.0.1:0", kubeconfig=str(kubeconfig)
    )
    running = await asyncio.wait_for(start(opts), 10)
    try:
        port = running.runners[1].addresses[0][1]
        pod = cluster.create("pods", gpu_pod("p", mem=1000), namespace="default")
        async with aiohttp.ClientSession() as session:
            body = {"Pod": pod, "NodeNames": ["gpu-a"]}
            async with session.post(f"http://127.0.0.1:{port}/filter", json=body) as resp:
                assert (await resp.json())["NodeNames"] == ["gpu-a"]
            bind = {
                "PodName": "p",
                "PodNamespace": "default",
                "PodUID": pod["metadata"]["uid"],
                "Node": "gpu-a",
            }
            async with session.post(f"http://127.0.0.1:{port}/bind", json=bind) as resp:
                assert await resp.json() == {"Error": ""}
        assert cluster.get("pods", "p", "default")["spec"]["nodeName"] == "gpu-a"
        assert api.auth_headers and set(api.auth_headers) == {""}  # no token was ever sent
    finally:
        await stop(running)
        await api.close()


def _issue(ca: trustme.CA, directory: Path, not_after: datetime) -> tuple[Path, Path, int]:
    """A pair for 127.0.0.1 expiring at `not_after`, renamed over the old files; its serial."""
    crt, key = _write_pair(ca, directory, not_after=not_after)
    serial = x509.load_pem_x509_certificate(crt.read_bytes()).serial_number
    return crt, key, serial


async def _served_serial(port: int, ctx: ssl.SSLContext) -> tuple[int, float]:
    """(serial, notAfter as unix seconds) of the certificate a brand-new handshake is given."""
    _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    try:
        cert = writer.get_extra_info("peercert")
    finally:
        writer.close()
        await writer.wait_closed()
    return int(cert["serialNumber"], 16), ssl.cert_time_to_seconds(cert["notAfter"])


async def test_rotation_changes_the_served_serial_and_the_expiry_gauge(
    it: Any, launch: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca = trustme.CA()
    first_expiry = datetime(2031, 1, 1, tzinfo=UTC)
    crt, key, first_serial = _issue(ca, tmp_path, first_expiry)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    stack = await launch(cert_file=str(crt), key_file=str(key), scheme="https", ssl=client_ctx)
    port = int(stack.url.rsplit(":", 1)[1])

    async def gauge() -> float:
        (_labels, value), *_ = (await stack.metrics())[EXPIRY]
        return value

    assert await _served_serial(port, client_ctx) == (first_serial, first_expiry.timestamp())
    assert await gauge() == first_expiry.timestamp()

    second_expiry = datetime(2032, 6, 1, tzinfo=UTC)
    _crt, _key, second_serial = _issue(ca, tmp_path, second_expiry)

    async def rotated() -> bool:
        return await _served_serial(port, client_ctx) == (second_serial, second_expiry.timestamp())

    await it.eventually(rotated, "the new certificate on new handshakes", timeout=4.0)
    assert await gauge() == second_expiry.timestamp()

    # A half-written rotation (a key that is not the certificate's): one line, the old pair serves.
    with caplog.at_level(logging.WARNING, logger="vgpu_scheduler.server.tls"):
        key.write_bytes(ca.issue_cert("127.0.0.1").private_key_pem.bytes())
        await it.eventually(lambda: any("reload" in r.message for r in caplog.records), "the failure logged")
        await asyncio.sleep(2.5)  # two more polls of the same broken files: no more lines
    failures = [r for r in caplog.records if "TLS certificate reload" in r.message]
    assert len(failures) == 1, [r.message for r in failures]
    assert f"serial {second_serial:x}" in failures[0].message
    assert await _served_serial(port, client_ctx) == (second_serial, second_expiry.timestamp())
    assert await gauge() == second_expiry.timestamp()
    assert (await stack.metrics())[FAILURES + "_total"][0][1] == 1
