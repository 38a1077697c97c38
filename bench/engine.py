"""Benchmark of the scheduling engine: ledger updates and filter decisions (no HTTP).

    .venv/bin/python bench/engine.py [--quick] [--fleet nvidia|mixed] [--repeat K]

Builds clusters of N nodes × 8 GPUs (count 20, 80 GiB, 100 cores) with 10 existing allocations per
GPU, fed as real pod objects (hami.io/vgpu-node + -allocated annotations) through SchedulerState,
then times `decide` over every node as candidate for mixed 1-GPU slice requests, reserving each
decision as the live path does. Figures are printed as a table; nothing here is a pass/fail test.

`--fleet mixed` (500 nodes): a quarter each of the NVIDIA nodes above, Ascend 910B3 nodes (8 NPUs
with NetworkIDs, 3 template-sized allocations each), Metax sGPU nodes (8 sGPUs, 10 allocations
each) and Metax whole-GPU nodes (8 GPUs, 4 taken), registered from node objects through the
vendors (--enable-ascend, the chart's device config) with their existing allocations as real pod
objects; the requests cycle over the four kinds. Its p99 compares with the NVIDIA-only 500-node row.

Each row's decisions are also timed in CPU time (this thread): on a shared machine the wall p99 is
set by waits for a core, alike for every fleet. CPU time still grows when other processes share the
caches; `--repeat K` builds and decides everything K times, each in a fresh process (the same seed:
the same decisions, each as cold as in the first run), and also prints the percentiles of each
decision's least CPU time over the K runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import multiprocessing
import random
import resource
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.configfile import default_device_config
from vgpu_scheduler.devices.protocol import VendorFlags, Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoFit, decide
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.gctuning import settle_heap
from vgpu_scheduler.model import DeviceInfo
from vgpu_scheduler.wire import keys

VENDORS = build()
GPUS_PER_NODE = 8
ALLOCS_PER_GPU = 10
FLEETS = {
    "nvidia": "NVIDIA only",
    "mixed": "NVIDIA + Ascend 910B3 + Metax sGPU + Metax GPU nodes, a quarter each",
}
# The mixed fleet's node kinds, node n is KINDS[n % 4]; requests cycle over them the same way.
KINDS = ("nvidia", "ascend", "sgpu", "metax-gpu")
ASCEND_ALLOCS_PER_NPU = 3  # template-sized (8-16 GiB of 64 GiB), so every NPU keeps room for one more
METAX_GPUS_TAKEN = 4  # whole GPUs already allocated on each Metax GPU node (devices 0..3)


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
    by_kind: dict[str, list[float]] = field(default_factory=dict)
    """Mixed fleet: decision times per request kind, both policies."""
    cpu: dict[str, list[float]] = field(default_factory=dict)
    """The decisions' CPU time (this thread), per policy: wall times on a shared machine include
    waits for the core."""


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


# -- the mixed fleet ----------------------------------------------------------------------------


def mixed_vendors() -> Vendors:
    """Every vendor of the chart's device config, Ascend included (the scheduler's --enable-ascend)."""
    return build(default_device_config(), VendorFlags(enable_ascend=True))


def node_name(n: int) -> str:
    return f"node-{n:05d}"


def kind_of(fleet: str, n: int) -> str:
    return "nvidia" if fleet == "nvidia" else KINDS[n % len(KINDS)]


def node_object(kind: str, n: int) -> dict[str, Any]:
    """A node as the vendor's device plugin registers it (inventory annotation, count capacity)."""
    if kind == "ascend":
        npus = [{"id": f"NPU-{n:05d}-{i}", "index": i, "count": 4, "devmem": 65536, "devcore": 20,
                 "type": "Ascend910B3", "health": True, "custominfo": {"NetworkID": i // 4}}
                for i in range(GPUS_PER_NODE)]
        annotations = {"hami.io/node-register-Ascend910B3": json.dumps(npus)}
        capacity = {"huawei.com/Ascend910B3": str(GPUS_PER_NODE)}
    elif kind == "sgpu":
        sgpus = [{"uuid": f"SGPU-{n:05d}-{i}", "model": "C500", "totalDevCount": 16, "totalCompute": 100,
                  "totalVRam": 65536, "numa": i // 4, "healthy": True, "qosPolicy": "best-effort",
                  "linkZone": 1 + i // 4} for i in range(GPUS_PER_NODE)]
        annotations = {"metax-tech.com/node-gpu-devices": json.dumps(sgpus)}
        capacity = {"metax-tech.com/sgpu": str(16 * GPUS_PER_NODE)}
    else:  # metax-gpu: the inventory is the count capacity; the plugin adds topology losses/scores
        annotations = {"metax-tech.com/gpu.topology.losses": '{"1":0,"2":0,"4":100,"8":300}',
                       "metax-tech.com/gpu.topology.scores": '{"1":0,"2":0,"4":0,"8":0}'}
        capacity = {"metax-tech.com/gpu": str(GPUS_PER_NODE)}
    return {"metadata": {"name": node_name(n), "annotations": annotations},
            "status": {"capacity": capacity, "allocatable": capacity}}


def registered_devices(vendors: Vendors, node: dict[str, Any]) -> list[DeviceInfo]:
    """The node's devices of every vendor, in registration order (as the registration loop does)."""
    devices: list[DeviceInfo] = []
    for vendor in vendors:
        try:
            devices.extend(vendor.node_devices(node))
        except ValueError:  # InventoryError: not this vendor's node
            continue
    return devices


def bound_pod(name: str, node: int, allocation: dict[str, str], extra: dict[str, str] | None = None
              ) -> dict[str, Any]:
    """A running pod holding `allocation` (vendor annotation -> value) on node `node`."""
    return {
        "metadata": {
            "name": name,
            "namespace": f"ns-{node % 50}",
            "uid": f"uid-{name}",
            "annotations": {
                keys.VGPU_NODE: node_name(node),
                keys.VGPU_TIME: "1764400000",
                keys.BIND_PHASE: "success",
                **allocation,
                **(extra or {}),
            },
        },
        "spec": {"containers": [{"name": "main"}]},
        "status": {"phase": "Running"},
    }


def existing_pods(rng: random.Random, kind: str, n: int, i: int) -> Iterator[dict[str, Any]]:
    """The existing allocations on device `i` of node `n` (lazily: the NVIDIA fleet draws its random
    numbers in the same order as before the mixed fleet existed)."""
    if kind == "nvidia":
        for k in range(ALLOCS_PER_GPU):
            yield existing_pod(rng, n, i, k)
    elif kind == "ascend":
        for k in range(ASCEND_ALLOCS_PER_NPU):
            mem = rng.choice((8192, 16384))
            yield bound_pod(f"w-{n}-{i}-{k}", n, {
                "hami.io/Ascend910B3-devices-allocated": f"NPU-{n:05d}-{i},Ascend910B3,{mem},0:;",
                "hami.io/Ascend910B3-devices-to-allocate": ";",
            })
    elif kind == "sgpu":
        for k in range(ALLOCS_PER_GPU):
            mem, cores = rng.choice((1024, 2048, 4096)), rng.choice((0, 2, 5))
            yield bound_pod(f"w-{n}-{i}-{k}", n, {
                "hami.io/metax-sgpu-devices-allocated": f"SGPU-{n:05d}-{i},Metax-SGPU,{mem},{cores}:;",
                "hami.io/metax-sgpu-devices-to-allocate": ";",
            }, {"metax-tech.com/sgpu-qos-policy": "best-effort"})
    elif i < METAX_GPUS_TAKEN:
        yield bound_pod(f"w-{n}-{i}-0", n, {
            "hami.io/metax-gpu-devices-allocated": f"{node_name(n)}-metax-{i},Metax-GPU,65536,100:;",
            "hami.io/metax-gpu-devices-to-allocate": ";",
        })


def mixed_request_pod(rng: random.Random, n: int, policy: str) -> dict[str, Any]:
    """Request n of the mixed fleet: the kinds in turn, each a 1-device slice as its webhook leaves it."""
    kind = KINDS[n % len(KINDS)]
    if kind == "nvidia":
        return request_pod(rng, n, policy)
    pod = request_pod(rng, n, policy)
    annotations = pod["metadata"]["annotations"]
    if kind == "ascend":
        limits = {"huawei.com/Ascend910B3": "1",
                  "huawei.com/Ascend910B3-memory": str(rng.choice((16384, 32768)))}
    elif kind == "sgpu":
        limits = {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": str(rng.choice((5, 10, 20))),
                  "metax-tech.com/vmemory": str(rng.choice((1, 2, 4)))}
        annotations["metax-tech.com/sgpu-qos-policy"] = "best-effort"
    else:
        limits = {"metax-tech.com/gpu": "1"}
    pod["spec"]["containers"][0]["resources"]["limits"] = limits
    return pod


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def run(n_nodes: int, decisions: int, seed: int = 1, fleet: str = "nvidia") -> Figures:
    rng = random.Random(seed)
    vendors = VENDORS if fleet == "nvidia" else mixed_vendors()
    make_request = request_pod if fleet == "nvidia" else mixed_request_pod
    state = SchedulerState(vendors)
    names = [node_name(n) for n in range(n_nodes)]
    kinds = [kind_of(fleet, n) for n in range(n_nodes)]
    nvidia_nodes = [n for n, kind in enumerate(kinds) if kind == "nvidia"]
    for n, name in enumerate(names):
        if kinds[n] == "nvidia":
            state.set_node_devices(name, [gpu(n, i) for i in range(GPUS_PER_NODE)])
        else:
            node = node_object(kinds[n], n)
            state.set_node_devices(name, registered_devices(vendors, node),
                                   annotations=node["metadata"]["annotations"])

    # Pod events: add everything (as a relist would), then update and delete a sample.
    gc.collect()
    add_total = 0.0
    pods = 0
    sample: list[dict[str, Any]] = []
    for n in range(n_nodes):
        for i in range(GPUS_PER_NODE):
            for pod in existing_pods(rng, kinds[n], n, i):
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

    # As the server does once its informers have synced (server.main.settle_heap): the long-lived
    # caches are frozen out of the cyclic GC, so a full collection does not land in a decision.
    settle_heap()
    results: dict[str, list[float]] = {}
    by_kind: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for policy in ("binpack", "spread"):
        times = []
        cpu_times = cpu.setdefault(policy, [])
        for d in range(decisions):
            pod = make_request(rng, d, policy)
            cpu_start = time.thread_time()
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
            cpu_times.append(time.thread_time() - cpu_start)
            if fleet != "nvidia":
                by_kind.setdefault(KINDS[d % len(KINDS)], []).append(times[-1])
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
        state.on_pod(existing_pod(rng, nvidia_nodes[r], 0, ALLOCS_PER_GPU + r))
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
        by_kind=by_kind,
        cpu=cpu,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 nodes only, 50 decisions")
    parser.add_argument("--fleet", choices=tuple(FLEETS), default="nvidia",
                        help="nvidia (500 and 5,000 nodes) or mixed (500 nodes; see the module doc)")
    parser.add_argument("--repeat", type=int, default=1, metavar="K",
                        help="run K times; also print each decision's least CPU time over the runs")
    args = parser.parse_args()
    sizes = [500] if args.quick or args.fleet != "nvidia" else [500, 5000]
    decisions = 50 if args.quick else 200
    rows = []
    least: list[dict[str, list[float]]] = []  # with --repeat: each decision's least CPU time
    for n in sizes:
        print(f"building {n} nodes × {GPUS_PER_NODE} devices ({FLEETS[args.fleet]}) ...",
              file=sys.stderr, flush=True)
        if args.repeat == 1:
            rows.append(run(n, decisions, fleet=args.fleet))
            continue
        # Each run in a process forked from this one, which has run nothing: no run warms another.
        with multiprocessing.get_context("fork").Pool(1, maxtasksperchild=1) as pool:
            runs = [pool.apply(run, (n, decisions), {"fleet": args.fleet}) for _ in range(args.repeat)]
        rows.append(runs[0])
        least.append({policy: [min(ts) for ts in zip(*(r.cpu[policy] for r in runs), strict=True)]
                      for policy in runs[0].cpu})

    print(f"\nPython {sys.version.split()[0]}, one core; fleet: {FLEETS[args.fleet]}; {decisions} decisions "
          "per policy, every node a candidate\n")
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
    for f in rows:
        cells = []
        for policy, ts in f.cpu.items():
            ms = [t * 1e3 for t in ts]
            cells.append(f"{policy} p50 {pct(ms, 0.5):.3f} ms, p99 {pct(ms, 0.99):.3f} ms")
        print(f"{f.nodes} nodes, decision CPU time (this thread): " + "; ".join(cells))
    for f, per_policy in zip(rows, least, strict=False):
        cells = [f"{policy} p50 {pct([t * 1e3 for t in ts], 0.5):.3f} ms, "
                 f"p99 {pct([t * 1e3 for t in ts], 0.99):.3f} ms" for policy, ts in per_policy.items()]
        print(f"{f.nodes} nodes, each decision's least CPU time over {args.repeat} runs: " + "; ".join(cells))
    for f in rows:
        for kind, times in f.by_kind.items():
            ms = [t * 1e3 for t in times]
            print(f"{f.nodes} nodes, {kind} requests ({len(ms)}, both policies): "
                  f"p50 {pct(ms, 0.5):.3f} ms, p99 {pct(ms, 0.99):.3f} ms")
    print("\nno-fit = a request no node can take (every node evaluated for its reason);"
          "\nno-fit repeat = the same request again after one pod changed on one node (the other"
          " nodes' reasons come from the verdict cache);"
          "\nall-nodes = evaluate_all=True, the fit run on every node (HAMi's approach), for comparison;"
          "\nadd/update/delete = SchedulerState.on_pod / on_pod_deleted per pod event (decode + ledger"
          " + quota); update = a status-only change of a counted pod;"
          "\npeak RSS is the process maximum so far (cumulative over the rows above it).")


if __name__ == "__main__":
    main()
