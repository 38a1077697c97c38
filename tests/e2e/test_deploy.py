"""charts/vgpu-scheduler and `vgpu-scheduler certs` against the real kube-apiserver v1.36.

* every values set of tests/deploy/chart.py, rendered by the pinned Helm (`helm template`), passes
  the API server's own validation (`kubectl apply --server-side --dry-run=server`); the kinds of
  CRDs this cluster does not have (cert-manager's, prometheus-operator's) are left out, and the
  KubeSchedulerConfiguration is loaded by the real kube-scheduler;
* `certs`: the first run creates the Secret and sets the caBundle, the second writes nothing, a run
  near expiry rotates, and concurrent runs end with one Secret that all of them use.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
import chart
from controlplane import ControlPlane

from vgpu_scheduler.certs.sync import CertsConfig, material_of, stale_reason, sync
from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError

pytestmark = pytest.mark.e2e

NS = "certs-e2e"
CFG = CertsConfig(namespace=NS, secret_name="webhook-tls", service_name="vgpu-scheduler",
                  webhook_name="vgpu-scheduler-certs-e2e")
NO_CRD_HERE = ("cert-manager.io/", "monitoring.coreos.com/")


def _rendered(name: str) -> list[dict[str, Any]]:
    try:
        return chart.render_set(name)
    except chart.HelmUnavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("values_set", sorted(chart.VALUE_SETS))
def test_chart_passes_server_side_validation(control_plane: ControlPlane, values_set: str,
                                             tmp_path: Path) -> None:
    objs = _rendered(values_set)
    kept = [o for o in objs if not o["apiVersion"].startswith(NO_CRD_HERE)]
    assert len(objs) - len(kept) == (2 if values_set == "cert-manager" else 0)
    ns = chart.VALUE_SETS[values_set][2]
    control_plane.ensure_namespace(ns, webhook=False)  # `helm install --create-namespace` does this
    out = control_plane.kubectl(
        "apply", "--server-side", "--force-conflicts", "--dry-run=server", "--field-manager=e2e", "-f", "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": kept}),
    )
    assert out.count("(server dry run)") == len(kept), out
    # The rendered KubeSchedulerConfiguration is one the real kube-scheduler v1.36 loads and validates:
    # it starts with it (against this kube-apiserver) and is stopped once it serves /healthz.
    config = next(o for o in kept if o["kind"] == "ConfigMap" and "config.yaml" in o["data"])
    scheduler_config = yaml.safe_load(config["data"]["config.yaml"])
    scheduler_config["clientConnection"] = {"kubeconfig": str(control_plane.kubeconfig)}
    scheduler_config["leaderElection"]["leaderElect"] = False  # no Lease left behind
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(scheduler_config))
    _kube_scheduler_accepts(control_plane, tmp_path)


def _kube_scheduler_accepts(control_plane: ControlPlane, tmp_path: Path) -> None:
    """kube-scheduler --config: exits at once with the reason on an invalid configuration."""
    log = tmp_path / "kube-scheduler.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(control_plane.bin_dir / "kube-scheduler"), f"--config={tmp_path / 'config.yaml'}",
             "--secure-port=0", "-v=1"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = datetime.now(UTC) + timedelta(seconds=30)
        while datetime.now(UTC) < deadline:
            if proc.poll() is not None:
                pytest.fail(f"kube-scheduler refused the rendered configuration:\n{log.read_text()[-3000:]}")
            if "Starting Kubernetes Scheduler" in log.read_text():
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"kube-scheduler did not start in 30 s:\n{log.read_text()[-3000:]}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


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
