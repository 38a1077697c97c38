"""One install of charts/vgpu-scheduler, end to end on the real control plane.

The chart is rendered with Ascend enabled, its own scheduler name, a node label selector and a
namespace of its own. What the rendered objects say drives the real processes, changed only where a
pod's environment differs from this machine's (listen addresses and file paths, the kubeconfig):
* our server runs with the rendered extender container's arguments and the rendered device config;
* the real kube-scheduler runs with the rendered KubeSchedulerConfiguration: its profile, its Lease
  (leader election on, in the chart's namespace, followed by our server through
  --leader-elect-resource-*), and its extender with the rendered managedResources;
* the rendered MutatingWebhookConfiguration, pointed at our server's URL and narrowed to this test's
  namespace, admits the pods;
* the rendered ConfigMaps, ServiceAccount, RBAC, Service and Deployment are created for real (no
  kubelet runs the Deployment).
Then an NVIDIA pod and an Ascend pod, each asking its vendor's resources and nothing else, are
admitted by the webhook (schedulerName set), filtered and bound by our server through kube-scheduler,
and confirmed by a device-plugin stand-in.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
import chart
from controlplane import WEBHOOK_LABEL, ControlPlane
from pluginstandin import GROUP_LABEL, DevicePluginStandIn, create_node, delete_group

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.configfile import parse_device_config
from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.flags import parse_args
from vgpu_scheduler.scheduler.options import vendor_flags
from vgpu_scheduler.wire import keys

pytestmark = pytest.mark.e2e

GROUP = "e2e-chart"
NAMESPACE = "e2e-chart"
SCHEDULER = "hami-chart"
RELEASE = "e2e"  # its cluster-scoped objects (e2e-vgpu-scheduler...) are named apart from other tests'
VALUES = {
    "schedulerName": SCHEDULER,
    "devices": {"ascend": {"enabled": True}},
    "scheduler": {"nodeLabelSelector": {GROUP_LABEL: GROUP}},
}
# Where the pod and this machine differ: the server's listen addresses and certificate files (given by
# spawn_server), and the device config's path.
POD_ONLY = ("--http_bind=", "--cert_file=", "--key_file=", "--metrics-bind-address=", "--device-config-file=")
BASE = {"cpu": "32", "memory": "128Gi", "pods": "110"}
Obj = dict[str, Any]


def _stamp() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


NODES: dict[str, tuple[str, str, Obj, Obj]] = {
    # node: (vendor, register annotation key, its devices, capacity)
    f"{GROUP}-nvidia": ("NVIDIA", keys.NODE_NVIDIA_REGISTER, [
        {"id": f"GPU-e2ec-{i}", "index": i, "count": 10, "devmem": 81920, "devcore": 100,
         "type": "NVIDIA-A100", "numa": 0, "mode": "hami-core", "health": True} for i in range(2)],
        {"nvidia.com/gpu": "20"}),
    f"{GROUP}-ascend": ("Ascend910B3", "hami.io/node-register-Ascend910B3", [
        {"id": f"Ascend910B3-e2ec-{i}", "index": i, "count": 4, "devmem": 65536, "devcore": 20,
         "type": "Ascend910B3", "health": True} for i in range(2)],
        {"huawei.com/Ascend910B3": "2"}),
}
PODS = {  # pod: (node it must land on, limits)
    "nvidia": (f"{GROUP}-nvidia", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40000"}),
    "ascend": (f"{GROUP}-ascend", {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "16384"}),
}


def _one(objs: list[Obj], kind: str, suffix: str = "") -> Obj:
    (found,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    return found


def _rendered() -> list[Obj]:
    try:
        return chart.render(VALUES, release=RELEASE, namespace=NAMESPACE)
    except chart.HelmUnavailable as exc:
        pytest.skip(str(exc))


def _handshakes(vendors: Vendors) -> dict[str, dict[str, str]]:
    out = {}
    for node, (vendor, _, _, _) in NODES.items():
        key = vendors[vendor].handshake_key
        out[node] = {key: f"Reported {_stamp()}"} if key else {}
    return out


async def _create_nodes(client: KubeClient, vendors: Vendors) -> None:
    handshakes = _handshakes(vendors)
    for node, (_, register, devices, resources) in NODES.items():
        annotations = {register: json.dumps(devices, separators=(",", ":")), **handshakes[node]}
        labels = {"kubernetes.io/os": "linux", "kubernetes.io/hostname": node, GROUP_LABEL: GROUP}
        capacity = {**BASE, **resources}
        await create_node(client, {"apiVersion": "v1", "kind": "Node", "spec": {},
                                   "metadata": {"name": node, "labels": labels, "annotations": annotations}},
                          {"status": {"capacity": capacity, "allocatable": capacity}})


async def _registered(
    control_plane: ControlPlane, client: KubeClient, vendors: Vendors, metrics: str
) -> None:
    """Until our server knows every device, re-report the handshakes as the device plugins do (the
    session's shared server stamps `Requesting_` on these nodes too)."""
    want = sum(len(devices) for _, _, devices, _ in NODES.values())
    deadline = time.monotonic() + 120.0
    while (seen := await asyncio.to_thread(control_plane.registered_devices, metrics)) < want:
        assert time.monotonic() < deadline, f"our server registered {seen}/{want} devices"
        for node, handshake in _handshakes(vendors).items():
            await client.patch_node(node, {"metadata": {"annotations": handshake}})
        await asyncio.sleep(3.0)


def _webhook(rendered: Obj, url: str, ca: bytes) -> Obj:
    """The rendered webhook, sent to our server's URL, for this test's namespace only."""
    mwc = json.loads(json.dumps(rendered))
    mwc["metadata"] = {"name": f"{rendered['metadata']['name']}-{GROUP}"}
    (hook,) = mwc["webhooks"]
    hook["clientConfig"] = {"url": f"{url}/webhook", "caBundle": base64.b64encode(ca).decode()}
    hook["namespaceSelector"]["matchLabels"] = {WEBHOOK_LABEL: GROUP}
    return dict(mwc)


async def test_the_rendered_chart_places_an_nvidia_and_an_ascend_pod(
    control_plane: ControlPlane, client: KubeClient, tmp_path: Path
) -> None:
    objs = _rendered()
    dep = _one(objs, "Deployment")
    containers = dep["spec"]["template"]["spec"]["containers"]
    (extender,) = [c for c in containers if c["name"] == "vgpu-scheduler-extender"]
    device_config = _one(objs, "ConfigMap", "-device")["data"]["device-config.yaml"]
    scheduler_config = yaml.safe_load(_one(objs, "ConfigMap", "-config")["data"]["config.yaml"])
    opts, _ = parse_args(extender["args"])
    vendors = build(parse_device_config(device_config), vendor_flags(opts))
    assert opts.enable_ascend and opts.leader_elect and opts.leader_elect_resource_namespace == NAMESPACE

    # The namespace (as `helm install --create-namespace`), then every rendered object the cluster can
    # hold without the webhook (which is applied below, aimed at our server).
    control_plane.apply({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": NAMESPACE, "labels": {WEBHOOK_LABEL: GROUP}}},
                        {"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": "default", "namespace": NAMESPACE}})
    control_plane.apply(*(o for o in objs if o["kind"] != "MutatingWebhookConfiguration"))
    await _create_nodes(client, vendors)

    config_file = tmp_path / "device-config.yaml"
    config_file.write_text(device_config)
    args = [a for a in extender["args"] if not a.startswith(POD_ONLY)]
    url, metrics = control_plane.spawn_server("vgpu-scheduler-chart", extra=[
        *args, f"--device-config-file={config_file}",
    ])
    (ext,) = scheduler_config["extenders"]
    assert ext["urlPrefix"].startswith("https://127.0.0.1:") and ext["tlsConfig"] == {"insecure": True}
    ext["urlPrefix"] = url  # the pod's loopback port, here our server's
    scheduler_config["clientConnection"] = {"kubeconfig": str(control_plane.kubeconfig)}
    control_plane.spawn_scheduler_config("kube-scheduler-chart", scheduler_config, wait=False)
    control_plane.apply(_webhook(_one(objs, "MutatingWebhookConfiguration"), url,
                                 control_plane.certs.ca_file.read_bytes()))
    try:
        await _registered(control_plane, client, vendors, metrics)
        async with DevicePluginStandIn(client, namespace=NAMESPACE, vendors=vendors) as plugin:
            for name, (_, limits) in PODS.items():
                await client.create(api.PODS, {
                    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
                    "spec": {"terminationGracePeriodSeconds": 0, "nodeSelector": {GROUP_LABEL: GROUP},
                             "containers": [{"name": "main", "image": "registry.invalid/app:none",
                                             "resources": {"limits": limits, "requests": {"cpu": "10m"}}}]},
                }, NAMESPACE)
            placed = await _placed(client)
            assert not plugin.errors, plugin.errors
        for name, (node, _) in PODS.items():
            pod = placed[name]
            assert pod["spec"]["schedulerName"] == SCHEDULER  # set by the rendered webhook's server
            assert pod["spec"]["nodeName"] == node
            ann = pod["metadata"]["annotations"]
            assert ann[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS and ann[keys.VGPU_NODE] == node
        nvidia = placed["nvidia"]["metadata"]["annotations"][keys.VGPU_ALLOCATED]
        assert nvidia.startswith("GPU-e2ec-") and ",NVIDIA,40000,0:" in nvidia
        ascend = placed["ascend"]["metadata"]["annotations"]["hami.io/Ascend910B3-devices-allocated"]
        assert ascend.startswith("Ascend910B3-e2ec-") and ",Ascend910B3,16384,0:" in ascend
        # kube-scheduler holds the rendered Lease in the chart's namespace, and our server followed it.
        lease = await client.get(api.LEASES, SCHEDULER, NAMESPACE)
        assert lease["spec"]["holderIdentity"]
    finally:
        control_plane.kill("kube-scheduler-chart")
        control_plane.kill("vgpu-scheduler-chart")
        with contextlib.suppress(ApiError):
            await client.delete(api.MUTATING_WEBHOOK_CONFIGURATIONS,
                                f"{_one(objs, 'MutatingWebhookConfiguration')['metadata']['name']}-{GROUP}")
        await delete_group(client, GROUP, NAMESPACE)
        # As `helm uninstall`: the release's objects, cluster-scoped ones included.
        installed = [o for o in objs if o["kind"] != "MutatingWebhookConfiguration"]
        control_plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-",
                              stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": installed}))


async def _placed(client: KubeClient, timeout: float = 120.0) -> dict[str, Obj]:
    deadline = time.monotonic() + timeout
    while True:
        pods = {p["metadata"]["name"]: p for p in await client.list_pods(NAMESPACE)}
        done = {n: p for n, p in pods.items() if n in PODS and p["spec"].get("nodeName")
                and (p["metadata"].get("annotations") or {}).get(keys.BIND_PHASE) == keys.BIND_PHASE_SUCCESS}
        if len(done) == len(PODS):
            return done
        seen = {n: (p["spec"].get("schedulerName"), p["spec"].get("nodeName"),
                    p.get("status", {}).get("conditions")) for n, p in pods.items()}
        assert time.monotonic() < deadline, f"placed {sorted(done)} of {sorted(PODS)}: {json.dumps(seen)}"
        await asyncio.sleep(0.5)
