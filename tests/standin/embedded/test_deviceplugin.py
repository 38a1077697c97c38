import asyncio
import contextlib
from typing import Any

import pytest

from tests.builders import container, node, pod
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.devices.nvidia import NvidiaVendor
from vgpu_scheduler.standin.embedded.deviceplugin import (
    AllocateError,
    SimDevicePlugin,
    attach_device_plugin,
    consume,
    fully_consumed,
    requested_counts,
)
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire import keys

A = "GPU-a,NVIDIA,1000,30:"
B = "GPU-b,NVIDIA,1000,30:"


@pytest.mark.parametrize(
    ("value", "counts", "expected"),
    [
        pytest.param(f"{A};", [1], ";", id="one container one GPU"),
        pytest.param(f"{A}{B};", [2], ";", id="one container two GPUs"),
        pytest.param(f"{A};{B};", [1, 1], ";;", id="two containers"),
        # first container without GPU: first NON-EMPTY entry is popped
        pytest.param(f";{A};", [0, 1], ";;", id="first container without GPU"),
        # vendor-key padding after the last GPU container
        pytest.param(f"{A};;", [1, 0], ";;", id="vendor padding after the last"),
        # only the first call so far
        pytest.param(f"{A};{B};", [1], f";{B};", id="first call only"),
    ],
)
def test_consume_pops_first_non_empty_entry(value: str, counts: list[int], expected: str) -> None:
    assert consume(value, counts) == expected


@pytest.mark.parametrize(
    ("value", "counts"),
    [
        pytest.param(f"{A};", [2], id="asks more than the entry"),
        pytest.param(f"{A}{B};", [1, 1], id="entry holds two"),
        pytest.param(";", [1], id="no entry"),
    ],
)
def test_consume_device_number_not_matched(value: str, counts: list[int]) -> None:
    with pytest.raises(AllocateError, match="device number not matched"):
        consume(value, counts)


def test_fully_consumed() -> None:
    assert fully_consumed(";;")
    assert not fully_consumed(f";{A};")


def test_requested_counts_init_first() -> None:
    pod = {
        "spec": {
            "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            "containers": [
                {"name": "cpu"},
                {"name": "g", "resources": {"limits": {"nvidia.com/gpu": 2}}},
            ],
        }
    }
    assert requested_counts(pod, NvidiaVendor()) == [1, 0, 2]


BIND_TIME = "1767225600"  # 2026-01-01T00:00:00Z, when the scheduler took the lock below


def _bound_pod(
    cluster: MemoryCluster, to_allocate: str, gpus: int, *, stamped: bool = False
) -> dict[str, Any]:
    """Pod p bound to n1, whose lock it holds; `stamped`: with the bind-time the lock was taken at."""
    lock = {keys.NODE_LOCK: "2026-01-01T00:00:00Z,default,p"}
    cluster.create("nodes", node("n1", annotations=lock))
    annotations = {keys.VGPU_TO_ALLOCATE: to_allocate, keys.BIND_PHASE: "allocating"}
    if stamped:
        annotations[keys.BIND_TIME] = BIND_TIME
    ctr = container("c", image="x", limits={"nvidia.com/gpu": gpus})
    cluster.create("pods", pod("p", annotations=annotations, containers=[ctr]))
    cluster.bind("default", "p", "n1")
    return cluster.get("pods", "p", "default")


async def test_admit_success_releases_lock_and_runs() -> None:
    cluster = MemoryCluster(seed=1)
    pod = _bound_pod(cluster, f"{A};", 1)
    plugin = SimDevicePlugin(KubeClient(MemoryTransport(cluster)))
    result = await plugin.admit(pod)
    assert result.phase == "Running"
    after = cluster.get("pods", "p", "default")
    assert after["metadata"]["annotations"][keys.BIND_PHASE] == "success"
    assert after["metadata"]["annotations"][keys.VGPU_TO_ALLOCATE] == ";"
    assert after["status"]["phase"] == "Running"
    assert keys.NODE_LOCK not in (cluster.get("nodes", "n1")["metadata"].get("annotations") or {})
    await plugin.finish("default", "p")
    assert cluster.get("pods", "p", "default")["status"]["phase"] == "Succeeded"


async def test_admit_mismatch_fails_pod_and_still_releases_lock() -> None:
    cluster = MemoryCluster(seed=1)
    pod = _bound_pod(cluster, f"{A};", 2)
    result = await SimDevicePlugin(KubeClient(MemoryTransport(cluster))).admit(pod)
    assert result.phase == "Failed" and "device number not matched" in result.error
    after = cluster.get("pods", "p", "default")
    assert after["metadata"]["annotations"][keys.BIND_PHASE] == "failed"
    assert after["status"]["phase"] == "Failed"
    assert keys.NODE_LOCK not in (cluster.get("nodes", "n1")["metadata"].get("annotations") or {})


@pytest.mark.parametrize("stamped", [False, True], ids=["no bind-time", "bind-time"])
async def test_admit_keeps_another_pods_lock(stamped: bool) -> None:
    cluster = MemoryCluster(seed=1)
    pod = _bound_pod(cluster, f"{A};", 1, stamped=stamped)
    other = {keys.NODE_LOCK: "2026-01-01T00:00:00Z,default,other"}
    cluster.patch("nodes", "n1", {"metadata": {"annotations": other}})
    await SimDevicePlugin(KubeClient(MemoryTransport(cluster))).admit(pod)
    assert cluster.get("nodes", "n1")["metadata"]["annotations"][keys.NODE_LOCK].endswith(",default,other")


async def test_admit_releases_the_lock_its_bind_time_names_without_reading_the_node() -> None:
    cluster = MemoryCluster(seed=1)
    pod = _bound_pod(cluster, f"{A};", 1, stamped=True)
    cluster.request_log.clear()
    assert (await SimDevicePlugin(KubeClient(MemoryTransport(cluster))).admit(pod)).phase == "Running"
    assert keys.NODE_LOCK not in (cluster.get("nodes", "n1")["metadata"].get("annotations") or {})
    assert [(verb, path) for verb, _, path in cluster.request_log if "/nodes" in path] == [
        ("patch", "/api/v1/nodes/n1")
    ]


async def test_background_plugin_admits_bound_allocating_pods() -> None:
    cluster = MemoryCluster(seed=1)
    runner = attach_device_plugin(cluster)
    try:
        _bound_pod(cluster, f"{A};", 1)
        for _ in range(1000):
            if cluster.get("pods", "p", "default")["status"].get("phase") == "Running":
                break
            await asyncio.sleep(0)
        after = cluster.get("pods", "p", "default")
        assert after["status"]["phase"] == "Running"
        assert after["metadata"]["annotations"][keys.BIND_PHASE] == "success"
    finally:
        # Bounded: Reflector.stop() has been seen to wait for the in-memory watch to time out
        # (minutes) when cancelled right after an event (reported; not in this module).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(runner.stop(), 5)
