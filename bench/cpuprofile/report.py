"""Shares of CPU time from a collapsed-stack file written by bench/cpuprofile/sitecustomize.py.

    python bench/cpuprofile/report.py FILE [--under FRAME] [--top N]

Prints each frame's inclusive share (the stacks that pass through it) and self share (the stacks
it ends); with --under, the share of each call path right below FRAME (a substring of a frame).
"""

from __future__ import annotations

import argparse
import collections
import sys


def read(path: str) -> list[tuple[list[str], int]]:
    stacks = []
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if stack and n.isdigit():
                stacks.append((stack.split(";"), int(n)))
    return stacks


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file")
    p.add_argument("--under", help="break down the stacks below the first frame containing this")
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args()
    stacks = read(args.file)
    total = sum(n for _, n in stacks)
    if not total:
        print("no samples")
        return 1
    print(f"{total} samples (1 ms of CPU time each)")
    if args.under:
        below: collections.Counter[str] = collections.Counter()
        for frames, n in stacks:
            at = next((i for i, fr in enumerate(frames) if args.under in fr), None)
            if at is not None:
                below[";".join(frames[at + 1 : at + 3]) or "(self)"] += n
        print(f"under {args.under}: {100 * sum(below.values()) / total:.1f} %")
        for path, n in below.most_common(args.top):
            print(f"{100 * n / total:6.1f} %  {path}")
        return 0
    inclusive: collections.Counter[str] = collections.Counter()
    self_time: collections.Counter[str] = collections.Counter()
    for frames, n in stacks:
        for frame in set(frames):
            inclusive[frame] += n
        self_time[frames[-1]] += n
    print("inclusive:")
    for frame, n in inclusive.most_common(args.top):
        print(f"{100 * n / total:6.1f} %  {frame}")
    print("self:")
    for frame, n in self_time.most_common(args.top):
        print(f"{100 * n / total:6.1f} %  {frame}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
