"""Benchmark of `vgpu-scheduler simulate`: the whole loop (embedded cluster, informers, predicates,
extender filter and bind, device plugin) on a generated fleet and demo workload.

    .venv/bin/python bench/simulate.py                     # 10,000 pods on 1,000 nodes x 8 GPUs
    .venv/bin/python bench/simulate.py --nodes 100 --pods 1000 --seed 1 --provider ClusterAutoscalerProvider

Prints wall time, pods/s (pods bound per wall second) and scheduling cycles; not a pass/fail test.
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import sys
import time

from vgpu_scheduler.simulate.loop import run_to_result, simulate
from vgpu_scheduler.simulate.options import SimulationOptions
from vgpu_scheduler.simulate.providers import DEFAULT_PROVIDER, provider_names
from vgpu_scheduler.simulate.report import dumps_report
from vgpu_scheduler.simulate.workload import demo_workload
from vgpu_scheduler.standin.embedded.fleet import fleet


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--pods", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--provider", default=DEFAULT_PROVIDER, choices=provider_names())
    args = p.parse_args(argv)

    nodes = fleet(args.nodes, args.gpus)
    # The demo workload's UUID filters name GPUs of this fleet, so those pods can land.
    pool = [d for n in nodes[:16] for d in _gpu_uuids(n)]
    pods = demo_workload(args.pods, args.seed, uuid_pool=pool)
    started = time.perf_counter()
    cpu_started = time.process_time()
    options = SimulationOptions(provider=args.provider, seed=args.seed)
    result = run_to_result(simulate(nodes, pods, options=options))
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    summary = result.report["summary"]
    scheduled = summary["pods"]["scheduled"]
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"fleet: {args.nodes} nodes x {args.gpus} GPUs; workload: {args.pods} pods (seed {args.seed}); "
          f"provider {args.provider}")
    print(f"scheduled {scheduled}, pending {summary['pods']['pending']}, cycles {result.cycles}, "
          f"simulated makespan {summary['makespan_seconds']} s")
    print(f"wall time {wall:.2f} s (loop {result.wall_seconds:.2f} s): {scheduled / wall:.1f} pods/s, "
          f"{result.cycles / result.wall_seconds:.1f} cycles/s; CPU time {cpu:.2f} s; "
          f"max RSS {rss_mib:.0f} MiB")
    # Same inputs must give the same report whatever the loop's speed: compare this across versions.
    print(f"report sha256 {hashlib.sha256(dumps_report(result.report).encode()).hexdigest()}")
    return 0


def _gpu_uuids(node: dict[str, object]) -> list[str]:
    from vgpu_scheduler.wire.inventory import decode_node_devices
    from vgpu_scheduler.wire.keys import NODE_NVIDIA_REGISTER

    meta = node["metadata"]
    assert isinstance(meta, dict)
    return [d.id for d in decode_node_devices(meta["annotations"][NODE_NVIDIA_REGISTER])]


if __name__ == "__main__":
    sys.exit(main())
