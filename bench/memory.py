"""Benchmark of what the scheduler keeps in memory per pod: the ledger, and the informer's pod cache.

    .venv/bin/python bench/memory.py [--nodes 5000] [--cache-pods 100000]

Ledger: N nodes × 8 GPUs with 10 counted pods per GPU (bench/engine.py's fleet: 400,000 pods at
5,000 nodes), fed as pod objects through SchedulerState; the process's resident memory before and
after the pods.

Informer cache: pods shaped like the one kube-apiserver v1.36 sent in the captured watch
(tests/fixtures/kube-1.36/api/watch-pods.stream.jsonl: a HAMi-annotated pod after its bind, with
managedFields, volumes, tolerations and conditions), each with its own name and uid, seeded in the
embedded API server; then the server's pod reflector lists them over the in-memory transport. The
figure is the resident memory the reflector's store adds once synced (the API server's own bytes
were counted before).

Each measure runs in its own fresh process; resident memory is read from /proc/self/statm (Linux).
Figures only; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import multiprocessing as mp
import random
import sys
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
CAPTURED_WATCH = BENCH_DIR.parent / "tests/fixtures/kube-1.36/api/watch-pods.stream.jsonl"
MIB = 2**20


def _engine_bench() -> Any:
    """bench/engine.py's fleet builders, loaded by path (bench/ is no package)."""
    spec = importlib.util.spec_from_file_location("bench_engine", BENCH_DIR / "engine.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_engine"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def resident_bytes() -> int:
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def ledger_figures(n_nodes: int) -> dict[str, float]:
    from vgpu_scheduler.engine.state import SchedulerState

    engine = _engine_bench()
    state = SchedulerState(engine.VENDORS)
    for n in range(n_nodes):
        state.set_node_devices(engine.node_name(n), [engine.gpu(n, i) for i in range(engine.GPUS_PER_NODE)])
    before = resident_bytes()
    rng = random.Random(1)
    pods = 0
    for n in range(n_nodes):
        for i in range(engine.GPUS_PER_NODE):
            for pod in engine.existing_pods(rng, "nvidia", n, i):
                state.on_pod(pod)
                pods += 1
    added = resident_bytes() - before
    return {"pods": pods, "mib": added / MIB, "bytes_per_pod": added / pods}


def captured_pod() -> dict[str, Any]:
    """The last version of the pod in the captured watch (bound, annotated, with managedFields)."""
    last: dict[str, Any] = {}
    for line in CAPTURED_WATCH.read_text().splitlines():
        event = json.loads(line)
        if event["type"] in ("ADDED", "MODIFIED"):
            last = event["object"]
    return last


def cache_figures(n_pods: int) -> dict[str, float]:
    return asyncio.run(_cache_figures(n_pods))


async def _cache_figures(n_pods: int) -> dict[str, float]:
    from vgpu_scheduler.cluster.client import KubeClient
    from vgpu_scheduler.cluster.reflector import Reflector
    from vgpu_scheduler.standin.memory import MemoryCluster
    from vgpu_scheduler.standin.transport import MemoryTransport

    template = captured_pod()
    sent = len(json.dumps(template, separators=(",", ":")))
    cluster = MemoryCluster()

    def variant(k: int) -> dict[str, Any]:
        pod = json.loads(json.dumps(template))
        pod["metadata"].update(name=f"pod-{k:06d}", uid=f"uid-{k:06d}", namespace=f"ns-{k % 50}")
        return pod

    cluster.seed_from_list(variant(k) for k in range(n_pods))
    reflector = Reflector(KubeClient(MemoryTransport(cluster)), "pods")
    before = resident_bytes()
    reflector.start()
    await reflector.wait_synced()
    added = resident_bytes() - before
    assert len(reflector.store) == n_pods
    await reflector.stop()
    return {"pods": n_pods, "sent": sent, "mib": added / MIB, "bytes_per_pod": added / n_pods}


def in_child(target: Any, *args: Any) -> dict[str, float]:
    """Run `target(*args)` in a fresh process (its own resident memory) and return its figures."""
    with mp.get_context("fork").Pool(1) as pool:
        result: dict[str, float] = pool.apply(target, args)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000, help="ledger: nodes of 8 GPUs, 10 pods per GPU")
    parser.add_argument("--cache-pods", type=int, default=100_000, help="pods in the informer cache measure")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}")
    ledger = in_child(ledger_figures, args.nodes)
    print(f"ledger: {args.nodes} nodes x 8 GPUs, {ledger['pods']:,.0f} counted pods: "
          f"{ledger['mib']:.0f} MiB, {ledger['bytes_per_pod']:.0f} bytes per pod")
    cache = in_child(cache_figures, args.cache_pods)
    print(f"informer cache: {cache['pods']:,.0f} pods of {cache['sent']:,.0f} bytes as kube-apiserver sends "
          f"them: {cache['mib']:.0f} MiB, {cache['bytes_per_pod']:.0f} bytes per pod")


if __name__ == "__main__":
    main()
