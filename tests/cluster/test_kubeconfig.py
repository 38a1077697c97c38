"""Kubeconfig and in-cluster configuration against the fake API server over HTTPS (trustme CA)."""

from __future__ import annotations

import base64
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from tests.builders import node
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError
from vgpu_scheduler.cluster.kubeconfig import (
    KubeconfigError,
    load_settings,
    make_client,
    resolve_kubeconfig_path,
)
from vgpu_scheduler.standin.fakeapi import FakeApiServer, serve
from vgpu_scheduler.standin.memory import MemoryCluster

TOKEN = "s3cr3t-token"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def https(ca: trustme.CA, cluster: MemoryCluster) -> AsyncIterator[FakeApiServer]:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(ctx)
    ca.configure_trust(ctx)
    ctx.verify_mode = ssl.CERT_OPTIONAL  # a client certificate authenticates, a token does too
    cluster.create("nodes", node("gpu-node-1"))
    srv = await serve(cluster, ssl=ctx, token=TOKEN)
    try:
        yield srv
    finally:
        await srv.close()


def write_kubeconfig(
    tmp: Path,
    server: str,
    ca: trustme.CA | None,
    users: dict[str, Any],
    current: str,
    cluster_extra: dict[str, Any] | None = None,
) -> Path:
    cluster: dict[str, Any] = {"server": server, **(cluster_extra or {})}
    if ca is not None:
        ca_path = tmp / "ca.crt"
        ca.cert_pem.write_to_path(str(ca_path))
        cluster["certificate-authority"] = str(ca_path)
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": cluster}],
        "users": [{"name": n, "user": u} for n, u in users.items()],
        "contexts": [{"name": n, "context": {"cluster": "fake", "user": n}} for n in users],
        "current-context": current,
    }
    path = tmp / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


async def _node_name(kubeconfig: str | None = None, **kw: Any) -> str:
    client = await make_client(kubeconfig, qps=0, **kw)
    try:
        node = await client.get_node("gpu-node-1")
        return str(node["metadata"]["name"])
    finally:
        await client.close()


async def test_token_auth_over_https(https: FakeApiServer, ca: trustme.CA, tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path, https.url, ca, {"tok": {"token": TOKEN}, "bad": {"token": "nope"}}, "tok"
    )
    assert await _node_name(str(path)) == "gpu-node-1"
    assert https.auth_headers[-1] == f"Bearer {TOKEN}"
    with pytest.raises(ApiError) as err:
        await _node_name(str(path), context="bad")
    assert err.value.status == 401 and err.value.reason == "Unauthorized"


async def test_client_certificate_auth_over_https(
    https: FakeApiServer, ca: trustme.CA, tmp_path: Path
) -> None:
    cert = ca.issue_cert("e2e-admin")
    user = {
        "client-certificate-data": base64.b64encode(cert.cert_chain_pems[0].bytes()).decode(),
        "client-key-data": base64.b64encode(cert.private_key_pem.bytes()).decode(),
    }
    path = write_kubeconfig(tmp_path, https.url, ca, {"admin": user}, "admin")
    assert await _node_name(str(path)) == "gpu-node-1"
    assert https.auth_headers[-1] == ""  # authenticated by the certificate alone


async def test_untrusted_server_is_refused(https: FakeApiServer, tmp_path: Path) -> None:
    other = trustme.CA()
    path = write_kubeconfig(tmp_path, https.url, other, {"tok": {"token": TOKEN}}, "tok")
    with pytest.raises(ApiConnectionError, match=r"certificate verify failed|CERTIFICATE_VERIFY_FAILED"):
        await _node_name(str(path))
    insecure = write_kubeconfig(
        tmp_path, https.url, None, {"tok": {"token": TOKEN}}, "tok", {"insecure-skip-tls-verify": True}
    )
    assert await _node_name(str(insecure)) == "gpu-node-1"


async def test_token_file_is_reread_after_401(https: FakeApiServer, ca: trustme.CA, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("old-token")
    path = write_kubeconfig(tmp_path, https.url, ca, {"tok": {"tokenFile": str(token_file)}}, "tok")
    client = await make_client(str(path), qps=0, token_refresh_interval=3600)
    try:
        token_file.write_text(TOKEN)  # rotated after we loaded it
        await client.get_node("gpu-node-1")
        assert https.auth_headers[-2:] == ["Bearer old-token", f"Bearer {TOKEN}"]
    finally:
        await client.close()


async def test_token_file_is_reread_periodically(
    https: FakeApiServer, ca: trustme.CA, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    path = write_kubeconfig(tmp_path, https.url, ca, {"tok": {"tokenFile": str(token_file)}}, "tok")
    client = await make_client(str(path), qps=0, token_refresh_interval=0)
    try:
        await client.get_node("gpu-node-1")
        token_file.write_text("rotated")
        with pytest.raises(ApiError):
            await client.get_node("gpu-node-1")
        assert https.auth_headers[-1] == "Bearer rotated"
    finally:
        await client.close()


async def test_exec_plugin(https: FakeApiServer, ca: trustme.CA, tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1', 'kind': 'ExecCredential',"
        f" 'status': {{'token': '{TOKEN}'}}}}))\n"
    )
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": [str(plugin)],
        }
    }
    path = write_kubeconfig(tmp_path, https.url, ca, {"sso": user}, "sso")
    assert await _node_name(str(path)) == "gpu-node-1"
    assert https.auth_headers[-1] == f"Bearer {TOKEN}"


async def test_in_cluster(https: FakeApiServer, ca: trustme.CA, tmp_path: Path) -> None:
    token, ca_file = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text(TOKEN)
    ca.cert_pem.write_to_path(str(ca_file))
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(https.port)}
    settings = await load_settings(
        None, environ=env, home=str(tmp_path), incluster_token_path=str(token), incluster_ca_path=str(ca_file)
    )
    assert settings.source == "in-cluster" and settings.base_url == https.url
    assert (
        await _node_name(
            None,
            environ=env,
            home=str(tmp_path),
            incluster_token_path=str(token),
            incluster_ca_path=str(ca_file),
        )
        == "gpu-node-1"
    )


@pytest.mark.parametrize(
    ("flag", "env", "home_has_config", "want"),
    [
        pytest.param("/flag", {"KUBECONFIG": "/env"}, True, "/flag", id="flag wins"),
        pytest.param(None, {"KUBECONFIG": "/env"}, True, "/env", id="KUBECONFIG"),
        pytest.param("", {"KUBECONFIG": "/a:/b"}, True, "/a:/b", id="empty flag: KUBECONFIG list"),
        pytest.param(None, {"KUBECONFIG": ""}, True, "HOME", id="empty KUBECONFIG: home"),
        pytest.param(None, {}, True, "HOME", id="no KUBECONFIG: home"),
        pytest.param(None, {}, False, None, id="nothing anywhere"),
    ],
)
def test_resolution_order(
    tmp_path: Path, flag: str | None, env: dict[str, str], home_has_config: bool, want: str | None
) -> None:
    if home_has_config:
        (tmp_path / ".kube").mkdir()
        (tmp_path / ".kube" / "config").write_text("{}")
    expected = str(tmp_path / ".kube" / "config") if want == "HOME" else want
    assert resolve_kubeconfig_path(flag, env, str(tmp_path)) == expected


async def test_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="cannot load cluster configuration"):
        await load_settings(str(tmp_path / "missing"))
    bad = tmp_path / "bad"
    bad.write_text("apiVersion: v1\nkind: Config\ncurrent-context: nope\ncontexts: []\nclusters: []\n")
    with pytest.raises(KubeconfigError):
        await load_settings(str(bad))
    with pytest.raises(KubeconfigError, match="in-cluster"):
        await load_settings(None, environ={}, home=str(tmp_path))
