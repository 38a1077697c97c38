"""The vgpu_scheduler_* operator metrics after a known sequence of requests, scraped from the real
server's /metrics (server.main.start against the fake API over HTTP): decisions by outcome and
reason, latency histograms by outcome, node-lock takeovers by cause, API requests, reflector
relists after a 410, ledger gauges. Counts only: no assertion depends on how long anything took."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.builders import api_pod, gpu_node, gpu_pod
from vgpu_scheduler.cluster.nodelock import format_lock
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.wire import keys

BUCKETS = ["0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1",
           "2.5", "5", "10", "30", "+Inf"]
Metrics = dict[str, list[tuple[dict[str, str], float]]]


def by(metrics: Metrics, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(ls[label] for label in labels): v for ls, v in metrics.get(name, [])}


def histogram_counts(metrics: Metrics, name: str) -> dict[str, float]:
    """outcome -> _count, after checking each series' buckets: every bound, cumulative, +Inf = count."""
    counts = {ls["outcome"]: v for ls, v in metrics[f"{name}_count"]}
    for outcome, count in counts.items():
        buckets = [(ls["le"], v) for ls, v in metrics[f"{name}_bucket"] if ls["outcome"] == outcome]
        assert [le for le, _ in buckets] == BUCKETS, name
        values = [v for _, v in buckets]
        assert values == sorted(values) and values[-1] == count, (name, outcome, values)
    return counts


async def test_operator_metrics_after_a_known_sequence(it: Any, cluster: MemoryCluster, launch: Any) -> None:
    cluster.create("nodes", gpu_node("gpu-a"))  # 2 GPUs of 24 GiB
    stack = await launch()
    process = stack.process
    process.extender.pod_wait = 0.2  # the filter for a pod that exists nowhere gives up sooner

    before = await stack.metrics()
    assert histogram_counts(before, "vgpu_scheduler_filter_duration_seconds") == dict.fromkeys(
        ("chosen", "contention", "error", "no_request", "nofit"), 0
    )
    assert "vgpu_scheduler_decisions_total" not in before  # reasons appear as they happen

    async def created(pod: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = cluster.create("pods", pod, namespace="default")
        name = obj["metadata"]["name"]
        await it.eventually(lambda: process.pods.store.get("default", name) is not None, f"{name} cached")
        return obj

    def node_lock() -> str:
        node = process.nodes.store.get(None, "gpu-a") or {}
        return str((node.get("metadata", {}).get("annotations") or {}).get(keys.NODE_LOCK, ""))

    async def set_lock(value: str) -> None:
        cluster.patch("nodes", "gpu-a", {"metadata": {"annotations": {keys.NODE_LOCK: value}}})
        await it.eventually(lambda: node_lock() == value, "the informer to see the lock")

    # chosen, bound (the node lock stays: no device plugin runs here)
    p1 = await created(gpu_pod("p1", mem=1000, cores=10))
    assert (await stack.filter(p1, ["gpu-a"]))["NodeNames"] == ["gpu-a"]
    assert await stack.bind(p1, "gpu-a") == ""
    await it.eventually(lambda: node_lock().endswith(",default,p1"), "the informer to see p1's lock")

    # contention: every fitting node is locked by a live pod; a bind there fails on the lock
    p2 = await created(gpu_pod("p2", mem=1000, cores=10))
    assert "node lock contention" in (await stack.filter(p2, ["gpu-a"]))["Error"]
    assert "node lock contention" in await stack.bind(p2, "gpu-a")

    # nofit, error, no_request
    big = await created(gpu_pod("big", mem=100 * 1024))
    assert "CardInsufficientMemory" in (await stack.filter(big, ["gpu-a"]))["FailedNodes"]["gpu-a"]
    ghost = gpu_pod("ghost", uid="uid-ghost")  # never created
    assert (await stack.filter(ghost, ["gpu-a"]))["Error"] == 'pods "ghost" not found'
    plain = await created(api_pod("plain"))
    assert (await stack.filter(plain, ["gpu-a"]))["NodeNames"] == ["gpu-a"]

    # two takeovers: an expired lock, then a live one whose holder pod does not exist
    await set_lock("2020-01-01T00:00:00Z,default,p1")
    p3 = await created(gpu_pod("p3", mem=1000, cores=10))
    assert (await stack.filter(p3, ["gpu-a"]))["NodeNames"] == ["gpu-a"]
    assert await stack.bind(p3, "gpu-a") == ""
    await set_lock(format_lock(datetime.now(UTC), "default", "ghost"))
    p4 = await created(gpu_pod("p4", mem=1000, cores=10))
    assert (await stack.filter(p4, ["gpu-a"]))["NodeNames"] == ["gpu-a"]
    assert await stack.bind(p4, "gpu-a") == ""

    # every watch cut and the history compacted: each informer relists once
    cluster.drop_watches()
    cluster.compact()
    await it.eventually(
        lambda: all(r.stats.relists_after_gone >= 1 for r in process.reflectors), "the relists"
    )

    metrics = await stack.metrics()
    assert by(metrics, "vgpu_scheduler_decisions_total", "outcome", "reason") == {
        ("chosen", "fit"): 3,
        ("contention", "nodes_busy"): 1,
        ("nofit", "CardInsufficientMemory"): 1,
        ("error", "pod_unknown"): 1,
        ("no_request", "no_device_request"): 1,
    }
    assert histogram_counts(metrics, "vgpu_scheduler_filter_duration_seconds") == {
        "chosen": 3, "contention": 1, "error": 1, "no_request": 1, "nofit": 1,
    }
    assert histogram_counts(metrics, "vgpu_scheduler_bind_duration_seconds") == {
        "bound": 3, "contention": 1, "error": 0, "stopped": 0,
    }
    assert histogram_counts(metrics, "vgpu_scheduler_node_lock_wait_seconds") == {
        "acquired": 3, "contention": 1, "error": 0, "stopped": 0,
    }
    assert by(metrics, "vgpu_scheduler_node_lock_takeovers_total", "cause") == {
        ("expired",): 1,
        ("future",): 0,
        ("unparsable",): 0,
        ("holder_gone",): 1,
        ("holder_elsewhere",): 0,
        ("holder_terminal",): 0,
        ("holder_bind_failed",): 0,
    }
    # The existing counters agree with the new families.
    assert by(metrics, "vgpu_scheduler_filter_requests_total") == {(): 7}
    assert by(metrics, "vgpu_scheduler_bind_lock_contention_total") == {(): 1}

    requests = by(metrics, "vgpu_scheduler_api_requests_total", "verb", "code")
    assert {verb for verb, _ in requests} <= {"GET", "POST", "PUT", "PATCH", "DELETE", "WATCH"}
    assert all(code.isdigit() for _, code in requests)  # every request was answered
    assert requests[("POST", "201")] >= 3  # three Bindings (and events)
    assert requests[("GET", "404")] >= 1  # the lock holder "ghost" looked up
    assert requests[("WATCH", "200")] >= 2 * len(process.reflectors)  # each informer watched again
    durations = {ls["verb"] for ls, _ in metrics["vgpu_scheduler_api_request_duration_seconds_count"]}
    assert {verb for verb, _ in requests} - {"WATCH"} <= durations and "WATCH" not in durations
    assert metrics["vgpu_scheduler_api_rate_limiter_wait_seconds_count"][0][1] >= sum(requests.values())
    relists = by(metrics, "vgpu_scheduler_reflector_relists_total", "resource")
    assert set(relists) == {("pods",), ("nodes",), ("resourcequotas",)}
    assert min(relists.values()) >= 1

    # Ledger: p1, p3, p4 bound; p2 still reserved by its failed bind (kept until filtered again).
    async def ledger() -> bool:
        m = await stack.metrics()
        gauges = {name: m[f"vgpu_scheduler_ledger_{name}"][0][1] for name in ("nodes", "devices", "pods",
                                                                              "reservations")}
        return gauges == {"nodes": 1, "devices": 2, "pods": 4, "reservations": 1}

    await it.eventually(ledger, "the ledger gauges")
