"""Concurrent filters and binds over HTTP never over-commit a device, and two replicas racing for
one node lock end with one winner, the other told `node lock contention` (or waiting), no lock left."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from tests.builders import gpu_node, gpu_pod, gpu_uuid
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.standin.embedded.deviceplugin import BackgroundDevicePlugin, SimDevicePlugin
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire import keys

NODES = ["n1", "n2"]
COUNT, DEVMEM, DEVCORE = 10, 24 * 1024, 100

# (nums, MiB, cores) cycled over the pods: 4 GPUs cannot hold all 50 of them (memory and cores
# both run out), and the 2-GPU pods need room on two devices of one node at once.
SHAPES = [(1, 2000, 5), (1, 5000, 20), (1, 7000, 0), (2, 3000, 10), (1, 1000, 0)]


def _locks(cluster: MemoryCluster) -> dict[str, str]:
    out = {}
    for node in cluster.objects("nodes"):
        value = (node["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)
        if value is not None:
            out[node["metadata"]["name"]] = value
    return out


async def test_fifty_pods_at_once_never_overcommit(
    it: Any, cluster: MemoryCluster, launch: Any, plugin: BackgroundDevicePlugin
) -> None:
    for name in NODES:
        cluster.create("nodes", gpu_node(name, gpus=2, count=COUNT, devmem=DEVMEM, devcore=DEVCORE))
    stack = await launch(node_lock_retry_timeout=20.0)
    pods = []
    for i in range(50):
        nums, mem, cores = SHAPES[i % len(SHAPES)]
        pods.append(
            cluster.create("pods", gpu_pod(f"p{i:02}", gpus=nums, mem=mem, cores=cores), "default")
        )

    async def schedule(pod: dict[str, Any]) -> tuple[str, Any]:
        for _ in range(100):  # lock contention (filter or bind) is retried, as kube-scheduler does
            result = await stack.filter(pod, NODES)
            if "node lock contention" in result["Error"]:  # every fitting node was busy
                await asyncio.sleep(0.05)
                continue
            if result["NodeNames"] is None:
                assert result["Error"] == "" and set(result["FailedNodes"]) == set(NODES), result
                return "unfit", result["FailedNodes"]
            assert len(result["NodeNames"]) == 1
            error = await stack.bind(pod, result["NodeNames"][0])
            if "node lock contention" not in error:
                return ("bound", result["NodeNames"][0]) if not error else ("bind-error", error)
            await asyncio.sleep(0.05)
        return "bind-error", "still contended"

    outcomes = dict(
        zip([p["metadata"]["name"] for p in pods], await asyncio.gather(*map(schedule, pods)), strict=True)
    )
    bound = {name for name, (what, _) in outcomes.items() if what == "bound"}
    unfit = {name for name, (what, _) in outcomes.items() if what == "unfit"}
    assert not {name: o for name, o in outcomes.items() if o[0] == "bind-error"}
    assert bound and unfit, outcomes  # sized so that some fit and some do not

    await it.eventually(
        lambda: all(cluster.get("pods", n, "default")["status"].get("phase") == "Running" for n in bound),
        "the plugin to admit every bound pod",
        timeout=10,
    )
    final = cluster.objects("pods", "default")
    for pod in final:
        name, annotations = pod["metadata"]["name"], pod["metadata"].get("annotations") or {}
        if name in bound:
            assert pod["spec"]["nodeName"] == outcomes[name][1] == annotations[keys.VGPU_NODE]
            assert annotations[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
            assert keys.VGPU_ALLOCATED in annotations
        else:  # nothing written to a pod that did not fit
            assert "nodeName" not in pod["spec"] and keys.VGPU_ALLOCATED not in annotations

    # The invariant, from the API's pods alone: Σ over each device ≤ its capacity.
    per_device = it.annotated_usage(final)
    devices = {gpu_uuid(n, i) for n in NODES for i in range(2)}
    assert set(per_device) <= devices
    for uuid, (pods_on, mem, cores) in per_device.items():
        assert pods_on <= COUNT and mem <= DEVMEM and cores <= DEVCORE, (uuid, pods_on, mem, cores)
    assert sum(n for n, _, _ in per_device.values()) == sum(
        SHAPES[int(name[1:]) % len(SHAPES)][0] for name in bound
    )
    # The scheduler's ledger agrees with the API, and no lock is left behind.
    await it.eventually(
        lambda: it.usage(stack.process) == it.rebuilt_usage(cluster, stack.process), "the ledger"
    )
    await it.eventually(lambda: not _locks(cluster), "every node lock to be released")


async def test_two_replicas_racing_for_one_node_lock(it: Any, cluster: MemoryCluster, launch: Any) -> None:
    cluster.create("nodes", gpu_node("n1"))
    first = await launch(node_lock_retry_timeout=0.0)
    second = await launch(node_lock_retry_timeout=0.0)
    a = cluster.create("pods", gpu_pod("a", mem=1000, cores=10), "default")
    b = cluster.create("pods", gpu_pod("b", mem=1000, cores=10), "default")
    assert (await first.filter(a, ["n1"]))["NodeNames"] == ["n1"]
    assert (await second.filter(b, ["n1"]))["NodeNames"] == ["n1"]

    errors = await asyncio.gather(first.bind(a, "n1"), second.bind(b, "n1"))
    assert sorted(bool(e) for e in errors) == [False, True], errors
    winner, loser = ("a", "b") if not errors[0] else ("b", "a")
    loser_error = errors[1] if winner == "a" else errors[0]
    assert loser_error == "node n1 has been locked within 5m0s: node lock contention"
    assert _locks(cluster)["n1"].endswith(f",default,{winner}")
    lost = cluster.get("pods", loser, "default")
    assert "nodeName" not in lost["spec"] and keys.VGPU_NODE not in (
        lost["metadata"].get("annotations") or {}
    )
    await it.eventually(
        lambda: any(
            e["involvedObject"]["name"] == loser
            for e in cluster.objects("events")
            if e["reason"] == "BindingFailed"
        ),
        "the BindingFailed event",
    )

    # The device plugin admits the winner and releases the lock; the loser's retry then wins.
    device_plugin = SimDevicePlugin(KubeClient(MemoryTransport(cluster)))
    await device_plugin.admit(cluster.get("pods", winner, "default"))
    assert not _locks(cluster)
    retry = first if loser == "a" else second
    assert await retry.bind(a if loser == "a" else b, "n1") == ""
    await device_plugin.admit(cluster.get("pods", loser, "default"))
    assert not _locks(cluster)

    # Each replica's ledger counts both pods once (its own and, through the watch, the other's).
    for stack in (first, second):
        await it.eventually(
            lambda s=stack: it.usage(s.process) == it.rebuilt_usage(cluster, s.process), "replica ledgers"
        )
        assert sum(u[0] for u in it.usage(stack.process)["n1"]) == 2


async def test_two_replicas_waiting_for_the_lock_both_bind(
    it: Any, cluster: MemoryCluster, launch: Any, plugin: BackgroundDevicePlugin
) -> None:
    cluster.create("nodes", gpu_node("n1"))
    first = await launch(node_lock_retry_timeout=5.0)
    second = await launch(node_lock_retry_timeout=5.0)
    a = cluster.create("pods", gpu_pod("a", mem=1000), "default")
    b = cluster.create("pods", gpu_pod("b", mem=1000), "default")
    assert (await first.filter(a, ["n1"]))["NodeNames"] == ["n1"]
    assert (await second.filter(b, ["n1"]))["NodeNames"] == ["n1"]
    assert list(await asyncio.gather(first.bind(a, "n1"), second.bind(b, "n1"))) == ["", ""]
    await it.eventually(
        lambda: all(cluster.get("pods", n, "default")["status"].get("phase") == "Running" for n in "ab"),
        "both pods admitted",
    )
    await it.eventually(lambda: not _locks(cluster), "the last lock release")


async def test_schedule_while_deleting_and_cutting_watches(
    it: Any, cluster: MemoryCluster, launch: Any, plugin: BackgroundDevicePlugin
) -> None:
    """Filters and binds racing with pod deletions, watch cuts and 410 relists (seeded): at the end
    no device is over-committed, the ledger equals one rebuilt from the API, and no lock is left."""
    rng = random.Random(20261129)
    for name in NODES:
        cluster.create("nodes", gpu_node(name, gpus=2, count=COUNT, devmem=DEVMEM, devcore=DEVCORE))
    stack = await launch(node_lock_retry_timeout=20.0)
    pods = [
        cluster.create("pods", gpu_pod(f"c{i:02}", gpus=n, mem=m, cores=c), "default")
        for i, (n, m, c) in enumerate(SHAPES[i % len(SHAPES)] for i in range(40))
    ]
    delays = [rng.uniform(0, 0.5) for _ in pods]
    deleted: set[str] = set()

    async def schedule(pod: dict[str, Any], delay: float) -> str:
        await asyncio.sleep(delay)
        for _ in range(50):  # kube-scheduler retries lock contention (filter or bind) after a backoff
            result = await stack.filter(pod, NODES)
            if "node lock contention" in result["Error"]:
                await asyncio.sleep(0.05)
                continue
            if result["NodeNames"] is None:
                return "unfit" if result["FailedNodes"] else result["Error"]
            error = await stack.bind(pod, result["NodeNames"][0])
            if "node lock contention" not in error:
                return error or "bound"
            await asyncio.sleep(0.05)
        return "still contended"

    def delete_a_running_pod() -> None:
        pods_now = cluster.objects("pods", "default")
        running = [p["metadata"]["name"] for p in pods_now if p["status"].get("phase") == "Running"]
        if running:
            victim = rng.choice(running)
            cluster.delete("pods", victim, "default", grace_period_seconds=0)
            deleted.add(victim)

    async def chaos() -> None:
        for _ in range(12):
            await asyncio.sleep(rng.uniform(0.02, 0.08))
            action = rng.choice(["delete", "delete", "drop", "gone"])
            if action == "delete":
                delete_a_running_pod()
            else:
                if action == "gone":
                    cluster.compact()
                cluster.drop_watches()
        # On a loaded machine the first binds may land after those 12 steps: keep trying to delete
        # one pod while others still schedule, so the test always covers a deletion mid-run.
        for _ in range(400):
            if deleted:
                return
            await asyncio.sleep(0.02)
            delete_a_running_pod()

    *outcomes, _ = await asyncio.gather(*(schedule(p, d) for p, d in zip(pods, delays, strict=True)), chaos())
    assert set(outcomes) <= {"bound", "unfit"}, outcomes
    assert "bound" in outcomes and deleted

    live_bound = {
        p["metadata"]["name"] for p in cluster.objects("pods", "default") if p["spec"].get("nodeName")
    }
    await it.eventually(
        lambda: all(
            p["status"].get("phase") == "Running"
            for p in cluster.objects("pods", "default")
            if p["metadata"]["name"] in live_bound
        ),
        "the plugin to admit every bound pod",
        timeout=10,
    )
    final = cluster.objects("pods", "default")
    for uuid, (pods_on, mem, cores) in it.annotated_usage(final).items():
        assert pods_on <= COUNT and mem <= DEVMEM and cores <= DEVCORE, (uuid, pods_on, mem, cores)
    await it.eventually(
        lambda: it.usage(stack.process) == it.rebuilt_usage(cluster, stack.process), "the ledger", timeout=10
    )
    await it.eventually(lambda: not _locks(cluster), "every node lock to be released")
