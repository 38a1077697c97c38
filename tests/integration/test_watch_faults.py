"""Watches cut mid-run, with and without `410 Gone`: what changed while the scheduler was not
watching is seen after it reconnects — nothing lost, nothing counted twice (its device usage equals
a fresh ledger rebuilt from the API's pods)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import gpu_node, gpu_pod, gpu_uuid, node, placed_pod
from vgpu_scheduler.server.main import stop
from vgpu_scheduler.standin.embedded.deviceplugin import BackgroundDevicePlugin
from vgpu_scheduler.standin.fakeapi import serve
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.wire import keys


async def _place(
    it: Any, stack: Any, cluster: MemoryCluster, name: str, mem: int, cores: int
) -> dict[str, Any]:
    pod = cluster.create("pods", gpu_pod(name, mem=mem, cores=cores), namespace="default")
    assert (await stack.filter(pod, ["gpu-a"]))["NodeNames"] == ["gpu-a"]
    assert await stack.bind(pod, "gpu-a") == ""
    return dict(pod)


def _admitted(cluster: MemoryCluster, *names: str) -> bool:
    pods = [cluster.get("pods", n, "default") for n in names]
    locked = keys.NODE_LOCK in (cluster.get("nodes", "gpu-a")["metadata"].get("annotations") or {})
    return not locked and all(p["status"].get("phase") == "Running" for p in pods)


@pytest.mark.parametrize("gone", [False, True], ids=["resume", "410-relist"])
async def test_changes_while_the_watch_is_down_are_not_lost(
    it: Any, cluster: MemoryCluster, launch: Any, plugin: BackgroundDevicePlugin, gone: bool
) -> None:
    cluster.create("nodes", gpu_node("gpu-a"))
    stack = await launch()
    process = stack.process
    for name, mem, cores in (("p1", 1000, 10), ("p2", 2000, 20), ("p3", 3000, 30)):
        await _place(it, stack, cluster, name, mem, cores)
        await it.eventually(lambda n=name: _admitted(cluster, n), f"the plugin to admit {name}")
    await it.eventually(lambda: it.usage(process) == it.rebuilt_usage(cluster, process), "a consistent start")
    # A reservation made just before the cut: filtered, not bound yet (kube-scheduler is between verbs).
    p5 = cluster.create("pods", gpu_pod("p5", mem=500, cores=5), namespace="default")
    assert (await stack.filter(p5, ["gpu-a"]))["NodeNames"] == ["gpu-a"]
    errors_before = {r.name: r.stats.errors for r in process.reflectors}
    relists_before = {r.name: r.stats.relists_after_gone for r in process.reflectors}

    # The cut, and everything below happens before the reflectors can run again.
    dropped = cluster.drop_watches()
    assert dropped >= 4  # pods, nodes, quotas; and the device plugin's pods
    cluster.delete("pods", "p1", "default", grace_period_seconds=0)  # deleted: its devices must be freed
    cluster.patch(
        "pods", "p2", {"status": {"phase": "Succeeded"}}, "default", subresource="status"
    )  # terminal
    a0 = gpu_uuid("gpu-a", 0)
    cluster.create("pods", placed_pod("p4", "gpu-a", f"{a0},NVIDIA,4000,40:;"), namespace="default")  # new
    cluster.create("nodes", gpu_node("gpu-b", gpus=1))  # a node added meanwhile
    if gone:
        cluster.compact()  # the history is gone: resuming from the old resourceVersion answers 410

    def caught_up() -> bool:
        return (
            # Every watch is back (registered at the API: nothing can fail it any more) ...
            cluster.watch_count() >= dropped
            # ... after a relist for each reflector when the history was gone.
            and (
                not gone
                or all(r.stats.relists_after_gone > relists_before[r.name] for r in process.reflectors)
            )
            and process.pods.store.get("default", "p1") is None
            and process.pods.store.get("default", "p4") is not None
            and "gpu-b" in it.usage(process)
        )

    await it.eventually(caught_up, "the reflectors to catch up")
    for r in process.reflectors:
        assert r.stats.errors > errors_before[r.name], f"{r.name} never saw the cut"
        if not gone:
            assert r.stats.relists_after_gone == relists_before[r.name], f"{r.name} relisted needlessly"

    # p1 and p2 freed, p3 and p4 counted once, the reservation of p5 kept (it is not in the API yet).
    live = it.usage(process)
    fresh = it.rebuilt_usage(cluster, process)
    assert sum(u[1] for u in live["gpu-a"]) == 3000 + 4000 + 500
    assert sum(u[1] for u in fresh["gpu-a"]) == 3000 + 4000
    assert sum(u[0] for u in live["gpu-a"]) == 3 and sum(u[0] for u in fresh["gpu-a"]) == 2
    assert live["gpu-b"] == fresh["gpu-b"] == [(0, 0, 0)]

    # The reservation survives the relist: the bind writes it, then everything agrees.
    assert await stack.bind(p5, "gpu-a") == ""
    await it.eventually(lambda: _admitted(cluster, "p5"), "the plugin to admit p5")
    await it.eventually(
        lambda: it.usage(process) == it.rebuilt_usage(cluster, process), "the ledgers to agree"
    )
    assert sum(u[0] for u in it.usage(process)["gpu-a"]) == 3  # p3, p4, p5
    metrics = await stack.metrics()
    shared = {
        labels["device_uuid"]: v
        for labels, v in metrics["hami_gpu_shared_count"]
        if labels["node"] == "gpu-a"
    }
    assert sum(shared.values()) == 3
    pods = {labels["pod"] for labels, _ in metrics["hami_vgpu_memory_allocated_bytes"]}
    assert pods == {"p3", "p4", "p5"}


async def test_bookmarks_advance_the_resume_point(it: Any, cluster: MemoryCluster, launch: Any) -> None:
    """Writes to other resources move the global revision; a bookmark carries it to the pod reflector,
    which then resumes from there after a cut (no relist)."""
    cluster.create("nodes", gpu_node("gpu-a"))
    stack = await launch()
    pods = stack.process.pods
    await it.eventually(lambda: cluster.watch_count("pods") >= 1, "the pod watch")
    start_rv = pods.resource_version
    cluster.create("nodes", node("noise", typed=True))  # moves the global revision, no pod event
    assert cluster.trigger_bookmarks() >= 1
    await it.eventually(lambda: pods.stats.bookmarks >= 1, "a bookmark")
    assert int(pods.resource_version) > int(start_rv)
    relists = pods.stats.relists_after_gone
    cluster.drop_watches("pods")
    pod = cluster.create("pods", gpu_pod("after", mem=100), namespace="default")
    await it.eventually(
        lambda: pods.store.get("default", "after") is not None, "the pod created after the cut"
    )
    assert pods.stats.relists_after_gone == relists
    assert (await stack.filter(pod, ["gpu-a"]))["NodeNames"] == ["gpu-a"]


async def test_api_errors_during_watch_reconnect_are_retried(
    it: Any, cluster: MemoryCluster, launch: Any
) -> None:
    cluster.create("nodes", gpu_node("gpu-a"))
    stack = await launch()
    pods = stack.process.pods
    await it.eventually(lambda: cluster.watch_count("pods") >= 1, "the pod watch")
    cluster.fail_next("watch", 2, 500, resource="pods")  # the first two reconnects fail
    cluster.drop_watches("pods")
    a1 = gpu_uuid("gpu-a", 1)
    cluster.create("pods", placed_pod("placed", "gpu-a", f"{a1},NVIDIA,2048,25:;"), namespace="default")
    await it.eventually(
        lambda: it.usage(stack.process)["gpu-a"] == [(0, 0, 0), (1, 2048, 25)], "the pod made while failing"
    )
    assert pods.stats.errors >= 3  # the cut and the two 500s


def _lock(cluster: MemoryCluster, node: str = "gpu-a") -> str | None:
    value = (cluster.get("nodes", node)["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)
    return None if value is None else str(value)


@pytest.mark.parametrize(
    ("verb", "resource", "writes_annotations"),
    [("patch", "pods", False), ("create", "pods/binding", True)],
    ids=["pod-patch-fails", "binding-fails"],
)
async def test_bind_api_failure_releases_the_lock_and_a_retry_binds(
    it: Any, cluster: MemoryCluster, launch: Any, verb: str, resource: str, writes_annotations: bool
) -> None:
    """§6.1 step 7: any failure after the lock is taken releases it; the reservation stays, so the
    retried bind (kube-scheduler retries the pod) writes the same devices."""
    cluster.create("nodes", gpu_node("gpu-a"))
    stack = await launch()
    pod = cluster.create("pods", gpu_pod("p", mem=5000, cores=50), namespace="default")
    assert (await stack.filter(pod, ["gpu-a"]))["NodeNames"] == ["gpu-a"]
    reserved = it.usage(stack.process)

    cluster.fail_next(verb, 1, 500, resource=resource, message="etcd is sad")
    error = await stack.bind(pod, "gpu-a")
    assert error == "etcd is sad"  # client-go's StatusError.Error() is the Status message alone
    assert _lock(cluster) is None
    stored = cluster.get("pods", "p", "default")
    assert "nodeName" not in stored["spec"]
    assert (keys.VGPU_ALLOCATED in (stored["metadata"].get("annotations") or {})) is writes_annotations
    # Counted exactly once whether or not the annotations landed (the watch confirms the reservation).
    await it.eventually(lambda: it.usage(stack.process) == reserved, "the reservation to stay as it was")
    await it.eventually(
        lambda: (
            [
                (e["involvedObject"]["name"], e["message"])
                for e in cluster.objects("events")
                if e["reason"] == "BindingFailed"
            ]
            == [("p", "etcd is sad")]
        ),
        "the BindingFailed event",
    )

    assert await stack.bind(pod, "gpu-a") == ""
    stored = cluster.get("pods", "p", "default")
    assert stored["spec"]["nodeName"] == "gpu-a"
    assert stored["metadata"]["annotations"][keys.VGPU_ALLOCATED].endswith(",NVIDIA,5000,50:;")
    assert _lock(cluster) is not None and _lock(cluster).endswith(",default,p")  # type: ignore[union-attr]
    await it.eventually(
        lambda: it.usage(stack.process) == it.rebuilt_usage(cluster, stack.process) == reserved, "one count"
    )


async def test_conflicting_node_writes_are_retried(it: Any, cluster: MemoryCluster, launch: Any) -> None:
    """A 409 on the guarded lock patch (the node changed under us) is re-read and retried."""
    cluster.create("nodes", gpu_node("gpu-a"))
    stack = await launch()
    pod = cluster.create("pods", gpu_pod("p", mem=1000), namespace="default")
    assert (await stack.filter(pod, ["gpu-a"]))["NodeNames"] == ["gpu-a"]
    cluster.fail_next("patch", 2, 409, resource="nodes", reason="Conflict")
    assert await stack.bind(pod, "gpu-a") == ""
    assert str(_lock(cluster)).endswith(",default,p")


async def test_slow_api_server_still_schedules(it: Any, cluster: MemoryCluster, launch: Any) -> None:
    """Every API request 50 ms late (filter needs none of them): filter answers at once, bind waits."""
    nodes = ["gpu-a", "gpu-b", "gpu-c"]
    for name in nodes:
        cluster.create("nodes", gpu_node(name))
    stack = await launch()
    pods = [cluster.create("pods", gpu_pod(f"p{i}", mem=1000), namespace="default") for i in range(3)]
    # Every registered vendor's handshake, one patch each (NVIDIA's alone left the others in flight).
    handshakes = {v.handshake_key for v in stack.process.extender.state.vendors if v.handshake_key}
    await it.eventually(
        lambda: all(
            handshakes <= set(cluster.get("nodes", name)["metadata"]["annotations"]) for name in nodes
        ),
        "the registration's own writes (the handshakes) to be done",
    )
    cluster.latency = 0.05
    requests_before = len(cluster.request_log)
    chosen = [(await stack.filter(pod, nodes))["NodeNames"] for pod in pods]
    # Each decision awaits its bind, so the next pod goes to a node no bind is about to lock.
    assert chosen == [["gpu-a"], ["gpu-b"], ["gpu-c"]]
    # Filter makes no API call of its own (events are written in the background by the recorder).
    made = list(cluster.request_log)[requests_before:]
    assert all(verb == "create" and "/events" in path for verb, _, path in made), made
    assert await stack.bind(pods[0], "gpu-a") == ""


async def test_api_server_restart_is_survived(it: Any, cluster: MemoryCluster, api: Any, launch: Any) -> None:
    """The API server goes away (connections refused) and comes back on the same address: the
    reflectors keep retrying and catch up; a bind during the outage fails cleanly, then works."""
    cluster.create("nodes", gpu_node("gpu-a"))
    stack = await launch()
    pod = cluster.create("pods", gpu_pod("p", mem=1000), namespace="default")
    assert (await stack.filter(pod, ["gpu-a"]))["NodeNames"] == ["gpu-a"]
    port = api.port
    await api.close()  # down: open watches cut, new connections refused
    a1 = gpu_uuid("gpu-a", 1)
    cluster.create("pods", placed_pod("during", "gpu-a", f"{a1},NVIDIA,7000,70:;"), namespace="default")
    error = await stack.bind(pod, "gpu-a")
    assert error and "nodeName" not in cluster.get("pods", "p", "default")["spec"]
    assert await stack.healthz() == 200

    restarted = await serve(cluster, "127.0.0.1", port, token=it.TOKEN)
    try:
        await it.eventually(
            lambda: stack.process.pods.store.get("default", "during") is not None,
            "the reflectors to catch up",
        )
        assert await stack.bind(pod, "gpu-a") == ""
        await it.eventually(
            lambda: it.usage(stack.process) == it.rebuilt_usage(cluster, stack.process),
            "the ledgers to agree",
        )
        used = it.usage(stack.process)["gpu-a"]
        assert (sum(u[0] for u in used), sum(u[1] for u in used)) == (2, 1000 + 7000)
    finally:
        await stack.session.close()
        await stop(stack.running)
        launch.stacks.clear()
        await restarted.close()


async def test_timed_out_write_in_bind_releases_the_lock(
    it: Any, cluster: MemoryCluster, launch: Any
) -> None:
    """--kube-timeout: the pod patch times out after the node lock was taken. The bind answers an
    error (HTTP 200), releases the lock at once (not after 5 minutes), and the retried bind works."""
    cluster.create("nodes", gpu_node("gpu-a"))
    stack = await launch(kube_timeout=1)
    pod = cluster.create("pods", gpu_pod("p", mem=1000), namespace="default")
    assert (await stack.filter(pod, ["gpu-a"]))["NodeNames"] == ["gpu-a"]
    cluster.delay_next("patch", 1, 1.5, resource="pods")
    error = await stack.bind(pod, "gpu-a")
    assert "TimeoutError" in error
    assert _lock(cluster) is None
    assert await stack.bind(pod, "gpu-a") == ""
    assert cluster.get("pods", "p", "default")["spec"]["nodeName"] == "gpu-a"
    await it.eventually(
        lambda: it.usage(stack.process) == it.rebuilt_usage(cluster, stack.process), "the ledgers to agree"
    )
    assert sum(u[0] for u in it.usage(stack.process)["gpu-a"]) == 1
