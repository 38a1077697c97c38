"""/metrics over real HTTP (§8.4), parsed with prometheus_client's own parser."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests import builders
from tests.builders import assigned_annotations, container, device, gpu_quota, grant, pod_allocation
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import DeviceInfo, MigPlacement, MigProfile
from vgpu_scheduler.server.metrics import (
    CONTENT_TYPE,
    ContainerRow,
    DeviceRow,
    MetricsSnapshot,
    SchedulerCollector,
    StateSnapshot,
    families,
    go_float,
    make_metrics_app,
    metrics_registry,
    normalized_cores,
    snapshot_rows,
)
from vgpu_scheduler.version import build_info_labels
from vgpu_scheduler.wire import keys

Obj = dict[str, Any]
MIB = 1048576
Series = dict[tuple[tuple[str, str], ...], float]

NEW_DEVICE_FAMILIES = {
    "hami_gpu_memory_limit_bytes": ("node", "device_uuid", "device_index", "device_type"),
    "hami_gpu_core_limit_ratio": ("node", "device_uuid", "device_index", "device_type"),
    "hami_gpu_memory_allocated_bytes": ("node", "device_uuid", "device_index", "device_cores", "device_type"),
    "hami_gpu_shared_count": ("node", "device_uuid", "device_index", "device_type"),
    "hami_gpu_core_allocated_ratio": ("node", "device_uuid", "device_index", "device_type"),
    "hami_node_gpu_overview": (
        "node",
        "device_uuid",
        "device_index",
        "device_cores",
        "device_memory_limit",
        "device_type",
    ),
    "hami_node_gpu_memory_allocated_ratio": ("node", "device_uuid", "device_index", "device_type"),
}
OTHER_FAMILIES = {
    "hami_node_gpu_mig_instance_info": (
        "node",
        "device_uuid",
        "device_index",
        "mig_uuid",
        "profile",
        "gpu_instance_id",
        "compute_instance_id",
        "placement_start",
        "placement_size",
    ),
    "hami_resource_quota_used": ("namespace", "quota_name", "limit"),
    "hami_resource_quota_limit": ("namespace", "quota_name"),
    "hami_vgpu_memory_allocated_bytes": ("namespace", "node", "pod", "container_index", "device_uuid"),
    "hami_vgpu_core_allocated_ratio": ("namespace", "node", "pod", "container_index", "device_uuid"),
}
LEGACY_FAMILIES = {
    "GPUDeviceMemoryLimit": ("nodeid", "deviceuuid", "deviceidx", "devicetype"),
    "GPUDeviceCoreLimit": ("nodeid", "deviceuuid", "deviceidx", "devicetype"),
    "GPUDeviceMemoryAllocated": ("nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype"),
    "GPUDeviceSharedNum": ("nodeid", "deviceuuid", "deviceidx", "devicetype"),
    "GPUDeviceCoreAllocated": ("nodeid", "deviceuuid", "deviceidx", "devicetype"),
    "nodeGPUOverview": (
        "nodeid",
        "deviceuuid",
        "deviceidx",
        "devicecores",
        "devicememorylimit",
        "devicetype",
    ),
    "nodeGPUMemoryPercentage": ("nodeid", "deviceuuid", "deviceidx"),
    "nodeGPUMigInstance": ("nodeid", "deviceuuid", "deviceidx", "migname"),
    "QuotaUsed": ("quotanamespace", "quotaName", "limit"),
    "vGPUMemoryAllocated": ("podnamespace", "nodename", "podname", "containeridx", "deviceuuid"),
    "vGPUCoreAllocated": ("podnamespace", "nodename", "podname", "containeridx", "deviceuuid"),
}


def gpu(uuid: str, index: int, mode: str = "hami-core", **kw: Any) -> DeviceInfo:
    return device(uuid, index=index, devmem=8192, mode=mode, **kw)


def pod(name: str, node: str, allocated: str, namespace: str = "team", **extra: str) -> Obj:
    """A running pod placed on `node` with `allocated` (`extra`: further annotations)."""
    return builders.pod(name, namespace=namespace, uid=f"uid-{name}",
                        annotations=assigned_annotations(node, allocated, **extra),
                        containers=[container("c")], phase="Running")


def mig_json(*, realized: bool) -> str:
    item: Obj = {
        "containerIndex": 0,
        "deviceIndex": 0,
        "gpuUUID": "GPU-M",
        "profile": "1g.5gb",
        "placement": {"start": 6, "size": 1},
    }
    if realized:
        item.update(migUUID="MIG-7f3a", gpuInstanceID=13, computeInstanceID=0)
    return json.dumps([item])


def make_state() -> SchedulerState:
    state = SchedulerState(build())
    state.set_node_devices("n1", [gpu("GPU-0", 0), gpu("GPU-1", 1)])
    profile = MigProfile("1g.5gb", 4864, 15, 1, (MigPlacement(6, 1), MigPlacement(5, 1)))
    state.set_node_devices("mig-1", [gpu("GPU-M", 3, mode="mig", mig_profiles=(profile,))])
    state.on_pod(pod("p1", "n1", "GPU-0,NVIDIA,1000,30:;"))
    state.on_pod(pod("p2", "n1", "GPU-0,NVIDIA,2000,20:GPU-1,NVIDIA,500,0:;", namespace="free"))
    state.on_pod(
        pod("m1", "mig-1", "GPU-M,NVIDIA,4864,15:;", **{keys.VGPU_MIG_ALLOCATIONS: mig_json(realized=True)})
    )
    state.on_pod(
        pod("m2", "mig-1", "GPU-M,NVIDIA,4864,15:;", **{keys.VGPU_MIG_ALLOCATIONS: mig_json(realized=False)})
    )
    state.on_quota(gpu_quota(mem=20000))
    return state


@pytest.fixture
async def serve_metrics() -> AsyncIterator[Callable[[CollectorRegistry], Any]]:
    runners: list[web.AppRunner] = []

    async def start(registry: CollectorRegistry) -> str:
        runner = web.AppRunner(make_metrics_app(registry))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        host, port = runner.addresses[0][:2]
        return f"http://{host}:{port}"

    yield start
    for r in runners:
        await r.cleanup()


async def scrape(url: str, **headers: str) -> tuple[aiohttp.ClientResponse, str]:
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics", headers=headers) as resp:
        return resp, await resp.text()


def parse(text: str) -> dict[str, Series]:
    out: dict[str, Series] = {}
    for fam in text_string_to_metric_families(text):
        assert fam.type == "gauge", fam.name
        series = out.setdefault(fam.name, {})
        for s in fam.samples:
            series[tuple(sorted(s.labels.items()))] = s.value
    return out


def lbl(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({**labels, "zone": "vGPU"}.items()))


async def test_scrape_every_series(serve_metrics: Any) -> None:
    url = await serve_metrics(metrics_registry(make_state(), build_info={"version": "v9", "revision": "r"}))
    resp, text = await scrape(url)
    assert resp.status == 200
    assert resp.headers["Content-Type"] == CONTENT_TYPE
    got = parse(text)
    assert set(got) == {"hami_build_info", *NEW_DEVICE_FAMILIES, *OTHER_FAMILIES}

    # Label names per family, zone everywhere but hami_build_info.
    for name, labels in {**NEW_DEVICE_FAMILIES, **OTHER_FAMILIES}.items():
        for key in got[name]:
            assert [k for k, _ in key] == sorted([*labels, "zone"]), name
    assert got["hami_build_info"] == {(("revision", "r"), ("version", "v9")): 1.0}

    a100 = {"device_type": "NVIDIA-A100"}
    gpu0 = lbl(node="n1", device_uuid="GPU-0", device_index="0", **a100)
    gpu1 = lbl(node="n1", device_uuid="GPU-1", device_index="1", **a100)
    gpum = lbl(node="mig-1", device_uuid="GPU-M", device_index="3", **a100)
    assert got["hami_gpu_memory_limit_bytes"] == {gpu0: 8192 * MIB, gpu1: 8192 * MIB, gpum: 8192 * MIB}
    assert got["hami_gpu_core_limit_ratio"] == {gpu0: 100, gpu1: 100, gpum: 100}
    assert got["hami_gpu_shared_count"] == {gpu0: 2, gpu1: 1, gpum: 2}
    assert got["hami_gpu_core_allocated_ratio"] == {gpu0: 50, gpu1: 0, gpum: 30}
    assert got["hami_node_gpu_memory_allocated_ratio"] == {
        gpu0: 3000 / 8192,
        gpu1: 500 / 8192,
        gpum: 9728 / 8192,
    }
    assert (
        got["hami_gpu_memory_allocated_bytes"][
            lbl(node="n1", device_uuid="GPU-0", device_index="0", device_cores="100", **a100)
        ]
        == 3000 * MIB
    )
    assert (
        got["hami_node_gpu_overview"][
            lbl(
                node="n1",
                device_uuid="GPU-1",
                device_index="1",
                device_cores="100",
                device_memory_limit="8192",
                **a100,
            )
        ]
        == 500 * MIB
    )

    # Only the realized MIG instance.
    assert got["hami_node_gpu_mig_instance_info"] == {
        lbl(
            node="mig-1",
            device_uuid="GPU-M",
            device_index="3",
            mig_uuid="MIG-7f3a",
            profile="1g.5gb",
            gpu_instance_id="13",
            compute_instance_id="0",
            placement_start="6",
            placement_size="1",
        ): 1.0
    }

    # Quota: a limit only where a ResourceQuota sets one; "0" in the used series otherwise.
    assert got["hami_resource_quota_used"] == {
        lbl(namespace="team", quota_name="nvidia.com/gpumem", limit="20000"): 1000 + 2 * 4864,
        lbl(namespace="team", quota_name="nvidia.com/gpucores", limit="0"): 30 + 2 * 15,
        lbl(namespace="free", quota_name="nvidia.com/gpumem", limit="0"): 2500,
        lbl(namespace="free", quota_name="nvidia.com/gpucores", limit="0"): 20,
    }
    assert got["hami_resource_quota_limit"] == {lbl(namespace="team", quota_name="nvidia.com/gpumem"): 20000}

    # Container level, from the collapsed allocations (container_index 0).
    def ctr(ns: str, node: str, name: str, uuid: str) -> tuple[tuple[str, str], ...]:
        return lbl(namespace=ns, node=node, pod=name, container_index="0", device_uuid=uuid)

    assert got["hami_vgpu_memory_allocated_bytes"] == {
        ctr("team", "n1", "p1", "GPU-0"): 1000 * MIB,
        ctr("free", "n1", "p2", "GPU-0"): 2000 * MIB,
        ctr("free", "n1", "p2", "GPU-1"): 500 * MIB,
        ctr("team", "mig-1", "m1", "GPU-M"): 4864 * MIB,
        ctr("team", "mig-1", "m2", "GPU-M"): 4864 * MIB,
    }
    assert got["hami_vgpu_core_allocated_ratio"][ctr("team", "n1", "p1", "GPU-0")] == 30


async def test_text_is_ordered_like_client_golang(serve_metrics: Any) -> None:
    url = await serve_metrics(metrics_registry(make_state(), build_info={"version": "v", "revision": "r"}))
    _, text = await scrape(url)
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert names == sorted(names)
    lines = [line for line in text.splitlines() if line.startswith("hami_gpu_shared_count{")]
    # Series sort by their label values taken in label-name order (device_index first here).
    assert lines == [
        'hami_gpu_shared_count{device_index="0",device_type="NVIDIA-A100",device_uuid="GPU-0",node="n1",'
        'zone="vGPU"} 2',
        'hami_gpu_shared_count{device_index="1",device_type="NVIDIA-A100",device_uuid="GPU-1",node="n1",'
        'zone="vGPU"} 1',
        'hami_gpu_shared_count{device_index="3",device_type="NVIDIA-A100",device_uuid="GPU-M",node="mig-1",'
        'zone="vGPU"} 2',
    ]
    assert (
        'hami_gpu_memory_limit_bytes{device_index="0",device_type="NVIDIA-A100",device_uuid="GPU-0",'
        'node="n1",zone="vGPU"} 8.589934592e+09' in text.splitlines()
    )


async def test_legacy_names(serve_metrics: Any) -> None:
    url = await serve_metrics(metrics_registry(make_state(), legacy=True))
    _, text = await scrape(url)
    got = parse(text)
    assert set(LEGACY_FAMILIES) <= set(got)
    for name, labels in LEGACY_FAMILIES.items():
        for key in got[name]:
            assert [k for k, _ in key] == sorted([*labels, "zone"]), name
    assert got["nodeGPUMigInstance"] == {
        lbl(nodeid="mig-1", deviceuuid="GPU-M", deviceidx="3", migname="1g.5gb-13"): 1.0
    }
    assert (
        got["GPUDeviceCoreAllocated"][
            lbl(nodeid="n1", deviceuuid="GPU-0", deviceidx="0", devicetype="NVIDIA-A100")
        ]
        == 50
    )
    assert got["QuotaUsed"][lbl(quotanamespace="team", quotaName="nvidia.com/gpumem", limit="20000")] == 10728
    assert (
        got["vGPUMemoryAllocated"][
            lbl(podnamespace="team", nodename="n1", podname="p1", containeridx="0", deviceuuid="GPU-0")
        ]
        == 1000 * MIB
    )
    # The new names are still there.
    assert got["hami_gpu_shared_count"] == parse((await scrape(url))[1])["hami_gpu_shared_count"]


async def test_default_build_info_and_empty_state(serve_metrics: Any) -> None:
    url = await serve_metrics(metrics_registry(SchedulerState()))
    _, text = await scrape(url)
    got = parse(text)
    assert set(got) == {"hami_build_info"}
    [(key, value)] = got["hami_build_info"].items()
    assert dict(key) == build_info_labels() and value == 1.0
    assert set(dict(key)) == {"version", "revision", "build_date", "go_version", "compiler", "platform"}


async def test_gzip_methods_and_paths(serve_metrics: Any) -> None:
    url = await serve_metrics(metrics_registry(make_state()))
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        async with session.get(url + "/metrics", headers={"Accept-Encoding": "gzip"}) as resp:
            assert resp.headers["Content-Encoding"] == "gzip"
            assert b"hami_gpu_shared_count" in gzip.decompress(await resp.read())
        async with session.post(url + "/metrics") as resp:
            assert resp.status == 200  # promhttp serves every method
        async with session.get(url + "/healthz") as resp:
            assert resp.status == 404


async def test_collector_failure_is_a_500(serve_metrics: Any) -> None:
    class Broken(SchedulerCollector):
        def collect(self) -> Any:
            raise RuntimeError("boom")

    registry = CollectorRegistry()
    registry.register(Broken(SchedulerState()))
    url = await serve_metrics(registry)
    resp, text = await scrape(url)
    assert resp.status == 500 and "boom" in text


async def test_state_is_read_on_the_loop_thread() -> None:
    state = make_state()
    loop_thread = threading.get_ident()
    readers: list[int] = []
    pods = state.pods

    def tracking_pods() -> Any:
        readers.append(threading.get_ident())
        return pods()

    state.pods = tracking_pods  # type: ignore[method-assign]
    collector = SchedulerCollector(state)
    fams = await asyncio.to_thread(lambda: list(collector.collect()))
    assert readers == [loop_thread]
    assert "hami_gpu_shared_count" in {f.name for f in fams}
    list(collector.collect())  # on the loop thread: read directly
    assert readers == [loop_thread, loop_thread]


def test_amd_cores_are_normalized() -> None:
    snapshot = MetricsSnapshot(
        devices=(DeviceRow("a1", "AMD-0", 0, "AMD-MI300X", 8192, 200, 1, 1024, 50, True),),
        containers=(ContainerRow("ns", "a1", "p", 0, "AMD-0", 1024, 50, 200, True),),
    )
    got = {
        f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples}
        for f in families(snapshot, True)
    }
    dev = lbl(node="a1", device_uuid="AMD-0", device_index="0", device_type="AMD-MI300X")
    legacy_dev = lbl(nodeid="a1", deviceuuid="AMD-0", deviceidx="0", devicetype="AMD-MI300X")
    ctr = lbl(namespace="ns", node="a1", pod="p", container_index="0", device_uuid="AMD-0")
    legacy_ctr = lbl(podnamespace="ns", nodename="a1", podname="p", containeridx="0", deviceuuid="AMD-0")
    assert got["hami_gpu_core_limit_ratio"] == {dev: 100}
    assert got["hami_gpu_core_allocated_ratio"] == {dev: 25}
    assert got["hami_vgpu_core_allocated_ratio"] == {ctr: 25}
    assert got["GPUDeviceCoreLimit"] == {legacy_dev: 200}  # legacy: raw
    assert got["GPUDeviceCoreAllocated"] == {legacy_dev: 50}
    assert got["vGPUCoreAllocated"] == {legacy_ctr: 50}


@pytest.mark.parametrize(
    ("allocated", "total", "expected"), [(50, 200, 25), (1, 300, 1), (0, 100, 0), (5, 0, 0)]
)
def test_normalized_cores(allocated: int, total: int, expected: float) -> None:
    assert normalized_cores(allocated, total) == expected


def test_duplicate_series_are_emitted_once_and_zero_memory_has_no_ratio() -> None:
    row = DeviceRow("n", "GPU-0", 0, "NVIDIA-T4", 0, 100, 1, 0, 0, False)
    got = {f.name: f.samples for f in families(MetricsSnapshot(devices=(row, row)))}
    assert len(got["hami_gpu_shared_count"]) == 1
    assert "hami_node_gpu_memory_allocated_ratio" not in got


# HELP text of every family, as HAMi's collector declares it (dashboards and diffs see these).
HELP_TEXTS = {
    "hami_build_info": "hami build metadata exposed as labels with a constant value of 1.",
    "hami_gpu_memory_limit_bytes": "Device memory limit for a certain GPU",
    "hami_gpu_core_limit_ratio": "Device core limit for a certain GPU",
    "hami_gpu_memory_allocated_bytes": "Device memory allocated for a certain GPU",
    "hami_gpu_shared_count": "Number of containers sharing this GPU",
    "hami_gpu_core_allocated_ratio": "Device core allocated for a certain GPU",
    "hami_node_gpu_overview": "GPU overview on a certain node",
    "hami_node_gpu_memory_allocated_ratio": "GPU memory allocated ratio on a certain GPU (0-1)",
    "hami_node_gpu_mig_instance_info": "Realized MIG instance identity and scheduler placement",
    "hami_resource_quota_used": "resourcequota usage for a certain device",
    "hami_resource_quota_limit": "resourcequota limit for a certain device",
    "hami_vgpu_memory_allocated_bytes": "vGPU memory allocated from a container",
    "hami_vgpu_core_allocated_ratio": "vGPU core allocated from a container",
    "GPUDeviceMemoryLimit": "Device memory limit for a certain GPU",
    "GPUDeviceCoreLimit": "Device memory core limit for a certain GPU",
    "GPUDeviceMemoryAllocated": "Device memory allocated for a certain GPU",
    "GPUDeviceSharedNum": "Number of containers sharing this GPU",
    "GPUDeviceCoreAllocated": "Device core allocated for a certain GPU",
    "nodeGPUOverview": "GPU overview on a certain node",
    "nodeGPUMemoryPercentage": "GPU Memory Allocated Percentage on a certain GPU",
    "nodeGPUMigInstance": "GPU Sharing mode. 0 for hami-core, 1 for mig, 2 for mps",
    "QuotaUsed": "resourcequota usage for a certain device",
    "vGPUMemoryAllocated": "vGPU memory allocated from a container",
    "vGPUCoreAllocated": "vGPU core allocated from a container",
}


async def test_help_texts(serve_metrics: Any) -> None:
    url = await serve_metrics(metrics_registry(make_state(), legacy=True))
    _, text = await scrape(url)
    helps = dict(line.split(" ", 3)[2:] for line in text.splitlines() if line.startswith("# HELP"))
    assert helps == HELP_TEXTS


def _amd_rows(devcore: int, node_of_device: str = "a1") -> dict[str, Series]:
    # HAMi's regression case (#2518): a 50% request on a 64-CU AMD GPU is stored as 32 CUs.
    dev = device("AMD-1", count=1, devmem=192000, devcore=devcore, type="AMDGPU")
    amd = grant("AMD-1", usedmem=96000, usedcores=32, type="AMDGPU")
    alloc = pod_allocation("u", "a1", [amd], namespace="default", name="amd-pod", vendor="AMDGPU")
    raw = StateSnapshot(nodes=((node_of_device, ((dev, 1, 96000, 32),)),), pods=(alloc,))
    return {
        f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples}
        for f in families(snapshot_rows(raw), legacy=True)
    }


@pytest.mark.parametrize(
    ("devcore", "node_of_device", "limit", "allocated", "container"),
    [
        (64, "a1", 100, 50, 50),  # normalized by the device's capacity (HAMi's expected values)
        (64, "elsewhere", 100, 50, 50),  # the device is found by UUID on whichever node has it
        (0, "a1", 0, 32, 32),  # unknown capacity: raw values, as HAMi's normalizeAMDCoreMetrics
    ],
)
def test_amd_container_cores_follow_the_device_type(
    devcore: int, node_of_device: str, limit: float, allocated: float, container: float
) -> None:
    got = _amd_rows(devcore, node_of_device)
    [core_limit] = got["hami_gpu_core_limit_ratio"].values()
    [core_allocated] = got["hami_gpu_core_allocated_ratio"].values()
    [vgpu_core] = got["hami_vgpu_core_allocated_ratio"].values()
    [legacy_vgpu_core] = got["vGPUCoreAllocated"].values()
    assert (core_limit, core_allocated, vgpu_core, legacy_vgpu_core) == (limit, allocated, container, 32)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (2.0, "2"),
        (0.0, "0"),
        (1.0, "1"),
        (0.25, "0.25"),
        (30.0, "30"),
        (123456.0, "123456"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (8192 * MIB, "8.589934592e+09"),
        (1000 * MIB, "1.048576e+09"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (1 / 3, "0.3333333333333333"),
        (-2.5, "-2.5"),
        (float("inf"), "+Inf"),
        (float("nan"), "NaN"),
    ],
)
def test_values_are_written_like_client_golang(value: float, text: str) -> None:
    assert go_float(value) == text


async def test_exposition_lines_are_client_golangs(serve_metrics: Any) -> None:
    url = await serve_metrics(metrics_registry(make_state(), build_info={"version": "v", "revision": "r"}))
    _, text = await scrape(url)
    lines = text.splitlines()
    assert lines[:3] == [
        "# HELP hami_build_info hami build metadata exposed as labels with a constant value of 1.",
        "# TYPE hami_build_info gauge",
        'hami_build_info{revision="r",version="v"} 1',
    ]
    assert (
        'hami_gpu_shared_count{device_index="0",device_type="NVIDIA-A100",device_uuid="GPU-0",node="n1",'
        'zone="vGPU"} 2' in lines
    )
    assert text.endswith("\n") and not text.endswith("\n\n")
