"""deploy/ and `vgpu-scheduler certs` against the real kube-apiserver v1.36.

* every overlay, rendered by `kubectl kustomize`, passes the API server's own validation
  (`kubectl apply --server-side --dry-run=server`); cert-manager's kinds are left out (no CRDs here);
* `certs`: the first run creates the Secret and sets the caBundle, the second writes nothing, a run
  near expiry rotates, and concurrent runs end with one Secret that all of them use.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import ControlPlane

from vgpu_scheduler.certs.sync import CertsConfig, material_of, stale_reason, sync
from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError

pytestmark = pytest.mark.e2e

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
NS = "certs-e2e"
CFG = CertsConfig(namespace=NS, secret_name="webhook-tls", service_name="vgpu-scheduler",
                  webhook_name="vgpu-scheduler-certs-e2e")


@pytest.mark.parametrize("overlay", ["default", "cert-manager"])
def test_overlay_passes_server_side_validation(control_plane: ControlPlane, overlay: str) -> None:
    rendered = subprocess.run(
        [str(control_plane.bin_dir / "kubectl"), "kustomize", str(DEPLOY / "overlays" / overlay)],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    objs = [o for o in yaml.safe_load_all(rendered) if o]
    kept = [o for o in objs if not o["apiVersion"].startswith("cert-manager.io/")]
    assert len(objs) - len(kept) == (2 if overlay == "cert-manager" else 0)
    ns = next(o["metadata"]["name"] for o in kept if o["kind"] == "Namespace")
    control_plane.ensure_namespace(ns, webhook=False)  # a dry run creates nothing to put the rest in
    out = control_plane.kubectl(
        "apply", "--server-side", "--dry-run=server", "--field-manager=e2e", "-f", "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": kept}),
    )
    assert out.count("(server dry run)") == len(kept), out


def _webhook() -> dict[str, Any]:
    # Matches no pod (objectSelector), so the other e2e tests never call it.
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CFG.webhook_name},
        "webhooks": [{
            "name": "vgpu.hami.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Ignore",
            "clientConfig": {"service": {"name": "vgpu-scheduler", "namespace": NS, "path": "/webhook"}},
            "objectSelector": {"matchLabels": {"vgpu-scheduler.e2e/never": "true"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"]}],
        }],
    }


async def _versions(client: KubeClient) -> tuple[str, str]:
    s = await client.get(api.SECRETS, CFG.secret_name, NS)
    m = await client.get(api.MUTATING_WEBHOOK_CONFIGURATIONS, CFG.webhook_name)
    return s["metadata"]["resourceVersion"], m["metadata"]["resourceVersion"]


async def test_certs_create_keep_rotate_and_race(control_plane: ControlPlane, client: KubeClient) -> None:
    control_plane.ensure_namespace(NS, webhook=False)
    for resource, name, ns in ((api.SECRETS, CFG.secret_name, NS),
                               (api.MUTATING_WEBHOOK_CONFIGURATIONS, CFG.webhook_name, None)):
        try:
            await client.delete(resource, name, ns)
        except ApiError as exc:
            assert exc.status == 404
    await client.create(api.MUTATING_WEBHOOK_CONFIGURATIONS, _webhook())
    now = datetime.now(UTC)

    first = await sync(client, CFG, now)
    assert (first.secret, first.ca_bundle) == ("created", "patched")
    secret = await client.get(api.SECRETS, CFG.secret_name, NS)
    assert secret["type"] == "kubernetes.io/tls"
    assert stale_reason(material_of(secret), CFG, now) is None
    mwc = await client.get(api.MUTATING_WEBHOOK_CONFIGURATIONS, CFG.webhook_name)
    assert mwc["webhooks"][0]["clientConfig"]["caBundle"] == base64.b64encode(first.material.ca_pem).decode()

    before = await _versions(client)
    second = await sync(client, CFG, now + timedelta(days=1))
    assert (second.secret, second.ca_bundle) == ("kept", "unchanged")
    assert await _versions(client) == before  # nothing written

    near = now + CFG.validity - CFG.rotate_before + timedelta(hours=1)
    rotated = await sync(client, CFG, near)
    assert (rotated.secret, rotated.ca_bundle) == ("rotated", "patched")
    assert material_of(await client.get(api.SECRETS, CFG.secret_name, NS)) == rotated.material
    assert rotated.material.ca_pem.endswith(first.material.ca_pem)  # old replicas stay trusted

    # Concurrent first runs (each replica's init container at once): one Secret, used by all.
    await client.delete(api.SECRETS, CFG.secret_name, NS)
    outs = await asyncio.gather(*(sync(client, CFG, now) for _ in range(3)))
    assert sorted(o.secret for o in outs).count("created") == 1
    final = material_of(await client.get(api.SECRETS, CFG.secret_name, NS))
    assert all(o.material == final for o in outs)
    secrets = await client.list(api.SECRETS, NS)
    assert [s["metadata"]["name"] for s in secrets["items"]] == [CFG.secret_name]
    mwc = await client.get(api.MUTATING_WEBHOOK_CONFIGURATIONS, CFG.webhook_name)
    assert final is not None
    assert mwc["webhooks"][0]["clientConfig"]["caBundle"] == base64.b64encode(final.ca_pem).decode()
    await client.delete(api.MUTATING_WEBHOOK_CONFIGURATIONS, CFG.webhook_name)
