"""How many pods each GPU policy places before the fleet is full, and how much memory it strands.

Replays traces through the simulator (the scheduler's own code, simulated time) on the demo fleet
(16 nodes x 8 GPUs, A100-80GB and V100-32GB). Pods never finish, so the fleet fills up and the
policies differ only in how well they pack. For each trace and node policy it prints, per GPU
policy, the pods placed and the free GPU memory no pending pod can use (`fragmented`).

Traces (pod annotations choosing a policy are dropped so the run's policy applies to every pod):
  demo          the simulator's demo workload (whole cards, slices, percentages, multi-GPU, ...)
  small-slices  many small slices: 2-8 GiB, 5-20 cores
  large-small   whole cards, large slices (40 GiB / 50 cores) and small slices mixed
  infer-train   memory-heavy inference pods (16-24 GiB, 10 cores) beside compute-heavy ones
                (4 GiB, 40-60 cores)
  inference     memory-only serving pods (no core limit): 60 % of 1-2 GiB, 30 % of 8-16 GiB,
                10 % of 40 GiB
  training      half GPUs (40 GiB / 50 cores, 45 %), quarter GPUs (20 GiB / 25 cores, 35 %) and
                notebooks (4 GiB / 10 cores, 20 %)
  serve-then-train  two thirds serving slices (12-16 GiB / 5 cores or 2 GiB / 30-40 cores), then
                whole-GPU training jobs

    .venv/bin/python bench/fragmentation.py [--pods N] [--seed N] [--traces a,b] [--plot FILE.png]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from vgpu_scheduler.cluster.embedded.fleet import demo_fleet
from vgpu_scheduler.cluster.embedded.runtime import DURATION_ANNOTATION
from vgpu_scheduler.simulate.loop import SimulationOptions, simulate
from vgpu_scheduler.simulate.workload import demo_workload
from vgpu_scheduler.wire.keys import GPU_SCHEDULER_POLICY, NODE_SCHEDULER_POLICY

GIB = 1024
HAMI_POLICIES = ("binpack", "spread")
OURS = "best-fit"
NODE_POLICIES = ("binpack", "spread")


def _pod(i: int, limits: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p-{i:05d}", "namespace": "default"},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{"name": "c", "image": "cuda", "resources": {"limits": limits}}],
        },
    }


def _slice(mem_gib: int, cores: int) -> dict[str, Any]:
    return {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mem_gib * GIB, "nvidia.com/gpucores": cores}


def small_slices(n: int, rng: random.Random) -> list[dict[str, Any]]:
    return [_pod(i, _slice(rng.choice((2, 4, 6, 8)), rng.choice((5, 10, 15, 20)))) for i in range(n)]


def large_small(n: int, rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        roll = rng.random()
        if roll < 0.15:
            limits = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}
        elif roll < 0.45:
            limits = _slice(40, 50)
        else:
            limits = _slice(rng.choice((4, 8)), rng.choice((10, 20)))
        out.append(_pod(i, limits))
    return out


def infer_train(n: int, rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        if rng.random() < 0.5:
            limits = _slice(rng.choice((16, 20, 24)), 10)
        else:
            limits = _slice(4, rng.choice((40, 50, 60)))
        out.append(_pod(i, limits))
    return out


def inference(n: int, rng: random.Random) -> list[dict[str, Any]]:
    """Memory-only serving pods (no core limit: they share compute), mostly small."""
    out = []
    for i in range(n):
        roll = rng.random()
        mem = rng.choice((1, 2)) if roll < 0.6 else rng.choice((8, 12, 16)) if roll < 0.9 else 40
        out.append(_pod(i, {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mem * GIB}))
    return out


def training(n: int, rng: random.Random) -> list[dict[str, Any]]:
    """A training cluster: half and quarter GPUs, a few notebooks."""
    out = []
    for i in range(n):
        roll = rng.random()
        limits = _slice(40, 50) if roll < 0.45 else _slice(20, 25) if roll < 0.8 else _slice(4, 10)
        out.append(_pod(i, limits))
    return out


def serve_then_train(n: int, rng: random.Random) -> list[dict[str, Any]]:
    """Serving pods first (memory-heavy and compute-heavy slices), then whole-GPU training jobs."""
    out = []
    serving = n * 2 // 3
    for i in range(n):
        if i < serving:
            memory_heavy = rng.random() < 0.5
            limits = _slice(rng.choice((12, 16)), 5) if memory_heavy else _slice(2, rng.choice((30, 40)))
        else:
            limits = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}
        out.append(_pod(i, limits))
    return out


def demo(n: int, rng: random.Random) -> list[dict[str, Any]]:
    pods = demo_workload(n, rng.randrange(1 << 30))
    for pod in pods:
        annotations = pod["metadata"].get("annotations") or {}
        for key in (DURATION_ANNOTATION, GPU_SCHEDULER_POLICY, NODE_SCHEDULER_POLICY):
            annotations.pop(key, None)
    return pods


TRACES: dict[str, Callable[[int, random.Random], list[dict[str, Any]]]] = {
    "demo": demo,
    "small-slices": small_slices,
    "large-small": large_small,
    "infer-train": infer_train,
    "inference": inference,
    "training": training,
    "serve-then-train": serve_then_train,
}


def run(trace: str, n: int, seed: int, node_policy: str, gpu_policy: str) -> dict[str, Any]:
    pods = TRACES[trace](n, random.Random(seed))
    options = SimulationOptions(node_scheduler_policy=node_policy, gpu_scheduler_policy=gpu_policy)
    result = asyncio.run(simulate(demo_fleet(), pods, options=options))
    summary = result.report["summary"]
    gpu_pods = [p for p in result.report["pods"] if "nvidia.com/gpu" in str(p)]
    return {
        "placed": summary["pods"]["scheduled"],
        "total": summary["pods"]["total"],
        "gpu_pods": len(gpu_pods),
        "free_mib": summary["fragmentation"]["free_memory_mib"],
        "stranded_mib": summary["fragmentation"]["fragmented_memory_mib"],
        "memory_ratio": summary["allocation"]["memory"]["ratio"],
        "core_ratio": summary["allocation"]["cores"]["ratio"],
        "wall_s": result.wall_seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=1500, help="pods per trace (default 1500)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--plot", metavar="FILE.png", help="bar chart of pods placed (needs matplotlib)")
    args = parser.parse_args(argv)
    traces = [t for t in args.traces.split(",") if t]
    unknown = [t for t in traces if t not in TRACES]
    if unknown:
        parser.error(f"unknown trace(s) {', '.join(unknown)} (known: {', '.join(TRACES)})")
    rows: list[tuple[str, str, str, dict[str, Any]]] = []
    print(f"{args.pods} pods per trace, seed {args.seed}, demo fleet (16 nodes x 8 GPUs)\n")
    print("| trace | node policy | GPU policy | pods placed | vs HAMi's best | free memory stranded | "
          "memory allocated | cores allocated |")
    print("|---|---|---|---|---|---|---|---|")
    started = time.perf_counter()
    for trace in traces:
        for node_policy in NODE_POLICIES:
            results = {g: run(trace, args.pods, args.seed, node_policy, g) for g in (*HAMI_POLICIES, OURS)}
            best_hami = max(results[g]["placed"] for g in HAMI_POLICIES)
            for gpu_policy, r in results.items():
                gain = (r["placed"] - best_hami) / best_hami * 100 if best_hami else 0.0
                stranded = r["stranded_mib"] / r["free_mib"] * 100 if r["free_mib"] else 0.0
                print(f"| {trace} | {node_policy} | {gpu_policy} | {r['placed']:,} | {gain:+.1f} % | "
                      f"{r['stranded_mib'] / GIB:,.0f} GiB ({stranded:.1f} %) | "
                      f"{r['memory_ratio'] * 100:.1f} % | {r['core_ratio'] * 100:.1f} % |", flush=True)
                rows.append((trace, node_policy, gpu_policy, r))
    print(f"\n{time.perf_counter() - started:.0f} s of wall time", file=sys.stderr)
    if args.plot:
        _plot(rows, args.plot)
    return 0


def _plot(rows: list[tuple[str, str, str, dict[str, Any]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(t, n) for t, n, _, _ in rows}, key=lambda k: (list(TRACES).index(k[0]), k[1]))
    policies = [*HAMI_POLICIES, OURS]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups)), 4))
    width = 0.8 / len(policies)
    for j, policy in enumerate(policies):
        values = [next(r["placed"] for t, n, g, r in rows if (t, n, g) == (*k, policy)) for k in groups]
        ax.bar([i + j * width for i in range(len(groups))], values, width, label=f"GPU {policy}")
    ax.set_xticks([i + width * (len(policies) - 1) / 2 for i in range(len(groups))])
    ax.set_xticklabels([f"{t}\nnode {n}" for t, n in groups], fontsize=8)
    ax.set_ylabel("pods placed")
    ax.set_title("Pods placed before the demo fleet is full")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
