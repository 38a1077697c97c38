"""`vgpu-scheduler certs`: the webhook's serving certificate without cert-manager or a certgen Job.

Run as an init container of every scheduler replica (charts/vgpu-scheduler): makes sure the TLS
Secret holds a certificate for the Service's DNS names that is good for at least `--rotate-before`,
points the MutatingWebhookConfiguration's caBundle at its CA, and writes the files the server reads
(`--write-dir`). A second run with nothing to do writes nothing.

With `--every DURATION` it does not exit: it syncs again every DURATION (a container beside the
extender), so a certificate near its expiry is renewed and the files rewritten without a restart.

Exit codes: 0 done, 1 the API refused or the webhook configuration is missing (the init container
is restarted and tries again), 2 bad flags.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from vgpu_scheduler.certs.renew import renew_forever
from vgpu_scheduler.certs.sync import CertsConfig, CertsError, Outcome, sync
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError
from vgpu_scheduler.cluster.kubeconfig import KubeconfigError, make_client
from vgpu_scheduler.gocompat.durations import DurationError, parse_go_duration

PROG = "vgpu-scheduler certs"


class _InputError(ValueError):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise _InputError(f"{message} (see --help)")


def _duration(text: str) -> timedelta:
    try:
        seconds = parse_go_duration(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return timedelta(seconds=seconds)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE"),
                   help="namespace of the Secret and the Service (default: $POD_NAMESPACE)")
    p.add_argument("--secret-name", default="vgpu-scheduler-tls", help="TLS Secret (default: %(default)s)")
    p.add_argument("--service-name", default="vgpu-scheduler",
                   help="Service whose DNS names the certificate carries (default: %(default)s)")
    p.add_argument("--webhook-name", default="vgpu-scheduler-webhook",
                   help="MutatingWebhookConfiguration whose caBundle to set; '' leaves it alone "
                   "(default: %(default)s)")
    p.add_argument("--dns-name", action="append", default=[], metavar="NAME",
                   help="an extra SAN (repeatable)")
    p.add_argument("--validity", type=_duration, default=timedelta(days=365), metavar="DURATION",
                   help="lifetime of a new certificate, Go duration (default: 8760h)")
    p.add_argument("--rotate-before", type=_duration, default=timedelta(days=30), metavar="DURATION",
                   help="replace the certificate when it expires within this (default: 720h)")
    p.add_argument("--write-dir", type=Path, metavar="DIR",
                   help="also write ca.crt, tls.crt, tls.key here (the server's --cert_file/--key_file)")
    p.add_argument("--every", type=_duration, default=None, metavar="DURATION",
                   help="keep running, syncing again every DURATION, Go duration (renewal without a "
                   "restart; default: run once and exit)")
    p.add_argument("--kubeconfig", default=None,
                   help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
    return p


def config_from(args: argparse.Namespace) -> CertsConfig:
    if not args.namespace:
        raise _InputError("--namespace is required when $POD_NAMESPACE is not set")
    if args.rotate_before >= args.validity:
        raise _InputError("--rotate-before must be shorter than --validity (else every run rotates)")
    return CertsConfig(
        namespace=args.namespace,
        secret_name=args.secret_name,
        service_name=args.service_name,
        webhook_name=args.webhook_name or None,
        validity=args.validity,
        rotate_before=args.rotate_before,
        extra_dns_names=tuple(args.dns_name),
    )


def report_lines(cfg: CertsConfig, outcome: Outcome) -> list[str]:
    raced = f" ({outcome.lost_races} write(s) lost to another replica)" if outcome.lost_races else ""
    lines = [f"secret {cfg.namespace}/{cfg.secret_name}: {outcome.secret}{raced}"]
    if cfg.webhook_name:
        lines.append(f"mutatingwebhookconfiguration {cfg.webhook_name}: caBundle {outcome.ca_bundle}")
    if outcome.files:
        lines.append(f"wrote {', '.join(outcome.files)}")
    return lines


async def _run(cfg: CertsConfig, kubeconfig: str | None, write_dir: Path | None) -> Outcome:
    client = await make_client(kubeconfig)
    try:
        return await sync(client, cfg, datetime.now(UTC), write_dir)
    finally:
        await client.close()


async def _run_every(cfg: CertsConfig, kubeconfig: str | None, write_dir: Path | None,
                     every: timedelta) -> None:
    client = await make_client(kubeconfig)
    try:
        await renew_forever(client, cfg, every, write_dir,
                            report=lambda outcome: print("\n".join(report_lines(cfg, outcome)), flush=True))
    finally:
        await client.close()


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        cfg = config_from(args)
    except _InputError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if args.every is not None:
        if args.every >= cfg.rotate_before:
            print(f"{PROG}: --every must be shorter than --rotate-before (else a renewal can come too late)",
                  file=sys.stderr)
            return 2
        try:
            asyncio.run(_run_every(cfg, args.kubeconfig, args.write_dir, args.every))
        except KubeconfigError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return 1
        return 0
    try:
        outcome = asyncio.run(_run(cfg, args.kubeconfig, args.write_dir))
    except (ApiError, ApiConnectionError, CertsError, KubeconfigError, OSError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    print("\n".join(report_lines(cfg, outcome)))
    return 0
