"""`vgpu-scheduler certs` against the in-memory API server: create, keep, rotate, races, caBundle."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import ssl
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from vgpu_scheduler.certs import pki
from vgpu_scheduler.certs.cli import main as certs_main
from vgpu_scheduler.certs.sync import CertsConfig, CertsError, material_of, stale_reason, sync
from vgpu_scheduler.cli import main as cli_main
from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport

NOW = datetime(2026, 3, 1, tzinfo=UTC)
NS = "hami-system"
CFG = CertsConfig(namespace=NS, secret_name="vgpu-scheduler-tls", service_name="vgpu-scheduler",
                  webhook_name="vgpu-scheduler-webhook")


def webhook_config(n: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "vgpu-scheduler-webhook"},
        "webhooks": [
            {"name": f"vgpu{i}.hami.io", "sideEffects": "None", "admissionReviewVersions": ["v1"],
             "clientConfig": {"service": {"name": "vgpu-scheduler", "namespace": NS, "path": "/webhook"}}}
            for i in range(n)
        ],
    }


@pytest.fixture
def cluster() -> MemoryCluster:
    c = MemoryCluster(seed=3)
    c.create("mutatingwebhookconfigurations.admissionregistration.k8s.io", webhook_config())
    return c


@pytest.fixture
async def client(cluster: MemoryCluster) -> Any:
    kc = KubeClient(MemoryTransport(cluster))
    yield kc
    await kc.close()


def writes(cluster: MemoryCluster) -> list[tuple[str, str]]:
    return [(method, path) for _, method, path in cluster.request_log if method != "GET"]


def secret(cluster: MemoryCluster) -> dict[str, Any]:
    return cluster.get(api.SECRETS, "vgpu-scheduler-tls", NS)


async def test_first_run_creates_then_second_changes_nothing(
    cluster: MemoryCluster, client: KubeClient
) -> None:
    first = await sync(client, CFG, NOW)
    assert (first.secret, first.ca_bundle, first.lost_races) == ("created", "patched", 0)
    s = secret(cluster)
    assert s["type"] == "kubernetes.io/tls"
    material = material_of(s)
    assert material is not None and stale_reason(material, CFG, NOW) is None
    info = pki.cert_info(material.cert_pem)
    assert info.dns_names == {
        "vgpu-scheduler", "vgpu-scheduler.hami-system",
        "vgpu-scheduler.hami-system.svc", "vgpu-scheduler.hami-system.svc.cluster.local",
    }
    assert info.not_after == NOW + CFG.validity
    ca_b64 = base64.b64encode(material.ca_pem).decode()
    mwc = cluster.get(api.MUTATING_WEBHOOK_CONFIGURATIONS, "vgpu-scheduler-webhook")
    assert [w["clientConfig"]["caBundle"] for w in mwc["webhooks"]] == [ca_b64, ca_b64]

    rv_secret, rv_mwc = s["metadata"]["resourceVersion"], mwc["metadata"]["resourceVersion"]
    cluster.request_log.clear()
    second = await sync(client, CFG, NOW + timedelta(days=100))
    assert (second.secret, second.ca_bundle) == ("kept", "unchanged")
    assert writes(cluster) == []
    assert secret(cluster)["metadata"]["resourceVersion"] == rv_secret
    mwc = cluster.get(api.MUTATING_WEBHOOK_CONFIGURATIONS, "vgpu-scheduler-webhook")
    assert mwc["metadata"]["resourceVersion"] == rv_mwc


async def test_rotation_near_expiry_keeps_trusting_the_previous_ca(
    cluster: MemoryCluster, client: KubeClient
) -> None:
    await sync(client, CFG, NOW)
    old = material_of(secret(cluster))
    assert old is not None
    near = NOW + CFG.validity - CFG.rotate_before + timedelta(hours=1)
    out = await sync(client, CFG, near)
    assert (out.secret, out.ca_bundle) == ("rotated", "patched")
    new = material_of(secret(cluster))
    assert new is not None and new.cert_pem != old.cert_pem
    assert pki.cert_info(new.cert_pem).not_after == near + CFG.validity
    # The bundle: the new CA first, then the old one (old replicas still serve its certificate).
    assert new.ca_pem == out.material.ca_pem
    assert new.ca_pem.startswith(pki.live_cas(new.ca_pem, near, 1)[0])
    assert new.ca_pem.endswith(old.ca_pem)
    assert pki.issued_by_any(old.cert_pem, new.ca_pem) and pki.issued_by_any(new.cert_pem, new.ca_pem)
    # A second rotation drops the CA before the previous one.
    later = near + CFG.validity - CFG.rotate_before + timedelta(hours=1)
    await sync(client, CFG, later)
    newest = material_of(secret(cluster))
    assert newest is not None and not pki.issued_by_any(old.cert_pem, newest.ca_pem)
    assert newest.ca_pem.endswith(new.ca_pem[: len(new.ca_pem) - len(old.ca_pem)])


async def test_a_just_issued_certificate_is_not_rotated_again(
    cluster: MemoryCluster, client: KubeClient
) -> None:
    await sync(client, CFG, NOW)
    just_before = NOW + CFG.validity - CFG.rotate_before - timedelta(seconds=1)
    assert (await sync(client, CFG, just_before)).secret == "kept"


@pytest.mark.parametrize(
    "mutate, reason",
    [
        pytest.param(lambda d: d.pop("tls.key"), "missing keys", id="missing keys"),
        pytest.param(
            lambda d: d.update({"tls.crt": base64.b64encode(b"junk").decode()}), "unreadable certificate",
            id="unreadable certificate",
        ),
        pytest.param(lambda d: d.update({"ca.crt": d["tls.crt"]}), "certificate not signed by ca.crt",
                     id="certificate not signed by ca.crt"),
    ],
)
async def test_a_broken_secret_is_replaced(
    cluster: MemoryCluster, client: KubeClient, mutate: Any, reason: str
) -> None:
    await sync(client, CFG, NOW)
    s = secret(cluster)
    mutate(s["data"])
    cluster.update(api.SECRETS, s)
    assert stale_reason(material_of(secret(cluster)), CFG, NOW) == reason
    assert (await sync(client, CFG, NOW)).secret == "rotated"
    assert stale_reason(material_of(secret(cluster)), CFG, NOW) is None


async def test_a_new_service_name_gets_a_new_certificate(
    cluster: MemoryCluster, client: KubeClient
) -> None:
    await sync(client, CFG, NOW)
    cfg = dataclasses.replace(CFG, extra_dns_names=("scheduler.example.com",))
    assert stale_reason(material_of(secret(cluster)), cfg, NOW) == "no SAN for scheduler.example.com"
    assert (await sync(client, cfg, NOW)).secret == "rotated"


async def test_concurrent_runs_end_with_one_secret(
    cluster: MemoryCluster, client: KubeClient
) -> None:
    outs = await asyncio.gather(*(sync(client, CFG, NOW) for _ in range(4)))
    assert sorted(o.secret for o in outs).count("created") == 1
    assert sum(o.lost_races for o in outs) >= 1  # every run read "absent" before any create landed
    final = material_of(secret(cluster))
    assert all(o.material == final for o in outs)
    assert cluster.count(api.SECRETS) == 1
    ca_b64 = base64.b64encode(final.ca_pem if final else b"").decode()
    mwc = cluster.get(api.MUTATING_WEBHOOK_CONFIGURATIONS, "vgpu-scheduler-webhook")
    assert {w["clientConfig"]["caBundle"] for w in mwc["webhooks"]} == {ca_b64}


async def test_concurrent_rotations_end_with_one_certificate(
    cluster: MemoryCluster, client: KubeClient
) -> None:
    await sync(client, CFG, NOW)
    near = NOW + CFG.validity - timedelta(days=1)
    outs = await asyncio.gather(*(sync(client, CFG, near) for _ in range(3)))
    assert sorted(o.secret for o in outs) == ["kept", "kept", "rotated"]
    final = material_of(secret(cluster))
    assert all(o.material == final for o in outs)


async def test_missing_webhook_configuration_is_an_error(
    cluster: MemoryCluster, client: KubeClient
) -> None:
    cluster.delete(api.MUTATING_WEBHOOK_CONFIGURATIONS, "vgpu-scheduler-webhook")
    with pytest.raises(CertsError, match="not found"):
        await sync(client, CFG, NOW)
    # Without a webhook name the caBundle is left alone (cert-manager injects it).
    cfg = CertsConfig(namespace=NS, secret_name="s", service_name="vgpu-scheduler")
    assert (await sync(client, cfg, NOW)).ca_bundle == "skipped"


async def test_files_are_written_once_and_serve_tls(
    cluster: MemoryCluster, client: KubeClient, tmp_path: Path
) -> None:
    out = await sync(client, CFG, datetime.now(UTC), tmp_path / "tls")
    assert sorted(out.files) == ["ca.crt", "tls.crt", "tls.key"]
    assert (tmp_path / "tls" / "tls.key").stat().st_mode & 0o777 == 0o600
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tmp_path / "tls" / "tls.crt", tmp_path / "tls" / "tls.key")  # what the server does
    assert (await sync(client, CFG, datetime.now(UTC), tmp_path / "tls")).files == []


def test_cli_flags(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert certs_main([]) == 2
    assert "--namespace is required" in capsys.readouterr().err
    assert certs_main(["--namespace=x", "--validity=24h", "--rotate-before=48h"]) == 2
    assert "--rotate-before must be shorter" in capsys.readouterr().err
    assert certs_main(["--namespace=x", "--validity=1y"]) == 2
    assert "unknown unit" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli_main(["certs", "--help"])
    assert exc.value.code == 0
    assert "--rotate-before" in capsys.readouterr().out


def test_cli_reports_an_unreachable_api_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    assert certs_main(["--namespace=x", f"--kubeconfig={missing}"]) == 1
    assert "cannot load cluster configuration" in capsys.readouterr().err
