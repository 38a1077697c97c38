"""A real Kubernetes control plane on loopback for the e2e tier and bench/burst.py.

etcd, kube-apiserver and kube-scheduler v1.36 (built by `scripts/control-plane-build` into a cache
outside the work tree) plus our server as a subprocess, all on 127.0.0.1 with free ports, in one temp
dir: certificates, kubeconfig, configs, data and one log file per process. There is no kubelet and no
controller manager, so bound pods stay Pending with `spec.nodeName` set, and the `default`
ServiceAccount is created by `ensure_namespace`.

    with ControlPlane.start(find_binaries_or_raise()) as cp:
        cp.kubectl("get", "nodes")

Shared by tests/e2e/conftest.py and bench/burst.py (which put this folder on sys.path). `start()`
tears everything down again if a component never gets ready; `stop()` kills every process it started
(process groups) and is safe to call twice.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

REPO = Path(__file__).resolve().parents[2]
KUBE_VERSION = "v1.36.3"
STAMP = f"kubernetes={KUBE_VERSION} staging=v0.36.3 etcd=v3.6.8"  # what scripts/control-plane-build writes
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kubectl")
HAMI_SCHEDULER = "hami-scheduler"
WEBHOOK_LABEL = "vgpu-scheduler.e2e/webhook"  # namespaces carrying it (value "on") go through /webhook
MANAGED_RESOURCES = (
    "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage",
)
"""NVIDIA's resources (kept for callers that name them; the default is `chart_managed_resources`)."""
STOP_GRACE = 5.0  # s; see ControlPlane.restart_apiserver
READY_TIMEOUT = 120.0  # s; kube-apiserver's RBAC bootstrap takes ~10 s on an idle 2-core machine


class ControlPlaneUnavailable(RuntimeError):
    """The binaries are not built (no Go toolchain, or the build failed): the e2e tier skips."""


class ControlPlaneError(RuntimeError):
    """A component exited or never became ready."""


def cache_bin_dir() -> Path:
    root = os.environ.get("VGPU_KUBE_CACHE") or str(Path.home() / ".cache" / "vgpu-scheduler")
    return Path(root) / f"kube-{KUBE_VERSION}" / "bin"


def find_binaries_or_raise() -> Path:
    """The bin directory holding the pinned binaries, or ControlPlaneUnavailable saying why not."""
    bin_dir = cache_bin_dir()
    stamp = bin_dir.parent / "stamp"
    missing = [b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]
    if missing or not stamp.is_file() or stamp.read_text().strip() != STAMP:
        why = "not built yet, or the build failed"
        if shutil.which("go") is None:
            why = "no Go toolchain on PATH"
        raise ControlPlaneUnavailable(
            f"e2e tier skipped: Kubernetes {KUBE_VERSION} control-plane binaries missing in {bin_dir} "
            f"({why}); run scripts/control-plane-build"
        )
    return bin_dir


def chart_managed_resources() -> tuple[str, ...]:
    """Every resource of the vendors our server registers by default (the packaged chart device
    configuration, no --enable-* flag): the chart's extender `managedResources`, so kube-scheduler
    leaves every vendor's resources to us instead of looking for them in node allocatable."""
    from vgpu_scheduler.configfile import default_device_config
    from vgpu_scheduler.devices.registry import build

    return tuple(sorted(build(default_device_config()).managed_resources()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


@dataclass
class Certs:
    ca: trustme.CA
    ca_file: Path
    serving_cert: Path  # 127.0.0.1 / localhost: kube-apiserver and our server
    serving_key: Path
    admin_cert: Path  # CN e2e-admin, O system:masters
    admin_key: Path
    sa_key: Path
    sa_pub: Path

    @classmethod
    def make(cls, d: Path) -> Certs:
        ca = trustme.CA(organization_name="vgpu-scheduler e2e")
        ca_file = d / "ca.crt"
        ca.cert_pem.write_to_path(str(ca_file))
        serving = ca.issue_cert("127.0.0.1", "localhost", common_name="127.0.0.1")
        serving.cert_chain_pems[0].write_to_path(str(d / "serving.crt"))
        serving.private_key_pem.write_to_path(str(d / "serving.key"))
        admin = ca.issue_cert("e2e-admin", common_name="e2e-admin", organization_name="system:masters")
        admin.cert_chain_pems[0].write_to_path(str(d / "admin.crt"))
        admin.private_key_pem.write_to_path(str(d / "admin.key"))
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (d / "sa.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
        (d / "sa.pub").write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return cls(
            ca, ca_file, d / "serving.crt", d / "serving.key", d / "admin.crt", d / "admin.key",
            d / "sa.key", d / "sa.pub",
        )

    def ssl_context(self, client_cert: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if client_cert:
            ctx.load_cert_chain(str(self.admin_cert), str(self.admin_key))
        return ctx


@dataclass
class ControlPlane:
    """The running control plane; build it with `ControlPlane.start(bin_dir, ...)`."""

    bin_dir: Path
    dir: Path
    certs: Certs
    kubeconfig: Path
    apiserver_url: str
    server_url: str  # our server (filter/bind/webhook), https
    metrics_url: str
    node_policy: str
    gpu_policy: str
    etcd_url: str = ""
    scheduler_url: str = ""  # kube-scheduler's secure port (its /metrics)
    procs: dict[str, Proc] = field(default_factory=dict)
    keep_dir: bool = False

    # -- lifecycle ------------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        bin_dir: Path,
        *,
        node_policy: str = "binpack",
        gpu_policy: str = "spread",
        server_args: Sequence[str] = (),
        workdir: Path | None = None,
    ) -> ControlPlane:
        d = Path(tempfile.mkdtemp(prefix="vgpu-e2e-", dir=workdir))
        certs = Certs.make(d)
        api_port = free_port()
        srv_port, metrics_port = free_port(), free_port()
        cp = cls(
            bin_dir=bin_dir,
            dir=d,
            certs=certs,
            kubeconfig=d / "admin.kubeconfig",
            apiserver_url=f"https://127.0.0.1:{api_port}",
            server_url=f"https://127.0.0.1:{srv_port}",
            metrics_url=f"http://127.0.0.1:{metrics_port}",
            node_policy=node_policy,
            gpu_policy=gpu_policy,
        )
        try:
            cp._write_kubeconfig()
            cp._start_etcd()
            cp._start_apiserver(api_port)
            cp._setup_cluster()
            cp.spawn_server("vgpu-scheduler", port=srv_port, metrics_port=metrics_port, extra=server_args)
            cp.spawn_scheduler("kube-scheduler", profiles=(HAMI_SCHEDULER, "default-scheduler"),
                               server_url=cp.server_url)
        except BaseException:
            cp.stop()
            raise
        return cp

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Kill every process we started (SIGTERM, then SIGKILL), scheduler first; remove the dir."""
        for name in reversed(list(self.procs)):
            p = self.procs[name].popen
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)
                    p.wait(timeout=10)
        self.procs.clear()
        if not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self, lines: int = 40) -> str:
        """The tail of every component's log, for a failure report."""
        parts = []
        for name, proc in self.procs.items():
            state = "running" if proc.alive() else f"exited {proc.popen.returncode}"
            parts.append(f"----- {name} ({state}) {proc.log} -----\n{proc.tail(lines)}")
        return "\n".join(parts)

    def kill(self, name: str) -> None:
        """SIGKILL one component (its process group): a crash, no cleanup of any kind."""
        proc = self.procs[name].popen
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def restart_apiserver(
        self, *, compact: bool = True, hard: bool = False, log_suffix: str = "-restarted"
    ) -> float:
        """Stop kube-apiserver, optionally compact etcd to its current revision so that no watcher
        can resume where it stopped (410 Gone: it must relist), then start it again on the same
        port, logging to `kube-apiserver<log_suffix>.log`. Returns the seconds it was unreachable.

        SIGTERM first: it stops listening at once, but open watch connections keep it from exiting
        for up to a minute (its HTTP shutdown timeout), so it is killed after STOP_GRACE seconds.
        `hard`: SIGKILL at once instead, a crash (tests/chaos)."""
        proc = self.procs["kube-apiserver"].popen
        down = time.monotonic()
        if hard:
            self.kill("kube-apiserver")
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.kill("kube-apiserver")
        if compact:
            self._compact_etcd()
        self._start_apiserver(int(self.apiserver_url.rsplit(":", 1)[1]), log_suffix=log_suffix)
        return time.monotonic() - down

    def _compact_etcd(self) -> None:
        def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            req = urllib.request.Request(
                f"{self.etcd_url}{path}", data=json.dumps(body).encode(), method="POST",
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=10) as resp:
                out: dict[str, Any] = json.loads(resp.read())
                return out

        # A write of our own first: the compacted revision is then newer than anything a watcher
        # of kube-apiserver can have seen, so every resumed watch gets 410 Gone.
        marker = {"key": base64.b64encode(b"/e2e/compaction-marker").decode(),
                  "value": base64.b64encode(str(time.time()).encode()).decode()}
        revision = post("/v3/kv/put", marker)["header"]["revision"]
        post("/v3/kv/compaction", {"revision": revision, "physical": True})

    # -- helpers --------------------------------------------------------------------------------

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        out = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin.encode() if stdin is not None else None,
            capture_output=True,
            timeout=60,
            check=False,
        )
        if check and out.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {out.stderr.decode(errors='replace')}")
        return out.stdout.decode()

    def apply(self, *objects: dict[str, Any]) -> None:
        items = {"apiVersion": "v1", "kind": "List", "items": objects}
        self.kubectl("apply", "-f", "-", stdin=json.dumps(items))

    def ensure_namespace(self, name: str, webhook: bool = True) -> None:
        """The namespace plus its `default` ServiceAccount (no controller manager creates it);
        `webhook` labels it so pods created in it go through our /webhook."""
        labels = {WEBHOOK_LABEL: "on"} if webhook else {}
        self.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": "default", "namespace": name}},
        )

    def registered_devices(self, metrics_url: str | None = None) -> int:
        """GPUs our server (or the one at `metrics_url`) has registered, counted from its metrics
        (one memory-limit series each)."""
        with urllib.request.urlopen(f"{metrics_url or self.metrics_url}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        return sum(1 for line in text.splitlines() if line.startswith("hami_gpu_memory_limit_bytes{"))

    def wait_devices_registered(
        self, count: int, timeout: float = 120.0, metrics_url: str | None = None
    ) -> None:
        """Block until our server knows `count` GPUs. Its registration loop runs periodically, and a
        pod filtered before its nodes are registered is rejected ("node unregistered") and parked by
        kube-scheduler, which would make the first minutes of a test or bench measure that wait."""
        deadline = time.monotonic() + timeout
        while (seen := self.registered_devices(metrics_url)) < count:
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"our server registered {seen}/{count} GPUs after {timeout:.0f}s")
            time.sleep(0.5)

    def _spawn(self, name: str, argv: Sequence[str], log_suffix: str = "") -> Proc:
        log = self.dir / f"{name}{log_suffix}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=self.dir, start_new_session=True,  # its own process group: stop() kills all of it
            )
        proc = Proc(name, popen, log)
        self.procs[name] = proc
        return proc

    def _wait_ready(self, proc: Proc, url: str, ctx: ssl.SSLContext | None, want: bytes = b"ok") -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        last = ""
        while time.monotonic() < deadline:
            if not proc.alive():
                raise ControlPlaneError(f"{proc.name} exited {proc.popen.returncode}:\n{proc.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=5, context=ctx) as resp:
                    body = resp.read()
                    if resp.status == 200 and want in body:
                        return
                    last = f"HTTP {resp.status} {body[:200]!r}"
            except (OSError, urllib.error.URLError) as exc:
                last = str(exc)
            time.sleep(0.3)
        raise ControlPlaneError(
            f"{proc.name} not ready at {url} after {READY_TIMEOUT:.0f}s ({last}):\n{proc.tail()}"
        )

    # -- components -----------------------------------------------------------------------------

    def _write_kubeconfig(self) -> None:
        def b64(p: Path) -> str:
            return base64.b64encode(p.read_bytes()).decode()

        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {
                "server": self.apiserver_url, "certificate-authority-data": b64(self.certs.ca_file)}}],
            "users": [{"name": "e2e-admin", "user": {
                "client-certificate-data": b64(self.certs.admin_cert),
                "client-key-data": b64(self.certs.admin_key)}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e-admin"}}],
            "current-context": "e2e",
        }
        self.kubeconfig.write_text(json.dumps(cfg, indent=1))

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        proc = self._spawn("etcd", [
            str(self.bin_dir / "etcd"),
            "--name=e2e",
            f"--data-dir={self.dir / 'etcd-data'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=e2e=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync=true",  # a throwaway store: durability buys nothing, fsync costs a lot
            "--log-level=warn",
        ])
        self._wait_ready(proc, f"{self.etcd_url}/health", None, b'"health":"true"')

    def _start_apiserver(self, port: int, log_suffix: str = "") -> None:
        c = self.certs
        proc = self._spawn("kube-apiserver", [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.dir / 'apiserver-certs'}",
            f"--tls-cert-file={c.serving_cert}",
            f"--tls-private-key-file={c.serving_key}",
            f"--client-ca-file={c.ca_file}",
            f"--service-account-key-file={c.sa_pub}",
            f"--service-account-signing-key-file={c.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/24",  # an allocation range only; nothing listens there
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=MutatingAdmissionWebhook",
            "--disable-admission-plugins=TaintNodesByCondition",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            "--v=1",
        ], log_suffix)
        self._wait_ready(proc, f"{self.apiserver_url}/readyz", c.ssl_context())

    def _setup_cluster(self) -> None:
        self.ensure_namespace("default")
        # Our server's /webhook, for namespaces labelled WEBHOOK_LABEL=on (so the bench's plain
        # kube-scheduler pods and kube-system never depend on it).
        self.apply({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "vgpu-scheduler-e2e"},
            "webhooks": [{
                "name": "vgpu.hami.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "reinvocationPolicy": "Never",
                "clientConfig": {
                    "url": f"{self.server_url}/webhook",
                    "caBundle": base64.b64encode(self.certs.ca_file.read_bytes()).decode(),
                },
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["pods"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {WEBHOOK_LABEL: "on"}},
            }],
        })

    def spawn_server(
        self,
        name: str,
        *,
        port: int | None = None,
        metrics_port: int | None = None,
        extra: Sequence[str] = (),
        hostname: str | None = None,
        wait: bool = True,
    ) -> tuple[str, str]:
        """Our server as process `name`; returns its (https URL, metrics URL).

        `hostname` replaces what `socket.gethostname()` answers in that process, the leader identity
        the server compares with the Lease holder: the only way, without root (no UTS namespace),
        to give two replicas on one machine distinct identities. Test seam, not a product flag."""
        port = port or free_port()
        metrics_port = metrics_port or free_port()
        exe = Path(sys.executable).with_name("vgpu-scheduler")
        argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "vgpu_scheduler"]
        if hostname is not None:
            argv = [sys.executable, "-c", _AS_HOST, hostname]
        proc = self._spawn(name, [
            *argv,
            f"--kubeconfig={self.kubeconfig}",
            f"--http_bind=127.0.0.1:{port}",
            f"--cert_file={self.certs.serving_cert}",
            f"--key_file={self.certs.serving_key}",
            f"--scheduler-name={HAMI_SCHEDULER}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            f"--node-scheduler-policy={self.node_policy}",
            f"--gpu-scheduler-policy={self.gpu_policy}",
            *extra,  # later flags win: `extra` may override any of the above
        ])
        url = f"https://127.0.0.1:{port}"
        if wait:
            self._wait_ready(proc, f"{url}/readyz", self.certs.ssl_context(client_cert=False), b"")
        return url, f"http://127.0.0.1:{metrics_port}"

    def scheduler_metrics(self) -> str:
        """kube-scheduler's /metrics text (read with the admin client certificate)."""
        ctx = self.certs.ssl_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # its self-signed serving cert; loopback only
        with urllib.request.urlopen(f"{self.scheduler_url}/metrics", context=ctx, timeout=30) as resp:
            text: str = resp.read().decode()
        return text

    def apiserver_metrics(self) -> str:
        return self.kubectl("get", "--raw", "/metrics")

    def spawn_scheduler(
        self,
        name: str,
        *,
        profiles: Sequence[str],
        server_url: str,
        leader_election: dict[str, Any] | None = None,
        wait: bool = True,
        managed_resources: Sequence[str] | None = None,
    ) -> None:
        """A kube-scheduler as process `name` with these profiles, calling our server at
        `server_url` as its extender. `leader_election` is the configuration's `leaderElection`
        block (default: none); a follower is not waited for (it serves nothing until it leads).
        `managed_resources`: the extender's resources (default `chart_managed_resources()`; a server
        with another configuration passes its vendors' `managed_resources()`, as the chart does)."""
        if managed_resources is None:
            managed_resources = chart_managed_resources()
        cfg = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig), "qps": 200, "burst": 400},
            "leaderElection": leader_election or {"leaderElect": False},
            # Extenders apply to every profile, but only to pods asking for a managed resource:
            # default-scheduler pods asking only cpu never reach our server.
            "profiles": [{"schedulerName": p} for p in profiles],
            "extenders": [{
                "urlPrefix": server_url,
                "filterVerb": "filter",
                "bindVerb": "bind",
                "enableHTTPS": True,
                "tlsConfig": {"caData": base64.b64encode(self.certs.ca_file.read_bytes()).decode()},
                "nodeCacheCapable": True,
                "httpTimeout": "30s",
                "weight": 1,
                "managedResources": [{"name": r, "ignoredByScheduler": True} for r in managed_resources],
            }],
        }
        self.spawn_scheduler_config(name, cfg, wait=wait)

    def spawn_scheduler_config(self, name: str, cfg: dict[str, Any], *, wait: bool = True) -> None:
        """A kube-scheduler as process `name` with this KubeSchedulerConfiguration (its own
        clientConnection and extenders as given)."""
        port = free_port()
        self.scheduler_url = f"https://127.0.0.1:{port}"
        path = self.dir / f"{name}-config.yaml"
        path.write_text(json.dumps(cfg, indent=1))  # JSON is YAML
        proc = self._spawn(name, [
            str(self.bin_dir / "kube-scheduler"),
            f"--config={path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--v=2",
        ])
        if not wait:
            return
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its self-signed serving cert; loopback readiness probe only
        self._wait_ready(proc, f"https://127.0.0.1:{port}/readyz", insecure)


_AS_HOST = (
    "import socket, sys; host = sys.argv.pop(1); socket.gethostname = lambda: host; "
    "from vgpu_scheduler.cli import main; sys.exit(main())"
)


@contextlib.contextmanager
def running(bin_dir: Path, **kwargs: Any) -> Iterator[ControlPlane]:
    cp = ControlPlane.start(bin_dir, **kwargs)
    try:
        yield cp
    finally:
        cp.stop()
