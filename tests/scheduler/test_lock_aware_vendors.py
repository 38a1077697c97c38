"""Lock-aware placement only for pods whose bind takes the node lock (§6.2).

Found on the real control plane (tests/e2e/test_vendors.py, a node with several vendors): an
AWSNeuron (or Mthreads, GCU, …) pod was refused with "node lock contention" while another pod held
the node lock, although its bind never takes the lock (HAMi binds it at once); and its own pending
bind made the node "busy" for locking pods although it never contends with them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.builders import container, gpu_node, pod
from tests.scheduler.test_bind_safety import CONTENTION, Events, Stack, _chosen
from tests.scheduler.test_bind_safety import pod as gpu_pod
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.configfile import parse_device_config
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport

Obj = dict[str, Any]
CONFIG = """\
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceCoreName: nvidia.com/gpucores
awsneuron:
  resourceCountName: "aws.amazon.com/neuron"
  resourceCoreName: "aws.amazon.com/neuroncore"
"""


def mixed_node(name: str) -> Obj:
    """NVIDIA GPUs by annotation and Neuron devices by capacity on one node."""
    neuron = {"aws.amazon.com/neuron": "2", "aws.amazon.com/neuroncore": "4"}
    obj = gpu_node(name, gpus=2, allocatable={"cpu": "8", "memory": "32Gi", "pods": "110", **neuron})
    obj["status"]["capacity"] = dict(obj["status"]["allocatable"])
    return obj


def neuron_pod(name: str) -> Obj:
    return pod(name, containers=[container("c", limits={"aws.amazon.com/neuron": "1"})])


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    cluster = MemoryCluster()
    cluster.create("nodes", mixed_node("n1"))
    events = Events()
    options = SchedulerOptions(scheduler_name="hami-scheduler")
    client = KubeClient(MemoryTransport(cluster))
    process = SchedulerProcess(options, parse_device_config(CONFIG), client, "host", events=events)
    await process.start(sync_timeout=5)
    try:
        yield Stack(cluster, process, events)
    finally:
        await process.stop()


async def test_a_pod_that_never_locks_is_placed_on_a_locked_node(stack: Stack) -> None:
    await stack.create(gpu_pod("holder"))
    await stack.lock_node_for("n1", "holder")
    p = await stack.create(neuron_pod("neuron"))
    assert _chosen(await stack.filter(p, ["n1"])) == "n1"
    assert stack.extender.stats.filters_all_busy == 0
    assert await stack.bind(p, "n1") == ""  # its bind takes no lock: nothing to contend for
    assert stack.lock_of("n1").endswith(",default,holder")  # type: ignore[union-attr]


async def test_a_pending_bind_that_never_locks_leaves_the_node_free(stack: Stack) -> None:
    p = await stack.create(neuron_pod("neuron"))
    assert _chosen(await stack.filter(p, ["n1"])) == "n1"  # its bind is to come, without a lock
    gpu = await stack.create(gpu_pod("gpu"))
    assert _chosen(await stack.filter(gpu, ["n1"])) == "n1"


async def test_a_locking_pod_still_fails_fast_on_a_locked_node(stack: Stack) -> None:
    await stack.create(gpu_pod("holder"))
    await stack.lock_node_for("n1", "holder")
    gpu = await stack.create(gpu_pod("gpu"))
    assert (await stack.filter(gpu, ["n1"]))["Error"] == CONTENTION
