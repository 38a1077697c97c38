"""Benchmark of the scheduling engine: ledger updates and filter decisions (no HTTP).

    .venv/bin/python bench/engine.py [--quick]

Builds clusters of N nodes × 8 GPUs (count 20, 80 GiB, 100 cores) with 10 existing allocations per
GPU, fed as real pod objects (hami.io/vgpu-node + -allocated annotations) through SchedulerState,
then times `decide` over every node as candidate for mixed 1-GPU slice requests, reserving each
decision as the live path does. Figures are printed as a table; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import resource
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoFit, decide
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import DeviceInfo
from vgpu_scheduler.wire import keys

VENDORS = build()
GPUS_PER_NODE = 8
ALLOCS_PER_GPU = 10


@dataclass
class Figures:
    nodes: int
    pods: int
    add_us: float
    update_us: float
    delete_us: float
    decisions: dict[str, list[float]]
    nofit_ms: float
    nofit_repeat_ms: float
    all_nodes_ms: float
    rss_mib: float


def gpu(node: int, i: int) -> DeviceInfo:
    return DeviceInfo(id=f"GPU-{node:05d}-{i}", index=i, count=20, devmem=81920, devcore=100,
                      type="NVIDIA A100-SXM4-80GB", numa=i // 4, health=True)


def existing_pod(rng: random.Random, node: int, i: int, k: int) -> dict[str, Any]:
    uuid = f"GPU-{node:05d}-{i}"
    mem, cores = rng.choice((1024, 2048, 3072, 4096, 6144)), rng.choice((0, 0, 2, 5, 8))
    return {
        "metadata": {
            "name": f"w-{node}-{i}-{k}",
            "namespace": f"ns-{node % 50}",
            "uid": f"uid-{node}-{i}-{k}",
            "annotations": {
                keys.VGPU_NODE: f"node-{node:05d}",
                keys.VGPU_TIME: "1764400000",
                keys.VGPU_ALLOCATED: f"{uuid},NVIDIA,{mem},{cores}:;",
                keys.VGPU_TO_ALLOCATE: ";",
                keys.BIND_PHASE: "success",
            },
        },
        "spec": {"containers": [{"name": "main"}]},
        "status": {"phase": "Running"},
    }


def request_pod(rng: random.Random, n: int, policy: str) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1"}
    if rng.random() < 0.8:
        limits["nvidia.com/gpumem"] = str(rng.choice((1000, 2000, 4000, 8000, 16000)))
    else:
        limits["nvidia.com/gpumem-percentage"] = str(rng.choice((10, 25)))
    limits["nvidia.com/gpucores"] = str(rng.choice((0, 10, 20, 30)))
    return {
        "metadata": {"name": f"req-{n}", "namespace": "bench", "uid": f"req-uid-{n}",
                     "annotations": {keys.NODE_SCHEDULER_POLICY: policy}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"},
    }


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def run(n_nodes: int, decisions: int, seed: int = 1) -> Figures:
    rng = random.Random(seed)
    state = SchedulerState(VENDORS)
    names = [f"node-{n:05d}" for n in range(n_nodes)]
    for n, name in enumerate(names):
        state.set_node_devices(name, [gpu(n, i) for i in range(GPUS_PER_NODE)])

    # Pod events: add everything (as a relist would), then update and delete a sample.
    gc.collect()
    add_total = 0.0
    pods = 0
    sample: list[dict[str, Any]] = []
    for n in range(n_nodes):
        for i in range(GPUS_PER_NODE):
            for k in range(ALLOCS_PER_GPU):
                pod = existing_pod(rng, n, i, k)
                start = time.perf_counter()
                state.on_pod(pod)
                add_total += time.perf_counter() - start
                pods += 1
                if len(sample) < 2000 and rng.random() < 0.05:
                    sample.append(pod)
    update_times = []
    for pod in sample:
        # A status-only update (the usual case): same allocation, new object.
        pod = {**pod, "status": {"phase": "Running", "podIP": "10.0.0.1"}}
        start = time.perf_counter()
        state.on_pod(pod)
        update_times.append(time.perf_counter() - start)
    delete_times = []
    for pod in sample[:500]:
        start = time.perf_counter()
        state.on_pod_deleted(pod)
        delete_times.append(time.perf_counter() - start)
        state.on_pod(pod)

    results: dict[str, list[float]] = {}
    for policy in ("binpack", "spread"):
        times = []
        for d in range(decisions):
            pod = request_pod(rng, d, policy)
            start = time.perf_counter()
            decision = decide(
                pod,
                names,
                state,
                default_node_policy="binpack",
                default_gpu_policy="spread",
                now=1764400000 + d,
            )
            times.append(time.perf_counter() - start)
            if isinstance(decision, Chosen):
                state.reserve(pod, decision)
            else:
                raise SystemExit(f"unexpected {decision!r}")
        results[policy] = times
        for d in range(decisions):  # leave the cluster as it was for the next policy
            state.release(f"req-uid-{d}")

    # What nothing-fits costs (every node evaluated for its reason), and the all-nodes reference.
    huge = request_pod(rng, 10**6, "binpack")
    huge["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "200000"
    nofit = []
    for _ in range(3):
        state.verdicts.clear()  # the first decision for this pod: nothing cached
        start = time.perf_counter()
        assert isinstance(
            decide(
                huge, names, state, default_node_policy="binpack", default_gpu_policy="spread", now=0
            ),
            NoFit,
        )
        nofit.append(time.perf_counter() - start)
    # The retry kube-scheduler makes after a cluster event: one pod changed on one node since the
    # previous (cached) decision for the same pod, so one node is evaluated again.
    repeat = []
    for r in range(3):
        first = decide(
            huge, names, state, default_node_policy="binpack", default_gpu_policy="spread", now=0
        )
        state.on_pod(existing_pod(rng, r, 0, ALLOCS_PER_GPU + r))
        start = time.perf_counter()
        again = decide(
            huge, names, state, default_node_policy="binpack", default_gpu_policy="spread", now=0
        )
        repeat.append(time.perf_counter() - start)
        assert isinstance(again, NoFit) and again == first
    everything = []
    for d in range(3):
        pod = request_pod(rng, 10**6 + d, "binpack")
        start = time.perf_counter()
        decide(
            pod,
            names,
            state,
            default_node_policy="binpack",
            default_gpu_policy="spread",
            now=0,
            evaluate_all=True,
        )
        everything.append(time.perf_counter() - start)

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return Figures(
        nodes=n_nodes,
        pods=pods,
        add_us=add_total / pods * 1e6,
        update_us=statistics.mean(update_times) * 1e6,
        delete_us=statistics.mean(delete_times) * 1e6,
        decisions=results,
        nofit_ms=statistics.median(nofit) * 1e3,
        nofit_repeat_ms=statistics.median(repeat) * 1e3,
        all_nodes_ms=statistics.median(everything) * 1e3,
        rss_mib=rss,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 nodes only, 50 decisions")
    args = parser.parse_args()
    sizes = [500] if args.quick else [500, 5000]
    decisions = 50 if args.quick else 200
    rows = []
    for n in sizes:
        print(f"building {n} nodes × {GPUS_PER_NODE} GPUs × {ALLOCS_PER_GPU} allocations ...",
              file=sys.stderr, flush=True)
        rows.append(run(n, decisions))

    print(f"\nPython {sys.version.split()[0]}, one core; {decisions} decisions per policy, "
          "every node a candidate\n")
    header = ("nodes", "pods", "policy", "p50 ms", "p99 ms", "max ms", "no-fit ms", "no-fit repeat ms",
              "all-nodes ms",
              "add µs", "update µs", "delete µs", "peak RSS MiB")
    widths = [max(12, len(h)) for h in header]
    print(" | ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    print("-|-".join("-" * w for w in widths))
    for f in rows:
        for policy, times in f.decisions.items():
            ms = [t * 1e3 for t in times]
            cells = (f.nodes, f.pods, policy, f"{pct(ms, 0.5):.3f}", f"{pct(ms, 0.99):.3f}",
                     f"{max(ms):.3f}", f"{f.nofit_ms:.1f}", f"{f.nofit_repeat_ms:.2f}",
                     f"{f.all_nodes_ms:.1f}", f"{f.add_us:.1f}",
                     f"{f.update_us:.1f}", f"{f.delete_us:.1f}", f"{f.rss_mib:.0f}")
            print(" | ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))
    print("\nno-fit = a request no node can take (every node evaluated for its reason);"
          "\nno-fit repeat = the same request again after one pod changed on one node (the other"
          " nodes' reasons come from the verdict cache);"
          "\nall-nodes = evaluate_all=True, the fit run on every node (HAMi's approach), for comparison;"
          "\nadd/update/delete = SchedulerState.on_pod / on_pod_deleted per pod event (decode + ledger"
          " + quota); update = a status-only change of a counted pod;"
          "\npeak RSS is the process maximum so far (cumulative over the rows above it).")


if __name__ == "__main__":
    main()
