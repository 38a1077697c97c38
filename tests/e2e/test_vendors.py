"""Every vendor through the real control plane: a mixed fleet, one node per vendor family.

A replica of our own (server + kube-scheduler, scheduler name `hami-vendors`) runs with the chart's
device configuration (every vendor section, src/vgpu_scheduler/data/device-config.yaml),
`--enable-iluvatar --enable-ascend`, and a node label selector for this test's group. Its
kube-scheduler lists every registered vendor's resources as the extender's `managedResources`
(as the chart does), and a MutatingWebhookConfiguration of its own sends the pods of this test's
namespace to its /webhook.

Each node is registered the way that vendor's device plugin does it: an inventory annotation and a
`Reported` handshake (legacy comma form for Hygon and Iluvatar, JSON for the others, Enflame DRS'
capacity JSON), or node capacity and allocatable alone (Mthreads, AWS Neuron, Enflame GCU, Metax
GPU, Kunlun whole cards). Then, for each vendor, a pod
asking for its resources goes through the real admission chain, kube-scheduler, our /filter and
/bind, and a device-plugin stand-in that consumes the vendor's to-allocate annotation. Checked per
vendor: the node it lands on, exactly the annotations §4.1/§4.2/§4.4 and the vendor's extras say,
what the webhook changed, the node lock taken at bind and released by the plugin (or never taken,
§6.2), the handshake stamped by the server, and no device over-committed (pods of a second wave
fill every vendor's node; the ones left over stay pending with our reason).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import WEBHOOK_LABEL, ControlPlane
from pluginstandin import DevicePluginStandIn, create_node, delete_group, group_selector

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.cluster.nodelock import format_lock, parse_lock
from vgpu_scheduler.cluster.reflector import Reflector
from vgpu_scheduler.configfile import parse_device_config
from vgpu_scheduler.devices.protocol import VendorFlags, Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.allocation import decode_container_list

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GROUP = "e2e-vendors"
NAMESPACE = "e2e-vendors"
SCHEDULER = "hami-vendors"
WEBHOOK_VALUE = "vendors"  # WEBHOOK_LABEL value of our namespace: our replica's /webhook, not the shared one
DEVICE_CONFIG = Path(__file__).resolve().parents[2] / "src" / "vgpu_scheduler" / "data" / "device-config.yaml"
FLAGS = VendorFlags(enable_ascend=True, enable_iluvatar=True)
SERVER_FLAGS = ("--enable-iluvatar", "--enable-ascend")
BASE = {"cpu": "32", "memory": "128Gi", "pods": "110"}
PLUGIN_DELAY = 0.5  # s between bind and the stand-in's Allocate: the lock is visible meanwhile
TIME_KEYS = frozenset({keys.VGPU_TIME, keys.BIND_TIME})

Obj = dict[str, Any]


def _json(devices: list[Obj]) -> str:
    return json.dumps(devices, separators=(",", ":"))


def _legacy(prefix: str, n: int, devmem: int, type_: str) -> str:
    """The ≤ v2.x comma form `id,count,devmem,devcore,type,numa,health,index,mode:` (§3.2)."""
    return "".join(f"{prefix}-{i},4,{devmem},100,{type_},0,true,{i},hami-core:" for i in range(n))


@dataclass(frozen=True)
class Case:
    """One vendor family: its node as its device plugin leaves it, its pod, what must come out."""

    name: str
    vendor: str
    """Vendor key (its handshake key is read from the registered vendor)."""
    register: Mapping[str, str]
    """Inventory annotations the device plugin writes (empty: capacity-registered)."""
    resources: Mapping[str, str]
    """Vendor resources in the node's capacity and allocatable."""
    limits: Mapping[str, str]
    devices: int
    """Devices the server registers for the node."""
    annotations: Mapping[str, str]
    """Pod annotations after the stand-in, besides vgpu-node/-time, bind-phase/-time. `{node}` and
    `{t}` (the pod's vgpu-time) are filled in."""
    locks: bool
    """§6.2: the bind takes `hami.io/mutex.lock` (released by the device plugin)."""
    confirmed: bool
    """The vendor has a to-allocate annotation: the plugin consumes it, bind-phase becomes success."""
    fill: int
    """Pods like the first one the node holds in all (the second wave asks one more)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    webhook: Callable[[Obj], None] | None = None
    """Checks what our /webhook changed in the created pod."""

    @property
    def node(self) -> str:
        return f"{GROUP}-{self.name}"


def _iluvatar_env(pod: Obj) -> None:
    env = pod["spec"]["containers"][0].get("env") or []
    assert {"name": "SOL_CONTINER_NAME", "value": "main"} in env, env


def _metax_qos(pod: Obj) -> None:
    assert pod["metadata"]["annotations"]["metax-tech.com/sgpu-qos-policy"] == "best-effort"


CASES = (
    Case(
        "nvidia", "NVIDIA",
        {keys.NODE_NVIDIA_REGISTER: _json([
            {"id": f"GPU-e2ev-{i}", "index": i, "count": 10, "devmem": 81920, "devcore": 100,
             "type": "NVIDIA-A100", "numa": 0, "mode": "hami-core", "health": True} for i in range(2)])},
        {"nvidia.com/gpu": "20"},
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40000"},
        devices=2, locks=True, confirmed=True, fill=4,
        annotations={keys.VGPU_ALLOCATED: "GPU-e2ev-1,NVIDIA,40000,0:;", keys.VGPU_TO_ALLOCATE: ";"},
    ),
    Case(
        "hygon", "DCU",
        {"hami.io/node-dcu-register": _legacy("DCU", 2, 16384, "DCU-Z100")},
        {"hygon.com/dcunum": "8"},
        {"hygon.com/dcunum": "1", "hygon.com/dcumem": "8192", "hygon.com/dcucores": "30"},
        devices=2, locks=True, confirmed=True, fill=4,
        annotations={"hami.io/dcu-devices-allocated": "DCU-1,DCU,8192,30:;",
                     "hami.io/dcu-devices-to-allocate": ";"},
    ),
    Case(
        "amd", "AMD",
        {"hami.io/node-amd-register": _json([
            {"id": f"AMD-{i}", "index": i, "count": 4, "devmem": 65536, "devcore": 64, "type": "AMD-MI300X",
             "numa": 0, "health": True} for i in range(2)])},
        {"amd.com/gpu": "8"},
        {"amd.com/gpu": "1", "amd.com/gpumem": "4096", "amd.com/gpucores": "50"},
        devices=2, locks=True, confirmed=True, fill=4,
        # 50 % of 64 compute units; the entry carries the device's product type.
        annotations={"hami.io/amd-devices-allocated": "AMD-1,AMD-MI300X,4096,32:;",
                     "hami.io/amd-devices-to-allocate": ";"},
    ),
    Case(
        "iluvatar", "BI-V150",
        {"hami.io/node-BI-V150-register": _legacy("ILU", 2, 32768, "BI-V150")},
        {"iluvatar.ai/BI-V150-vgpu": "8"},
        # vMem in 256 MiB units: 64 = 16384 MiB.
        {"iluvatar.ai/BI-V150-vgpu": "1", "iluvatar.ai/BI-V150.vMem": "64",
         "iluvatar.ai/BI-V150.vCore": "50"},
        devices=2, locks=True, confirmed=True, fill=4,
        annotations={"hami.io/BI-V150-devices-allocated": "ILU-1,BI-V150,16384,50:;",
                     "hami.io/BI-V150-devices-to-allocate": ";"},
        webhook=_iluvatar_env,
    ),
    Case(
        "biren", "Biren",
        {"hami.io/node-biren-register": _json([
            {"id": f"BR-{i}", "index": i, "count": 1, "devmem": 65536, "type": "Biren", "health": True}
            for i in range(2)])},
        {"birentech.com/gpu": "2"},
        {"birentech.com/gpu": "1"},
        devices=2, locks=True, confirmed=True, fill=2,
        annotations={"hami.io/Biren-devices-allocated": "BR-1,Biren,0,0:;",
                     "hami.io/Biren-devices-to-allocate": ";"},
    ),
    Case(
        "vastai", "Vastai",
        {"hami.io/node-va-register": _json([
            {"id": f"VA-{i}", "index": i, "count": 1, "devmem": 32768, "devcore": 0, "type": "Vastai",
             "health": True} for i in range(2)])},
        {"vastaitech.com/va": "2"},
        {"vastaitech.com/va": "1"},
        devices=2, locks=True, confirmed=True, fill=2,
        annotations={"hami.io/Vastai-devices-allocated": "VA-1,Vastai,0,0:;",
                     "hami.io/Vastai-devices-to-allocate": ";"},
    ),
    Case(
        "metax", "Metax-SGPU",
        {"metax-tech.com/node-gpu-devices": json.dumps([
            {"uuid": f"MX-{i}", "bdf": f"0000:{i:02x}:00.0", "model": "C500", "totalDevCount": 16,
             "totalCompute": 100, "totalVRam": 65536, "numa": 0, "healthy": True, "qosPolicy": "best-effort",
             "linkZone": 0} for i in range(2)])},
        {"metax-tech.com/sgpu": "32"},
        # vmemory without a unit is GiB.
        {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "30", "metax-tech.com/vmemory": "16"},
        devices=2, locks=True, confirmed=True, fill=6,
        annotations={"hami.io/metax-sgpu-devices-allocated": "MX-1,Metax-SGPU,16384,30:;",
                     "hami.io/metax-sgpu-devices-to-allocate": ";",
                     "metax-tech.com/gpu-devices-allocated": '[[{"uuid":"MX-1","compute":30,"vRam":16384}]]',
                     "metax-tech.com/predicate-time": "{t}000000000",
                     "metax-tech.com/sgpu-qos-policy": "best-effort"},
        webhook=_metax_qos,
    ),
    Case(
        "kunlun", "XPU",
        {"hami.io/node-register-xpu": _json([
            {"id": f"xpu-{i}", "index": i, "count": 4, "devmem": 98304, "devcore": 100, "type": "XPU",
             "numa": i // 4, "health": True} for i in range(8)])},
        {"kunlunxin.com/vxpu": "32"},
        # Rounded up to 49152 MiB, half a card.
        {"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "30000"},
        devices=8, locks=True, confirmed=True, fill=16,
        annotations={"hami.io/xpu-devices-allocated": "xpu-0,XPU,49152,50:;",
                     "hami.io/xpu-devices-to-allocate": ";"},
    ),
    Case(
        "mthreads", "Mthreads",
        {},
        {"mthreads.com/vgpu": "4", "mthreads.com/sgpu-memory": "192", "mthreads.com/sgpu-core": "32"},
        # sgpu-memory in 512 MiB units: 32 = 16384 MiB.
        {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "32", "mthreads.com/sgpu-core": "4"},
        devices=2, locks=False, confirmed=False, fill=6,
        annotations={"hami.io/mthreads-vgpu-devices-allocated": "{node}-mthreads-1,Mthreads,16384,4:;",
                     "mthreads.com/gpu-index": "1", "mthreads.com/predicate-node": "{node}",
                     "mthreads.com/predicate-time": "{t}000000000"},
    ),
    Case(
        "awsneuron", "AWSNeuron",
        {},
        {"aws.amazon.com/neuron": "4", "aws.amazon.com/neuroncore": "8"},
        {"aws.amazon.com/neuron": "1"},
        devices=4, locks=False, confirmed=False, fill=4,
        labels={"node.kubernetes.io/instance-type": "inf2.48xlarge"},
        annotations={"hami.io/aws-neuron-devices-allocated": "{node}-AWSNeuron-3,AWSNeuron,0,3:;",
                     "AWS_NEURON_IDS": "3", "NEURON_ALLOCATED": "false", "NEURON_ALLOC_TIME": "{t}000000000",
                     "aws.amazon.com/predicate-node": "{node}"},
    ),
    Case(
        "enflame", "GCU",
        {},
        {"enflame.com/gcu": "2"},
        {"enflame.com/gcu": "1"},
        devices=2, locks=False, confirmed=True, fill=2,
        annotations={"hami.io/enflame-gcu-devices-allocated": "{node}-GCU-1,GCU,100,100:;",
                     "hami.io/enflame-gcu-devices-to-allocate": ";"},
    ),
    Case(
        "metaxgpu", "Metax-GPU",
        {"metax-tech.com/gpu.topology.losses": '{"1":0,"2":100}'},
        {"metax-tech.com/gpu": "2"},
        {"metax-tech.com/gpu": "1"},
        devices=2, locks=False, confirmed=True, fill=2,
        annotations={"hami.io/metax-gpu-devices-allocated": "{node}-metax-1,Metax-GPU,65536,100:;",
                     "hami.io/metax-gpu-devices-to-allocate": ";"},
    ),
    Case(
        "kunlunwhole", "kunlun",
        {},
        {"kunlunxin.com/xpu": "8"},
        {"kunlunxin.com/xpu": "2"},
        devices=8, locks=False, confirmed=False, fill=4,
        annotations={"hami.io/kunlun-allocated":
                         "{node}-kunlun-0,kunlun,98304,100:{node}-kunlun-1,kunlun,98304,100:;",
                     "BAIDU_COM_DEVICE_IDX": "0,1"},
    ),
    Case(
        "enflamedrs", "Enflame",
        {"enflame.com/gcu-drs-capacity": json.dumps({
            "devices": [{"index": str(i), "minor": str(i), "capacity": 6} for i in range(2)],
            "profiles": {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"}})},
        {"enflame.com/drs-gcu": "12"},
        {"enflame.com/drs-gcu": "3"},
        devices=2, locks=False, confirmed=False, fill=4,
        # 3 slices: profile 3g.20gb, half of a 6-slice card.
        annotations={"hami.io/enflame-vgpu-devices-allocated": "{node}-enflame-drs-1,Enflame,20480,50:;",
                     "assigned-containers":
                         '{"main":{"allocated":false,"request":3,"profileID":"1","profileName":"3g.20gb"}}',
                     "enflame.com/gcu-assigned": "false", "enflame.com/gcu-assigned-id": "1",
                     "enflame.com/gcu-assigned-index": "1", "enflame.com/gcu-assigned-minor": "1",
                     "enflame.com/gcu-assigned-time": "{t}000000000", "enflame.com/gcu-request-size": "3"},
    ),
    Case(
        "ascend", "Ascend910B3",
        {"hami.io/node-register-Ascend910B3": _json([
            {"id": f"Ascend910B3-{i}", "index": i, "count": 4, "devmem": 65536, "devcore": 20,
             "type": "Ascend910B3", "health": True} for i in range(4)])},
        {"huawei.com/Ascend910B3": "4"},
        # Rounded up to the vir05_1c_16g template.
        {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "16384"},
        devices=4, locks=True, confirmed=True, fill=16,
        annotations={"hami.io/Ascend910B3-devices-allocated": "Ascend910B3-3,Ascend910B3,16384,0:;",
                     "hami.io/Ascend910B3-devices-to-allocate": ";",
                     "huawei.com/Ascend910B3":
                         '[{"UUID":"Ascend910B3-3","temp":"vir05_1c_16g","memory":16384}]',
                     "predicate-time": "{t}"},
    ),
)


def _readable(value: object) -> str | None:
    return value.name if isinstance(value, Case) else None


def _vendors() -> Vendors:
    return build(parse_device_config(DEVICE_CONFIG.read_text(), str(DEVICE_CONFIG)), FLAGS)


def _node(case: Case, vendors: Vendors) -> tuple[Obj, Obj]:
    annotations = {**case.register, **_reported(case, vendors)}  # the plugin's answer (§3.4)
    labels = {"kubernetes.io/os": "linux", "kubernetes.io/hostname": case.node,
              "vgpu-scheduler.e2e/group": GROUP, **case.labels}
    node = {"apiVersion": "v1", "kind": "Node", "spec": {},
            "metadata": {"name": case.node, "labels": labels, "annotations": annotations}}
    resources = {**BASE, **case.resources}
    return node, {"status": {"capacity": resources, "allocatable": resources}}


def _reported(case: Case, vendors: Vendors) -> dict[str, str]:
    handshake = vendors[case.vendor].handshake_key
    return {handshake: "Reported " + datetime.now().strftime("%Y-%m-%d %H:%M:%S")} if handshake else {}


async def _registered(
    control_plane: ControlPlane, client: KubeClient, *, nodes: Mapping[str, tuple[Case, ...]],
    vendors: Vendors, metrics: str, want: int,
) -> None:
    """Wait until our server knows `want` devices, re-reporting each handshake of `nodes` (node ->
    its vendors) as the device plugins do every 30 s: the session's shared server stamps
    `Requesting_` on these nodes too, and a scheduler seeing a fresh `Requesting_` it did not write
    skips the node until the plugin reports again (HAMi's CheckHealth: healthy, no update)."""
    deadline = time.monotonic() + 120.0
    while (seen := await asyncio.to_thread(control_plane.registered_devices, metrics)) < want:
        assert time.monotonic() < deadline, f"our server registered {seen}/{want} devices"
        for node, node_cases in nodes.items():
            reported = {k: v for case in node_cases for k, v in _reported(case, vendors).items()}
            if reported:
                await client.patch_node(node, {"metadata": {"annotations": reported}})
        # Often: the session's server stamps `Requesting_` on these nodes at each of its passes
        # (15 s ticker, as ours); a report every 3 s was often overwritten when ours passed, and
        # this wait took most of the 120 s (CI once saw 32/46 at the deadline; now seconds).
        await asyncio.sleep(0.5)


def _pod(case: Case, name: str) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            # Our webhook sets schedulerName; the selector keeps each vendor's pods on its node.
            "nodeSelector": {"vgpu-scheduler.e2e/group": GROUP},
            "containers": [{
                "name": "main", "image": "registry.invalid/app:none",
                "resources": {"limits": dict(case.limits), "requests": {"cpu": "10m"}},
            }],
        },
    }


class LockWatch:
    """Node informer handler: every `hami.io/mutex.lock` value seen per node, in order."""

    def __init__(self) -> None:
        self.seen: dict[str, list[str]] = defaultdict(list)

    def on_add(self, obj: Obj) -> None:
        self._see(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._see(new)

    def on_delete(self, obj: Obj) -> None:
        pass

    def _see(self, node: Obj) -> None:
        value = (node["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)
        seen = self.seen[node["metadata"]["name"]]
        if value and (not seen or seen[-1] != value):
            seen.append(value)


class LockRecordingStandIn(DevicePluginStandIn):
    """The device-plugin stand-in, also recording the node lock as Allocate finds it."""

    def __init__(self, client: KubeClient, vendors: Vendors) -> None:
        super().__init__(client, namespace=NAMESPACE, vendors=vendors)
        self.client = client
        self.wait = PLUGIN_DELAY
        self.lock_at_allocate: dict[str, str | None] = {}

    async def _admit(self, pod: Obj) -> None:
        await asyncio.sleep(self.wait)
        name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
        lock = (await self.client.get_node(node))["metadata"].get("annotations", {}).get(keys.NODE_LOCK)
        self.lock_at_allocate[name] = lock
        await super()._admit(pod)


def _webhook_config(url: str, ca: bytes) -> Obj:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": f"vgpu-scheduler-{GROUP}"},
        "webhooks": [{
            "name": "vgpu.hami.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "timeoutSeconds": 10, "reinvocationPolicy": "Never",
            "clientConfig": {"url": f"{url}/webhook", "caBundle": base64.b64encode(ca).decode()},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {WEBHOOK_LABEL: WEBHOOK_VALUE}},
        }],
    }


async def _wait(probe: Callable[[], Any], what: str, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = await probe()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.25)


def _expected(case: Case, pod: Obj) -> dict[str, str]:
    ann = pod["metadata"]["annotations"]
    t = ann.get(keys.VGPU_TIME, "?")
    out = {k: v.replace("{node}", case.node).replace("{t}", t) for k, v in case.annotations.items()}
    out[keys.VGPU_NODE] = case.node
    out[keys.BIND_PHASE] = keys.BIND_PHASE_SUCCESS if case.confirmed else keys.BIND_PHASE_ALLOCATING
    return out


def _overcommits(pods: list[Obj], nodes: list[Obj], vendors: Vendors) -> list[str]:
    """Every device used beyond its count, memory or cores by the bound pods, over every vendor's
    allocated annotation, against the inventory each vendor reads from the node (as the server)."""
    devices: dict[str, tuple[str, Any]] = {}
    for node in nodes:
        for vendor in vendors:
            try:
                found = vendor.node_devices(node)
            except ValueError:
                continue
            for dev in found:
                devices[dev.id] = (node["metadata"]["name"], dev)
    used: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    problems = []
    for pod in pods:
        node = pod["spec"].get("nodeName")
        ann = pod["metadata"].get("annotations") or {}
        for vendor in vendors:
            value = ann.get(vendor.allocation_keys[1])
            if not node or not value:
                continue
            for container in decode_container_list(value):
                for dev in container:
                    owner = devices.get(dev.uuid)
                    if owner is None or owner[0] != node:
                        problems.append(f"{pod['metadata']['name']} on {node} holds {dev.uuid} of {owner}")
                        continue
                    u = used[dev.uuid]
                    u[0], u[1], u[2] = u[0] + 1, u[1] + dev.usedmem, u[2] + dev.usedcores
    for uuid, (count, mem, cores) in used.items():
        dev = devices[uuid][1]
        if count > dev.count or mem > dev.devmem or cores > dev.devcore:
            problems.append(f"{uuid} over-committed: {count} pods, {mem} MiB, {cores} cores of {dev}")
    return problems


@pytest.mark.parametrize("cases", [CASES], ids=["every-vendor"])
async def test_every_vendor_through_the_real_control_plane(
    control_plane: ControlPlane, client: KubeClient, cases: tuple[Case, ...]
) -> None:
    vendors = _vendors()
    for case in cases:
        node, status = _node(case, vendors)
        await create_node(client, node, status)
    url, metrics = control_plane.spawn_server("vgpu-scheduler-vendors", extra=[
        f"--scheduler-name={SCHEDULER}", f"--device-config-file={DEVICE_CONFIG}", *SERVER_FLAGS,
        f"--node-label-selector={group_selector(GROUP)}",
    ])
    control_plane.spawn_scheduler("kube-scheduler-vendors", profiles=(SCHEDULER,), server_url=url,
                                  managed_resources=sorted(vendors.managed_resources()))
    control_plane.apply(
        _webhook_config(url, control_plane.certs.ca_file.read_bytes()),
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": NAMESPACE, "labels": {WEBHOOK_LABEL: WEBHOOK_VALUE}}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "default", "namespace": NAMESPACE}},
    )
    locks = LockWatch()
    node_watch = Reflector(client, api.NODES, label_selector=group_selector(GROUP), handler=locks)
    node_watch.start()
    try:
        await node_watch.wait_synced(timeout=60)
        want = sum(c.devices for c in cases)
        await _registered(control_plane, client, nodes={c.node: (c,) for c in cases}, vendors=vendors,
                          metrics=metrics, want=want)
        async with LockRecordingStandIn(client, vendors) as plugin:
            await _first_wave(client, cases, plugin, locks)
            await _second_wave(client, cases, plugin, vendors)
            await _mixed_phase(control_plane, client, plugin=plugin, vendors=vendors, locks=locks,
                               metrics=metrics, registered=want)
        # The server answered each plugin's Reported handshake with its Requesting_ stamp.
        for case in cases:
            key = vendors[case.vendor].handshake_key
            if key:
                ann = (await client.get_node(case.node))["metadata"]["annotations"]
                assert ann[key].startswith("Requesting_"), (case.name, ann[key])
    finally:
        await node_watch.stop()
        control_plane.kill("kube-scheduler-vendors")
        control_plane.kill("vgpu-scheduler-vendors")
        with contextlib.suppress(ApiError):
            await client.delete(api.MUTATING_WEBHOOK_CONFIGURATIONS, f"vgpu-scheduler-{GROUP}")
        await delete_group(client, GROUP, NAMESPACE)


async def _first_wave(
    client: KubeClient, cases: tuple[Case, ...], plugin: LockRecordingStandIn, locks: LockWatch
) -> None:
    """One pod per vendor, all at once: placement, annotations, webhook, lock."""
    started = int(time.time())
    for case in cases:
        created = await client.create(api.PODS, _pod(case, f"{case.name}-0"))
        assert created["spec"]["schedulerName"] == SCHEDULER, case.name  # our webhook took it
        if case.webhook:
            case.webhook(created)

    async def settled(case: Case) -> Obj | None:
        pod = await client.get_pod(NAMESPACE, f"{case.name}-0")
        ann = pod["metadata"].get("annotations") or {}
        done = pod["spec"].get("nodeName") and f"{NAMESPACE}/{case.name}-0" in plugin.confirmed
        return pod if done and ann.get(keys.BIND_PHASE) else None

    failures: list[str] = []
    for case in cases:
        pod = await _wait(lambda c=case: settled(c), f"{case.name}-0 bound and allocated")
        ann = pod["metadata"]["annotations"]
        got = {k: v for k, v in ann.items() if k not in TIME_KEYS}
        if pod["spec"]["nodeName"] != case.node:
            failures.append(f"{case.name}: bound to {pod['spec']['nodeName']}, not {case.node}")
        if got != _expected(case, pod):
            failures.append(f"{case.name}: annotations {got} != {_expected(case, pod)}")
        for key in TIME_KEYS:
            if not started <= int(ann.get(key, "0")) <= int(time.time()):
                failures.append(f"{case.name}: {key}={ann.get(key)!r} not the decision's time")
        if pod["metadata"].get("labels", {}).get(keys.VGPU_NODE) != case.node:
            failures.append(f"{case.name}: no {keys.VGPU_NODE} label")
        held = plugin.lock_at_allocate.get(pod["metadata"]["name"])
        if case.locks:
            lock = parse_lock(held) if held else None
            if lock is None or (lock.namespace, lock.pod) != (NAMESPACE, f"{case.name}-0"):
                failures.append(f"{case.name}: lock at Allocate {held!r}, expected this pod's")
        elif held or locks.seen.get(case.node):
            failures.append(f"{case.name}: never locks, saw {held!r} / {locks.seen.get(case.node)}")
    assert not failures, "\n".join(failures)
    assert not plugin.errors, plugin.errors

    async def unlocked() -> bool:
        nodes, _ = await client.list_all(api.NODES, label_selector=group_selector(GROUP))
        return not any(keys.NODE_LOCK in (n["metadata"].get("annotations") or {}) for n in nodes)

    await _wait(unlocked, "every node lock released")
    for case in cases:
        if case.locks:
            assert any(parse_lock(v).pod == f"{case.name}-0" for v in locks.seen[case.node]), case.name


async def _second_wave(
    client: KubeClient, cases: tuple[Case, ...], plugin: LockRecordingStandIn, vendors: Vendors
) -> None:
    """Fill every vendor's node and ask one pod more: exactly `fill` pods per node, the extra pod
    pending with our reason, and no device over-committed."""
    plugin.wait = 0.0
    for case in cases:
        for i in range(1, case.fill + 1):
            await client.create(api.PODS, _pod(case, f"{case.name}-{i}"))

    async def decided() -> list[Obj] | None:
        pods = await client.list_pods(NAMESPACE)
        bound = [p for p in pods if p["spec"].get("nodeName")]
        allocated = all(f"{NAMESPACE}/{p['metadata']['name']}" in plugin.confirmed for p in bound)
        return pods if len(bound) >= sum(c.fill for c in cases) and allocated else None

    pods = await _wait(decided, "every node filled", timeout=180.0)
    await asyncio.sleep(3.0)  # time for an over-commit to show, were there one
    pods = await client.list_pods(NAMESPACE)
    nodes, _ = await client.list_all(api.NODES, label_selector=group_selector(GROUP))
    assert _overcommits(pods, nodes, vendors) == []
    per_node: dict[str, int] = defaultdict(int)
    for p in pods:
        if p["spec"].get("nodeName"):
            per_node[p["spec"]["nodeName"]] += 1
    assert dict(per_node) == {c.node: c.fill for c in cases}
    events, _ = await client.list_all(api.EVENTS_V1, NAMESPACE)
    waiting = {p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")}
    with_reason = {(e.get("regarding") or {}).get("name") for e in events
                   if e.get("reason") == "FailedScheduling" and e.get("note")}
    # One pod per vendor left over (kube-scheduler's order decides which).
    assert sorted(w.rsplit("-", 1)[0] for w in waiting) == sorted(c.name for c in cases)
    assert waiting <= with_reason, waiting - with_reason
    assert not plugin.errors, plugin.errors


MIXED = f"{GROUP}-mixed"
MIXED_CASES = ("nvidia", "hygon", "biren", "mthreads", "awsneuron")


def _mixed_node_objects(vendors: Vendors) -> tuple[Obj, Obj]:
    """One node with several vendors' plugins: NVIDIA, Hygon and Biren by annotation (devices
    renamed so that no id is shared with their own nodes), Mthreads and AWS Neuron by capacity."""
    cases = [c for c in CASES if c.name in MIXED_CASES]
    node, status = _node(cases[0], vendors)
    node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = MIXED
    for case in cases:
        for key, value in {**case.register, **_reported(case, vendors)}.items():
            renamed = value.replace("GPU-e2ev-", "GPU-mix-").replace("DCU-", "MIX-DCU-")
            node["metadata"]["annotations"][key] = renamed.replace("BR-", "MIX-BR-")
        node["metadata"]["labels"].update(case.labels)
        for part in ("capacity", "allocatable"):
            status["status"][part].update(case.resources)
    return node, status


def _mixed_pod(name: str, *containers: Obj, init: tuple[Obj, ...] = ()) -> Obj:
    pod = _pod(CASES[0], name)
    pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] = MIXED
    pod["spec"]["containers"] = list(containers)
    if init:
        pod["spec"]["initContainers"] = list(init)
    return pod


def _ctr(name: str, limits: Mapping[str, str]) -> Obj:
    return {"name": name, "image": "registry.invalid/app:none", "resources": {"limits": dict(limits)}}


async def _mixed_phase(
    control_plane: ControlPlane, client: KubeClient, *, plugin: LockRecordingStandIn, vendors: Vendors,
    locks: LockWatch, metrics: str, registered: int,
) -> None:
    """A node with five vendors: (1) while another pod holds its lock, pods of vendors that never
    lock are bound at once (HAMi binds them: no lock to contend for) and a locking pod waits;
    (2) one pod asking all five (Biren in an init container) gets one allocation per vendor at its
    containers' positions, takes the node lock once, and every to-allocate entry is consumed."""
    pods = await client.list_pods(NAMESPACE)
    for p in pods:  # the second wave's leftovers would take the new node's room
        if not p["spec"].get("nodeName"):
            await client.delete(api.PODS, p["metadata"]["name"], NAMESPACE, grace_period_seconds=0)
    await create_node(client, *_mixed_node_objects(vendors))
    mixed = tuple(c for c in CASES if c.name in MIXED_CASES)
    await _registered(control_plane, client, nodes={MIXED: mixed}, vendors=vendors, metrics=metrics,
                      want=registered + sum(c.devices for c in mixed))
    by_name = {c.name: c for c in CASES}

    # (1) The node locked in the name of a live pod that is never scheduled.
    holder = _mixed_pod("holder", _ctr("main", by_name["nvidia"].limits))
    holder["spec"]["nodeSelector"]["kubernetes.io/hostname"] = "nowhere"
    await client.create(api.PODS, holder)
    value = format_lock(datetime.now().astimezone(), NAMESPACE, "holder")
    await client.patch_node(MIXED, {"metadata": {"annotations": {keys.NODE_LOCK: value}}})
    for name in ("mthreads", "awsneuron"):
        await client.create(api.PODS, _mixed_pod(f"mixed-{name}", _ctr("main", by_name[name].limits)))
    await client.create(api.PODS, _mixed_pod("mixed-hygon", _ctr("main", by_name["hygon"].limits)))

    async def bound(name: str) -> Obj | None:
        pod = await client.get_pod(NAMESPACE, name)
        return pod if pod["spec"].get("nodeName") else None

    for name in ("mixed-mthreads", "mixed-awsneuron"):
        pod = await _wait(lambda n=name: bound(n), f"{name} bound beside a live lock", timeout=30.0)
        assert pod["spec"]["nodeName"] == MIXED
    assert not (await client.get_pod(NAMESPACE, "mixed-hygon"))["spec"].get("nodeName")  # it must lock
    await client.patch_node(MIXED, {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
    await client.delete(api.PODS, "holder", NAMESPACE, grace_period_seconds=0)
    await _wait(lambda: bound("mixed-hygon"), "mixed-hygon bound once the lock is gone")

    # (2) One pod, five vendors.
    limits = {name: by_name[name].limits for name in MIXED_CASES}
    multi = _mixed_pod(
        "mixed-all", *(_ctr(name, limits[name]) for name in ("nvidia", "hygon", "mthreads", "awsneuron")),
        init=(_ctr("biren", limits["biren"]),),
    )
    await client.create(api.PODS, multi)

    async def allocated() -> Obj | None:
        pod = await bound("mixed-all")
        return pod if pod and f"{NAMESPACE}/mixed-all" in plugin.confirmed else None

    pod = await _wait(allocated, "mixed-all bound and allocated")
    ann = pod["metadata"]["annotations"]
    allocations = {vendor.key: ann.get(vendor.allocation_keys[1], "") for vendor in vendors
                   if ann.get(vendor.allocation_keys[1])}
    # Position 0 is the init container (Biren), then nvidia, hygon, mthreads, awsneuron.
    positions = {"Biren": 0, "NVIDIA": 1, "DCU": 2, "Mthreads": 3, "AWSNeuron": 4}
    assert set(allocations) == set(positions), allocations
    for key, value in allocations.items():
        entries = value.split(";")
        assert len(entries) == 6, (key, value)  # five containers, then the trailing ";"
        assert [bool(e) for e in entries[:5]] == [i == positions[key] for i in range(5)], (key, value)
    for vendor in vendors:
        to_allocate = vendor.allocation_keys[0]
        if to_allocate in ann:
            assert set(ann[to_allocate]) <= {";"}, (to_allocate, ann[to_allocate])  # consumed
    assert ann[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
    held = plugin.lock_at_allocate["mixed-all"]
    assert held and parse_lock(held).pod == "mixed-all"
    assert [parse_lock(v).pod for v in locks.seen[MIXED]].count("mixed-all") == 1  # taken once

    async def unlocked() -> bool:
        node = await client.get_node(MIXED)
        return keys.NODE_LOCK not in (node["metadata"].get("annotations") or {})

    await _wait(unlocked, "the mixed node's lock released")
    nodes, _ = await client.list_all(api.NODES, label_selector=group_selector(GROUP))
    assert _overcommits(await client.list_pods(NAMESPACE), nodes, vendors) == []
    assert not plugin.errors, plugin.errors
