"""`vgpu-scheduler [flags]`: start() in HAMi's order (§1.5), then serve until SIGTERM.

Order: flags logged → node-lock timeout → API client (`--kube-qps`, `--kube-burst`,
`--kube-timeout`) → device configuration → hostname → scheduler state → certificate pair →
metrics server (with /explain) → routes → HTTP, or HTTPS with certificate reload → informers synced
and the registration loop running. Unlike HAMi the listeners start before the informers sync, as
kube-scheduler's do, so /healthz and /readyz answer during a long first LIST (/readyz: 503 until
the informers have synced).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import ssl
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import DeviceConfigError, default_device_config, load_device_config
from vgpu_scheduler.devices.protocol import VendorConfigError
from vgpu_scheduler.gctuning import settle_heap
from vgpu_scheduler.logsetup import setup_logging
from vgpu_scheduler.scheduler.options import SchedulerOptions, invalid_policy
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.server.app import make_app
from vgpu_scheduler.server.explainroute import add_explain_route
from vgpu_scheduler.server.http2 import Http2Site
from vgpu_scheduler.server.readiness import readyz_handler
from vgpu_scheduler.server.tls import ReloadingCertificate
from vgpu_scheduler.server.warm import LedgerWarmer
from vgpu_scheduler.server.webhook import webhook_handler

log = logging.getLogger(__name__)

DEMO_SNAPSHOT = "demo"
"""`--cluster-snapshot demo` seeds the embedded cluster with the built-in demo fleet."""


class StartupError(Exception):
    """A start-up failure with a message for the operator (exit 1; bad input files exit 2)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def split_host_port(address: str) -> tuple[str | None, int]:
    """Go listen address (`:9395`, `0.0.0.0:443`, `[::1]:80`) → (host or None for all, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise StartupError(f"invalid listen address {address!r}: want host:port", code=2)
    host = host.strip("[]")
    return (host or None), int(port)


def load_config(opts: SchedulerOptions) -> DeviceConfig:
    if not opts.device_config_file:
        log.info("no --device-config-file: using the Helm chart's default device configuration")
        return default_device_config()
    try:
        return load_device_config(opts.device_config_file)
    except DeviceConfigError as exc:
        raise StartupError(f"failed to load device config: {exc}", code=2) from exc


async def make_client(opts: SchedulerOptions) -> tuple[KubeClient, Any]:
    """The API client, and the embedded cluster when `--cluster-snapshot` is given (else None)."""
    if opts.cluster_snapshot:
        from vgpu_scheduler.standin.memory import MemoryCluster
        from vgpu_scheduler.standin.transport import MemoryTransport

        cluster = MemoryCluster()
        if opts.cluster_snapshot == DEMO_SNAPSHOT:
            from vgpu_scheduler.standin.embedded.fleet import demo_fleet

            cluster.seed_from_list(demo_fleet())
        else:
            from vgpu_scheduler.standin.embedded.snapshot import SnapshotError, load_snapshot

            try:
                snapshot = load_snapshot(opts.cluster_snapshot)
            except SnapshotError as exc:
                raise StartupError(str(exc), code=2) from exc
            cluster.seed_from_list([*snapshot.nodes, *snapshot.pods, *snapshot.resourcequotas])
        log.info("embedded cluster from %s", opts.cluster_snapshot)
        return KubeClient(MemoryTransport(cluster)), cluster
    from vgpu_scheduler.cluster.kubeconfig import KubeconfigError, make_transport

    try:
        transport = await make_transport(
            opts.kubeconfig or None, qps=opts.kube_qps, burst=opts.kube_burst, timeout=opts.kube_timeout
        )
    except KubeconfigError as exc:
        raise StartupError(str(exc)) from exc
    return KubeClient(transport), None


@dataclass
class Running:
    """What serve() started, so shutdown can stop it in reverse order."""

    process: SchedulerProcess
    runners: list[web.AppRunner] = field(default_factory=list)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    extras: list[Any] = field(default_factory=list)


def listen_error(address: str, flag: str, exc: OSError) -> str:
    """One line for a listener that cannot bind: the address, what the system said and the fix."""
    host, port = split_host_port(address)
    where = f"[{host}]:{port}" if host and ":" in host else f"{host or '0.0.0.0'}:{port}"
    if exc.errno == errno.EACCES and port < 1024:
        what = "permission denied"
        fix = (
            "run as root, grant CAP_NET_BIND_SERVICE (setcap cap_net_bind_service=+ep on the "
            f"interpreter), or choose a port >= 1024 with {flag}"
        )
    elif exc.errno == errno.EADDRINUSE:
        what = "address already in use"
        fix = f"stop the process holding it (ss -ltnp 'sport = :{port}') or choose another port with {flag}"
    elif exc.errno == errno.EADDRNOTAVAIL:
        what = "address not available on this host"
        fix = f"choose an address of this host (or 0.0.0.0) with {flag}"
    else:  # e.g. a host name that does not resolve (socket.gaierror)
        what = (exc.strerror or str(exc)).lower()
        fix = f"choose another address with {flag}"
    return f"cannot listen on {where}: {what}; {fix}"


async def _start_site(
    app: web.Application, address: str, *, flag: str, ssl_context: Any = None
) -> web.AppRunner:
    """Serve `app` on `address`; a bind failure is a StartupError naming `flag` (exit 1, no
    traceback: a port in use or below 1024 is an operator's fix, not a bug)."""
    host, port = split_host_port(address)
    # handler_cancellation: a caller that goes away (kube-scheduler's httpTimeout) cancels its
    # handler, so a bind stops at its next write instead of outliving its caller.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
    await runner.setup()
    try:
        # Over TLS, HTTP/2 beside HTTP/1.1: Go's clients then multiplex on one connection (http2.py).
        if ssl_context is not None:
            await Http2Site(runner, host, port, ssl_context=ssl_context, reuse_address=True).start()
        else:
            await web.TCPSite(runner, host, port, reuse_address=True).start()
    except OSError as exc:
        await runner.cleanup()
        raise StartupError(listen_error(address, flag, exc)) from None
    return runner


def _make_process(opts: SchedulerOptions, client: KubeClient) -> SchedulerProcess:
    device_config = load_config(opts)
    hostname = socket.gethostname()
    if not hostname:
        raise StartupError("failed to get hostname: empty")
    try:
        return SchedulerProcess(
            opts,
            device_config,
            client,
            hostname,
            pod_name=os.environ.get("POD_NAME"),
            pod_namespace=os.environ.get("POD_NAMESPACE"),
        )
    except VendorConfigError as exc:  # a section only a gate (--enable-…) registers
        raise StartupError(f"failed to initialize devices: {exc}", code=2) from exc


async def start(opts: SchedulerOptions) -> Running:
    problem = invalid_policy(opts)
    if problem:  # before anything starts: a typo must not run the cluster on another policy
        raise StartupError(problem, code=2)
    client, cluster = await make_client(opts)
    running = Running(_make_process(opts, client))
    try:
        await _start_parts(opts, running, cluster)
    except BaseException:
        # What started before the failure (informers, a listener) stops, so the exit is clean.
        await stop(running)
        raise
    return running


async def _start_parts(opts: SchedulerOptions, running: Running, cluster: Any) -> None:
    process = running.process
    if cluster is not None:
        from vgpu_scheduler.standin.embedded.deviceplugin import attach_device_plugin

        running.extras.append(attach_device_plugin(cluster, process.vendors))
        if opts.embedded_api_bind:
            running.extras.append(await _serve_embedded_api(cluster, opts.embedded_api_bind))
    cert = _load_certificate(opts)
    await _start_listeners(opts, running, cert)
    if cert is not None:  # reloads during a long first sync too
        running.tasks.append(asyncio.create_task(cert.watch(), name="certificate watch"))
    # The listeners answer while the informers sync: /readyz is 503 until they have (readiness.py),
    # the extender verbs wait for the first registration pass.
    await process.start()
    # The ledger's per-node caches filled before the first request, then kept filled (warm.py).
    warmer = LedgerWarmer(process.state.ledger, process.state.vendors.keys)
    await warmer.warm_pending()
    settle_heap()
    running.tasks.append(asyncio.create_task(warmer.run(), name="ledger warmer"))


def _load_certificate(opts: SchedulerOptions) -> ReloadingCertificate | None:
    """The pair when both flags are set (HAMi's rule); a bad one stops the start in one line,
    before anything listens."""
    if not (opts.cert_file and opts.key_file):
        return None
    try:
        return ReloadingCertificate(opts.cert_file, opts.key_file)
    except (OSError, ValueError, ssl.SSLError) as exc:
        files = f"{opts.cert_file}, {opts.key_file}"
        raise StartupError(f"cannot load --cert_file/--key_file ({files}): {exc}") from None


async def _start_listeners(
    opts: SchedulerOptions, running: Running, cert: ReloadingCertificate | None
) -> None:
    """The metrics server (with /explain), then the main server (HTTPS when a pair is given)."""
    from vgpu_scheduler.server.certmetrics import CertCollector
    from vgpu_scheduler.server.metrics import make_metrics_app, metrics_registry
    from vgpu_scheduler.server.opmetrics import OperatorCollector, OperatorSources

    process = running.process
    registry = metrics_registry(
        process.state, legacy=opts.legacy_metrics, extender_stats=process.extender.stats
    )
    registry.register(OperatorCollector(OperatorSources.of_process(process)))
    if cert is not None:
        registry.register(CertCollector(cert))
    metrics_app = make_metrics_app(registry)
    add_explain_route(metrics_app, process.explain)
    running.runners.append(
        await _start_site(metrics_app, opts.metrics_bind_address, flag="--metrics-bind-address")
    )
    log.info("metrics server listening on %s", opts.metrics_bind_address)

    quota = process.state.quota
    app = make_app(
        process.extender,
        webhook_handler(opts, process.vendors, quota.admission_fits),
        readyz=readyz_handler(process),
        profiling=opts.profiling,
        explainer=process.explain if opts.explain_on_main_port else None,
    )
    ssl_context = cert.context if cert is not None else None
    http = await _start_site(app, opts.http_bind, flag="--http_bind", ssl_context=ssl_context)
    running.runners.append(http)
    log.info("listening on %s (%s)", opts.http_bind, "https" if ssl_context else "http")


@dataclass
class _EmbeddedApi:
    server: Any

    async def stop(self) -> None:
        await self.server.close()


async def _serve_embedded_api(cluster: Any, address: str) -> _EmbeddedApi:
    """The embedded cluster's Kubernetes API over plain HTTP, with no authentication (loopback
    use: create pods with curl or kubectl, then filter them)."""
    from vgpu_scheduler.standin.fakeapi import serve as serve_api

    host, port = split_host_port(address)
    host = host or "127.0.0.1"
    try:
        server = await serve_api(cluster, host, port)
    except OSError as exc:
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise StartupError(listen_error(shown, "--embedded-api-bind", exc)) from None
    log.info("embedded Kubernetes API listening on %s", server.url)
    return _EmbeddedApi(server)


async def stop(running: Running) -> None:
    for task in running.tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for runner in reversed(running.runners):
        await runner.cleanup()
    for extra in running.extras:
        await extra.stop()
    await running.process.stop()
    await running.process.client.close()


async def serve(opts: SchedulerOptions, flag_lines: Sequence[str] = ()) -> int:
    """`flag_lines` are the `FLAG: --name="value"` lines HAMi logs first; the command line formats
    them (`flags.format_flags`), so the server does not depend on the CLI parser."""
    problem = invalid_policy(opts)
    if problem:  # refused before the flags are logged, so this one line is all stderr shows
        print(f"vgpu-scheduler: {problem}", file=sys.stderr)
        return 2
    setup_logging(opts)
    for line in flag_lines:
        log.info("%s", line)
    try:
        running = await start(opts)
    except StartupError as exc:
        print(f"vgpu-scheduler: {exc}", file=sys.stderr)
        return exc.code
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    await done.wait()
    log.info("shutting down")
    await stop(running)
    return 0
