"""Chaos runs on a real control plane: randomized faults during a create/delete workload (issue 31).

    scripts/control-plane-build && .venv/bin/python bench/chaos.py \
        [--runs 1] [--seed N] [--nodes 100] [--gpus 8] [--seconds 300] [--rate 4] [--out runs.jsonl]

Each run starts a fresh control plane with two replicas of our server behind kube-scheduler's
extender (leader election on), the device-plugin stand-in, `--nodes` × `--gpus` devices, and runs
the workload and the nemesis (tests/chaos/) for `--seconds`; then the checker reads the history.
Per run: faults injected by kind, pods placed, violations, recovery after each fault kind; the
seed of every failing run is printed (`--seed N` replays its fault sequence). `--out` appends one
JSON line per run; at the end, the totals over all runs (the figures of docs/faults.md).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import traceback
from collections import Counter
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "tests" / "e2e"))
sys.path.insert(0, str(BENCH_DIR.parent / "tests" / "chaos"))
sys.path.insert(0, str(BENCH_DIR.parent))  # the repository root: pluginstandin imports tests.builders
from checker import percentile  # noqa: E402
from controlplane import ControlPlaneUnavailable, find_binaries_or_raise  # noqa: E402
from harness import ChaosConfig, RunResult, run_chaos  # noqa: E402
from nemesis import KINDS  # noqa: E402


def totals(results: list[RunResult]) -> str:
    faults: Counter[str] = Counter()
    recovery: dict[str, list[float]] = {}
    for r in results:
        faults.update(r.faults)
        for kind, values in r.recovery.items():
            recovery.setdefault(kind, []).extend(values)
    lines = [f"runs {len(results)}, minutes {sum(r.minutes for r in results):.1f}, "
             f"pods placed {sum(r.placed for r in results)}, created {sum(r.created for r in results)}, "
             f"violations {sum(len(r.violations) for r in results)}",
             f"{'fault kind':<24} {'injected':>8} {'recovery p50':>13} {'p99':>7}"]
    for kind in KINDS:
        values = recovery.get(kind, [])
        lines.append(f"{kind:<24} {faults.get(kind, 0):>8} {percentile(values, 0.5):>12.1f}s "
                     f"{percentile(values, 0.99):>6.1f}s")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--seed", type=int, help="the first run's seed (default: drawn); run i uses seed + i")
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--seconds", type=float, default=300.0, help="workload and faults, per run")
    p.add_argument("--rate", type=float, default=4.0, help="pods created per second")
    p.add_argument("--max-live", type=int, default=600, help="pods alive at most")
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS), help="fault kinds drawn from")
    p.add_argument("--out", type=Path, help="append one JSON line per run")
    p.add_argument("--keep-logs", action="store_true", help="keep each run's temp dir (component logs)")
    args = p.parse_args()
    try:
        bin_dir = find_binaries_or_raise()
    except ControlPlaneUnavailable as exc:
        print(exc)
        return 2
    first = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    results: list[RunResult] = []
    harness_errors: list[int] = []
    for i in range(args.runs):
        cfg = ChaosConfig(seed=first + i, nodes=args.nodes, gpus=args.gpus, seconds=args.seconds,
                          rate=args.rate, max_live=args.max_live, kinds=args.kinds, keep_logs=args.keep_logs)
        try:
            result = asyncio.run(run_chaos(cfg, bin_dir, log=lambda line: print(line, flush=True)))
        except Exception:  # the harness itself failed (not a verdict on our server): go on
            traceback.print_exc()
            print(f"   HARNESS ERROR in the run of seed {cfg.seed}", flush=True)
            harness_errors.append(cfg.seed)
            continue
        results.append(result)
        print(result.summary(), flush=True)
        print("   faults: " + ", ".join(f"{k} {v}" for k, v in sorted(result.faults.items())), flush=True)
        for note in result.notes[:10]:
            print(f"   note: {note}", flush=True)
        if not result.ok:
            print(f"   FAILED: replay with --seed {result.seed}", flush=True)
            for v in result.violations[:20]:
                print(f"   {v.kind} at {v.t:.1f}: {v.message}", flush=True)
            print(result.logs, flush=True)
        if args.out:
            with args.out.open("a", encoding="utf-8") as out:
                out.write(result.as_json() + "\n")
    print()
    print(totals(results))
    failing = [r.seed for r in results if not r.ok]
    if failing:
        print("failing seeds: " + " ".join(map(str, failing)))
    if harness_errors:
        print("seeds whose run the harness could not finish: " + " ".join(map(str, harness_errors)))
    return 1 if failing or harness_errors else 0


if __name__ == "__main__":
    sys.exit(main())
