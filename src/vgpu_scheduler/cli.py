"""Command line entry point (placeholder until the flag set of hami-spec §1 lands)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["version"]:
        from vgpu_scheduler import __version__

        print(f"version:          v{__version__}", file=sys.stderr)
        return 0
    print("vgpu-scheduler: not yet implemented", file=sys.stderr)
    return 2
