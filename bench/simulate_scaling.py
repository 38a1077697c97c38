"""How `simulate` scales with the fleet: wall time and peak RSS of `bench/simulate.py` at several
fleet sizes (ten pods per node by default), each size in its own process so RSS is its own.

    .venv/bin/python bench/simulate_scaling.py                       # 100, 1,000 and 5,000 nodes
    .venv/bin/python bench/simulate_scaling.py --nodes 100 1000 --plot docs/simulate-scaling.png

Prints one table row per size; `--plot` draws wall time and RSS against fleet size (needs the
`plot` extra). Figures only; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent / "simulate.py"
_WALL = re.compile(r"wall time ([\d.]+) s .*?: ([\d.]+) pods/s.*max RSS (\d+) MiB")
_SCHEDULED = re.compile(r"scheduled (\d+), pending (\d+), cycles (\d+)")


@dataclass(frozen=True)
class Row:
    nodes: int
    pods: int
    scheduled: int
    cycles: int
    wall_s: float
    pods_per_s: float
    rss_mib: int


def measure(nodes: int, pods: int, seed: int) -> Row:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--nodes", str(nodes), "--pods", str(pods), "--seed", str(seed)],
        check=True, capture_output=True, text=True,
    ).stdout
    wall, scheduled = _WALL.search(out), _SCHEDULED.search(out)
    if wall is None or scheduled is None:
        raise SystemExit(f"unexpected output of {BENCH.name}:\n{out}")
    return Row(
        nodes, pods, int(scheduled.group(1)), int(scheduled.group(3)), float(wall.group(1)),
        float(wall.group(2)), int(wall.group(3)),
    )


def plot(rows: list[Row], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    xs = [r.nodes for r in rows]
    left.plot(xs, [r.wall_s for r in rows], marker="o")
    left.set(xscale="log", yscale="log", xlabel="nodes (x 8 GPUs, 10 pods per node)", ylabel="wall time (s)")
    right.plot(xs, [r.rss_mib for r in rows], marker="o", color="tab:orange")
    right.set(xscale="log", xlabel="nodes (x 8 GPUs, 10 pods per node)", ylabel="peak RSS (MiB)")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("vgpu-scheduler simulate: cost against fleet size")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    p.add_argument("--pods-per-node", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", metavar="PNG", help="draw wall time and RSS against fleet size")
    args = p.parse_args(argv)
    print("| nodes | pods | scheduled | cycles | wall s | pods/s | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for nodes in args.nodes:
        row = measure(nodes, nodes * args.pods_per_node, args.seed)
        rows.append(row)
        print(f"| {row.nodes:,} | {row.pods:,} | {row.scheduled:,} | {row.cycles:,} | {row.wall_s:.1f} "
              f"| {row.pods_per_s:.0f} | {row.rss_mib} |", flush=True)
    if args.plot:
        plot(rows, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
