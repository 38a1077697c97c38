"""`vgpu-scheduler`: the scheduler server (HAMi's flags), `version`, `simulate` and `explain`."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from vgpu_scheduler.flags import PERSISTENT_FLAGS, FlagError, format_flags, parse_args, usage
from vgpu_scheduler.scheduler.options import SchedulerOptions

PROG = "vgpu-scheduler"
COMMANDS = (
    ("certs", "create or rotate the webhook's TLS Secret and caBundle (an init container)"),
    ("explain", "why a pod is pending or where it went, per node and device (changes nothing)"),
    ("simulate", "schedule pods on a simulated cluster (no Kubernetes needed)"),
    ("version", "print version"),
)


def _first_positional(args: list[str]) -> str | None:
    try:
        _, positional = parse_args(args)
    except FlagError:
        return args[0] if args[:1] == ["version"] else None
    return positional[0] if positional else None


def _usage() -> str:
    return usage(PROG, COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if _first_positional(args) == "version":
        # cobra finds the subcommand among the flags, then parses every flag against it: only the
        # persistent (global) ones are known there.
        try:
            parse_args(args, PERSISTENT_FLAGS)
        except FlagError as exc:
            print(f"Error: {exc}", file=sys.stderr)
            return 2
        from vgpu_scheduler.version import version_lines

        # cobra's Println without an output writer goes to stderr, as HAMi's `scheduler version`.
        print("\n".join(version_lines()), file=sys.stderr)
        return 0
    if args[:1] == ["certs"]:
        from vgpu_scheduler.certs.cli import main as certs_main

        return certs_main(args[1:])
    if args[:1] == ["explain"]:
        from vgpu_scheduler.explain.cli import main as explain_main

        return explain_main(args[1:])
    if args[:1] == ["simulate"]:
        from vgpu_scheduler.simulate.cli import main as simulate_main

        return simulate_main(args[1:])
    try:
        opts, positional = parse_args(args)
    except FlagError as exc:
        print(f"Error: {exc}\n{_usage()}", file=sys.stderr)
        return 2
    if opts.help:
        print(f"kubernetes vgpu scheduler\n\n{_usage()}", end="")
        return 0
    if positional:
        print(f'Error: unknown command "{positional[0]}" for "{PROG}"\n{_usage()}', file=sys.stderr)
        return 2
    return _serve(opts)


def _serve(opts: SchedulerOptions) -> int:
    import asyncio

    from vgpu_scheduler.server.main import serve

    return asyncio.run(serve(opts, format_flags(opts)))
