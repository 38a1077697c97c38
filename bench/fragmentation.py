"""How many pods each GPU policy places on a fleet that fills up, measured two ways.

Replays traces through the simulator (the scheduler's own code, simulated time) on the demo fleet
(16 nodes x 8 GPUs, A100-80GB and V100-32GB). Every pod arrives at once and none finishes, so the
fleet fills up and the policies differ only in how well they pack. Per trace, node policy and GPU
policy it prints:

  admitted in order  the pods placed, in the queue's order (priority, then arrival), before the
                     first pod that has to wait (pods pinned to named GPUs left out). This is what a
                     strict-FIFO batch queue admits, and a policy gains nothing by keeping large pods
                     out: the first one refused ends the count. `bound` is an upper bound for any
                     policy (the longest prefix whose total demand fits the fleet's totals).
  pods placed (fill) every pod that found room before the fleet was full, large ones skipped or
                     not: kube-scheduler's queue lets small pods pass a waiting large one, so this
                     count rewards a policy that keeps large pods out (HAMi's spread does).
  free memory when the first pod waits: GPU memory left idle while the head of the queue waits
                     (a rerun of the pods up to it; same pods, same decisions).
  stranded           free GPU memory at the end of the fill that no pending pod can use (all of
                     it, as the fill ends when nothing pending fits).

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
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.simulate.loop import simulate
from vgpu_scheduler.simulate.options import SimulationOptions
from vgpu_scheduler.simulate.workload import GPU, GPUCORES, GPUMEM, GPUMEM_PERCENTAGE, demo_workload
from vgpu_scheduler.standin.embedded.fleet import demo_fleet
from vgpu_scheduler.standin.embedded.runtime import DURATION_ANNOTATION
from vgpu_scheduler.wire.keys import GPU_SCHEDULER_POLICY, NODE_SCHEDULER_POLICY, USE_GPUUUID

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


# -- the two measures ----------------------------------------------------------------------------


def admission_order(pods: list[dict[str, Any]]) -> list[int]:
    """The order the simulated kube-scheduler takes pods that all arrive at once: higher priority
    first, then input order (its queue's order)."""
    return sorted(range(len(pods)), key=lambda i: (-int(pods[i]["spec"].get("priority") or 0), i))


def pinned(pod: dict[str, Any]) -> bool:
    """Pinned to named GPUs: such a pod waits for those GPUs by design, whatever the policy."""
    return USE_GPUUUID in (pod["metadata"].get("annotations") or {})


def admitted_in_order(pods: list[dict[str, Any]], nodes: list[str | None]) -> int:
    """Pods placed, in admission order, before the first pod that has to wait (`nodes[i]` is where
    pod i ended, None when pending). Pods pinned to named GPUs are left out on both sides.

    This is what a strict-FIFO batch queue admits (Kueue's StrictFIFO, Volcano's FIFO queues): the
    head of the queue blocks the rest, so a policy gains nothing by leaving large pods out; and it
    is when the first user of a shared fleet starts asking why a pod is pending."""
    count = 0
    for i in admission_order(pods):
        if pinned(pods[i]):
            continue
        if nodes[i] is None:
            break
        count += 1
    return count


@dataclass(frozen=True, slots=True)
class Card:
    devmem: int
    devcore: int
    count: int


@dataclass(frozen=True, slots=True)
class Ask:
    """One container's GPU request: `nums` devices, each with `mem` MiB (or `pct` % of the card's
    memory when `mem` is None) and `cores` %."""

    nums: int
    mem: int | None
    pct: int
    cores: int

    def memory_on(self, devmem: int) -> int:
        return self.mem if self.mem is not None else devmem * self.pct // 100


def asks(pod: dict[str, Any]) -> list[Ask]:
    """The GPU requests of the pod's app containers (init containers are left out: leaving demand
    out only raises a bound)."""
    out = []
    for container in pod["spec"].get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        nums = int(limits.get(GPU, 0))
        if nums <= 0:
            continue
        mem = int(limits[GPUMEM]) if GPUMEM in limits else None
        pct = int(limits.get(GPUMEM_PERCENTAGE, 100))
        out.append(Ask(nums, mem, pct, int(limits.get(GPUCORES, 0))))
    return out


def admission_bound(pods: list[dict[str, Any]], cards: list[Card]) -> int:
    """An upper bound on `admitted_in_order` for any policy: the pods of the longest prefix (in
    admission order, pinned pods left out) whose total demand fits the fleet's totals. For each card
    size s, the pods that only fit cards of size >= s must fit those cards' memory, cores, shares and
    (pods asking every core) number of cards. Packing is ignored, so no real placement does better."""
    sizes = sorted({c.devmem for c in cards})
    totals = {s: [0, 0, 0, 0] for s in sizes}  # memory, cores, shares, whole cards on cards >= s
    for c in cards:
        for s in sizes:
            if c.devmem >= s:
                t = totals[s]
                t[0] += c.devmem
                t[1] += c.devcore
                t[2] += c.count
                t[3] += 1
    used = {s: [0, 0, 0, 0] for s in sizes}
    count = 0
    for i in admission_order(pods):
        if pinned(pods[i]):
            continue
        for ask in asks(pods[i]):
            holders = [s for s in sizes if ask.memory_on(s) <= s]
            if not holders:
                return count
            smallest = holders[0]  # it sits on a card of this size or larger: counts for every s <= it
            for s in sizes:
                if s > smallest:
                    break
                u = used[s]
                u[0] += ask.nums * ask.memory_on(smallest)
                u[1] += ask.nums * ask.cores
                u[2] += ask.nums
                u[3] += ask.nums if ask.cores >= 100 else 0
        if any(u > t for s in sizes for u, t in zip(used[s], totals[s], strict=True)):
            return count
        count += 1
    return count


def first_wait(pods: list[dict[str, Any]], nodes: list[str | None]) -> int | None:
    """Position in admission order of the first pod that waits (pinned pods left out), if any."""
    for k, i in enumerate(admission_order(pods)):
        if nodes[i] is None and not pinned(pods[i]):
            return k
    return None


def run(trace: str, n: int, seed: int, node_policy: str, gpu_policy: str) -> dict[str, Any]:
    pods = TRACES[trace](n, random.Random(seed))
    options = SimulationOptions(node_scheduler_policy=node_policy, gpu_scheduler_policy=gpu_policy)
    result = asyncio.run(simulate(demo_fleet(), pods, options=options))
    summary = result.report["summary"]
    nodes = [p["node"] for p in result.report["pods"]]
    cards = [Card(d["devmem"], d["devcore"], d["count"]) for d in result.report["devices"]]
    memory = summary["allocation"]["memory"]
    idle_mib = memory["capacity_mib"] - memory["allocated_mib"]
    k = first_wait(pods, nodes)
    if k is not None:
        # The fleet as the first pod starts waiting: the same pods up to it, the same decisions.
        prefix = [pods[i] for i in admission_order(pods)[: k + 1]]
        again = asyncio.run(simulate(demo_fleet(), prefix, options=options)).report["summary"]
        memory = again["allocation"]["memory"]
        idle_mib = memory["capacity_mib"] - memory["allocated_mib"]
    return {
        "admitted": admitted_in_order(pods, nodes),
        "idle_at_wait_mib": idle_mib,
        "bound": admission_bound(pods, cards),
        "placed": summary["pods"]["scheduled"],
        "total": summary["pods"]["total"],
        "free_mib": summary["fragmentation"]["free_memory_mib"],
        "stranded_mib": summary["fragmentation"]["fragmented_memory_mib"],
        "memory_ratio": summary["allocation"]["memory"]["ratio"],
        "core_ratio": summary["allocation"]["cores"]["ratio"],
        "wall_s": result.wall_seconds,
    }


Row = tuple[str, str, str, dict[str, Any]]


def best(
    rows: list[Row], trace: str, gpu_policies: tuple[str, ...], measure: str
) -> tuple[int, str, dict[str, Any]]:
    """The highest `measure` of the trace over the GPU policies and both node policies, the
    "node/GPU" policy pair that reached it (the first one on ties), and that run's figures."""
    value, name, found = -1, "", {}
    for t, node, gpu, r in rows:
        if t == trace and gpu in gpu_policies and r[measure] > value:
            value, name, found = r[measure], f"{node}/{gpu}", r
    return value, name, found


def _gain(ours: int, theirs: int) -> str:
    return f"{(ours - theirs) / theirs * 100:+.1f} %" if theirs else "n/a"


def _stranded(r: dict[str, Any]) -> str:
    return f"{r['stranded_mib'] / GIB:,.0f} GiB"


def summary_table(rows: list[Row], traces: list[str]) -> list[str]:
    """One line per trace, each GPU policy at its best node policy for the measure; HAMi's best is
    the best of its four node/GPU pairs. Free memory when the first pod waits is that of the
    admission's best run, stranded memory that of the fill's best run."""
    out = [
        "| trace | admitted in order: binpack / spread / best-fit | bound | best-fit vs HAMi's best | "
        "pods placed (fill): binpack / spread / best-fit | best-fit vs HAMi's best | "
        "free memory when the first pod waits: binpack / spread / best-fit | "
        "stranded at the end of the fill: binpack / spread / best-fit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for trace in traces:
        firsts = [best(rows, trace, (g,), "admitted") for g in (*HAMI_POLICIES, OURS)]
        admitted = [f[0] for f in firsts]
        idle = " / ".join(f"{f[2]['idle_at_wait_mib'] / GIB:,.0f} GiB" for f in firsts)
        fills = [best(rows, trace, (g,), "placed") for g in (*HAMI_POLICIES, OURS)]
        placed = [f[0] for f in fills]
        bound = next(r["bound"] for t, _, _, r in rows if t == trace)
        out.append(
            f"| {trace} | {' / '.join(f'{a:,}' for a in admitted)} | {bound:,} | "
            f"{_gain(admitted[2], max(admitted[:2]))} | {' / '.join(f'{p:,}' for p in placed)} | "
            f"{_gain(placed[2], max(placed[:2]))} | {idle} | {' / '.join(_stranded(f[2]) for f in fills)} |"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=1500, help="pods per trace (default 1500)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--plot", metavar="FILE.png", help="bar chart of both measures (needs matplotlib)")
    args = parser.parse_args(argv)
    traces = [t for t in args.traces.split(",") if t]
    unknown = [t for t in traces if t not in TRACES]
    if unknown:
        parser.error(f"unknown trace(s) {', '.join(unknown)} (known: {', '.join(TRACES)})")
    rows: list[Row] = []
    print(f"{args.pods} pods per trace, seed {args.seed}, demo fleet (16 nodes x 8 GPUs)\n")
    print("| trace | node policy | GPU policy | admitted in order | free memory when the first pod waits | "
          "pods placed (fill) | free memory stranded (fill) | memory allocated | cores allocated |")
    print("|---|---|---|---|---|---|---|---|---|")
    started = time.perf_counter()
    for trace in traces:
        for node_policy in NODE_POLICIES:
            for gpu_policy in (*HAMI_POLICIES, OURS):
                r = run(trace, args.pods, args.seed, node_policy, gpu_policy)
                stranded = r["stranded_mib"] / r["free_mib"] * 100 if r["free_mib"] else 0.0
                print(f"| {trace} | {node_policy} | {gpu_policy} | {r['admitted']:,} | "
                      f"{r['idle_at_wait_mib'] / GIB:,.0f} GiB | {r['placed']:,} | "
                      f"{r['stranded_mib'] / GIB:,.0f} GiB ({stranded:.1f} %) | "
                      f"{r['memory_ratio'] * 100:.1f} % | {r['core_ratio'] * 100:.1f} % |", flush=True)
                rows.append((trace, node_policy, gpu_policy, r))
    print("\nEach GPU policy at its best node policy; HAMi's best is the best of its four node/GPU pairs.\n")
    print("\n".join(summary_table(rows, traces)))
    print(f"\n{time.perf_counter() - started:.0f} s of wall time", file=sys.stderr)
    if args.plot:
        _plot(rows, traces, args.plot)
    return 0


def _plot(rows: list[Row], traces: list[str], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = [*HAMI_POLICIES, OURS]
    fig, axes = plt.subplots(2, 1, figsize=(max(7, 1.5 * len(traces)), 7))
    width = 0.8 / len(policies)
    xs = range(len(traces))
    for ax, measure, title in (
        (axes[0], "admitted", "Pods admitted in order before the first one waits (bound: any policy)"),
        (axes[1], "placed", "Pods placed before the fleet is full (pods may be skipped)"),
    ):
        for j, policy in enumerate(policies):
            values = [best(rows, t, (policy,), measure)[0] for t in traces]
            ax.bar([i + j * width for i in xs], values, width, label=f"GPU {policy} (best node policy)")
        if measure == "admitted":
            bounds = [next(r["bound"] for t2, _, _, r in rows if t2 == t) for t in traces]
            ax.scatter([i + width for i in xs], bounds, marker="_", s=400, color="black", label="bound")
        ax.set_xticks([i + width * (len(policies) - 1) / 2 for i in xs])
        ax.set_xticklabels(traces, fontsize=8)
        ax.set_ylabel("pods")
        ax.set_title(title, fontsize=10)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
