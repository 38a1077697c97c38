"""One chaos run: the cluster, two replicas, the workload, the nemesis, the history and its verdict.

    result = asyncio.run(run_chaos(ChaosConfig(seed=7, nodes=30, seconds=90)))

The control plane is tests/e2e/controlplane.py's (its own server and kube-scheduler are stopped:
the chaos pods never reach them). Two replicas `a` and `b`, each a kube-scheduler with leader
election (Lease `hami-chaos-ks`, profile `hami-chaos`) whose extender is its own vgpu-scheduler
`--leader-elect`; the servers reach kube-apiserver through their own fault proxy (faultproxy.py)
and follow the Lease through a mirror (tests/e2e/leasemirror.py says why; here the mirror learns
which replica a new holder identity belongs to as replicas restart). The harness' own client, the
recorder, the workload and the device-plugin stand-in talk to kube-apiserver directly.

After `seconds` the workload stops, the nemesis heals its last fault, every replica is running
again, and the harness polls the final state until every pod is bound and confirmed or pending with
the filter's verdict (`converge_limit`, then `not-converged`). The verdict is the checker's over
the whole history plus the final state.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import signal
import ssl
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from checker import Verdict, Violation, check, final_problems
from controlplane import ControlPlane, ControlPlaneError, chart_managed_resources
from faultcheck import allocation_problems, snapshot
from faultproxy import FaultProxy
from fleet import GROUP, node_name, node_objects
from history import History, Recorder
from leasemirror import LeaseMirror
from nemesis import KINDS, Nemesis
from plugin import ChaosDevicePlugin
from pluginstandin import Obj, create_node, group_selector
from workload import Workload

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError
from vgpu_scheduler.cluster.kubeconfig import make_client
from vgpu_scheduler.cluster.reflector import Reflector

SRC = Path(__file__).resolve().parents[2] / "src"
NAMESPACE = "chaos"
SCHEDULER = "hami-chaos"
KS_LEASE, MIRROR_LEASE = "hami-chaos-ks", "hami-chaos"
REPLICAS = ("a", "b")
LEASE = {"leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"}
LEASE_SECONDS = 6.0
MASTER = re.compile(r'^leader_election_master_status\{[^}]*name="kube-scheduler"[^}]*\} 1', re.M)


@dataclass
class ChaosConfig:
    seed: int
    nodes: int = 100
    gpus: int = 8
    seconds: float = 300.0
    rate: float = 4.0  # pods created per second (on average)
    max_live: int = 600
    lock_timeout: float = 30.0  # the replicas' --node-lock-timeout
    plugin_delay: float = 0.05
    converge_limit: float = 30.0
    kinds: Sequence[str] = KINDS
    keep_logs: bool = False


@dataclass
class RunResult:
    seed: int
    minutes: float
    faults: dict[str, int]
    placed: int
    created: int
    deleted: int
    violations: list[Violation]
    recovery: dict[str, list[float]]
    converged_s: float
    notes: list[str] = field(default_factory=list)
    logs: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        kinds = Counter(v.kind for v in self.violations)
        return (f"seed={self.seed} minutes={self.minutes:.1f} faults={sum(self.faults.values())} "
                f"placed={self.placed} created={self.created} deleted={self.deleted} "
                f"converged_s={self.converged_s:.1f} violations={dict(kinds) or 0}")

    def as_json(self) -> str:
        d = asdict(self)
        d["violations"] = [asdict(v) for v in self.violations]
        return json.dumps(d)


def hostname(replica: str) -> str:
    return f"chaos-replica-{replica}"


class ChaosCluster:
    """The running cluster, and the operations the nemesis calls (nemesis.Cluster)."""

    lease_seconds = LEASE_SECONDS

    def __init__(self, cp: ControlPlane, client: KubeClient, cfg: ChaosConfig, rng: random.Random) -> None:
        self.cp = cp
        self.client = client
        self.cfg = cfg
        self.rng = rng
        self.history = History()
        self.proxies: dict[str, FaultProxy] = {}
        self.server_ports: dict[str, int] = {}
        self.ks_urls: dict[str, str] = {}
        self.identity: dict[str, str] = {}  # replica -> its kube-scheduler's Lease identity, once known
        self.down: set[str] = set()  # replicas stopped on purpose (killed or paused)
        self.restarts: Counter[str] = Counter()
        self.variants: dict[str, int] = {}
        self.plugin_obj: ChaosDevicePlugin | None = None
        self.metrics_urls: dict[str, str] = {}
        self.mirror: ResolvingMirror | None = None
        self.notes: list[str] = []
        self._apiserver_restarts = 0

    # -- setup ----------------------------------------------------------------------------------

    async def start(self) -> None:
        cp = self.cp
        for name in ("kube-scheduler", "vgpu-scheduler"):  # the session pair: unused here, CPU saved
            cp.kill(name)
        cp.ensure_namespace(NAMESPACE, webhook=False)
        port = int(cp.apiserver_url.rsplit(":", 1)[1])
        server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ssl.load_cert_chain(str(cp.certs.serving_cert), str(cp.certs.serving_key))
        for r in REPLICAS:
            proxy = FaultProxy(replica=r, upstream=("127.0.0.1", port), server_ssl=server_ssl,
                               client_ssl=cp.certs.ssl_context(), rng=random.Random(self.rng.random()),
                               record=self.history.writes.append)
            proxy_port = await proxy.start()
            self.proxies[r] = proxy
            cfg = json.loads(cp.kubeconfig.read_text())
            cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy_port}"
            (cp.dir / f"replica-{r}.kubeconfig").write_text(json.dumps(cfg))
        sem = asyncio.Semaphore(20)

        async def one(i: int) -> None:
            async with sem:
                await create_node(self.client, *node_objects(node_name(i), gpus=self.cfg.gpus))

        await asyncio.gather(*(one(i) for i in range(self.cfg.nodes)))
        for r in REPLICAS:
            await asyncio.to_thread(self._spawn_server, r)
        await self._spawn_scheduler("a", wait=True)
        holder = await _until(self._ks_holder, "kube-scheduler a to take the Lease", 60)
        self.identity["a"] = holder
        self.mirror = ResolvingMirror(self.client, NAMESPACE, KS_LEASE, MIRROR_LEASE,
                                      names={holder: hostname("a")}, other="chaos-unknown",
                                      resolve=self._resolve)
        await self.mirror.__aenter__()
        await self._spawn_scheduler("b", wait=False)
        await self._wait_registered()

    def _spawn_server(self, r: str) -> None:
        url, metrics = self.cp.spawn_server(
            self._group(r)[1], hostname=hostname(r), port=self.server_ports.get(r),
            extra=[f"--kubeconfig={self.cp.dir / f'replica-{r}.kubeconfig'}",
                   f"--scheduler-name={SCHEDULER}", "--leader-elect=true",
                   f"--leader-elect-resource-name={MIRROR_LEASE}",
                   f"--leader-elect-resource-namespace={NAMESPACE}",
                   f"--node-label-selector={group_selector(GROUP)}",
                   f"--node-lock-timeout={self.cfg.lock_timeout:g}s"],
            wait=False,
        )
        self.server_ports[r] = int(url.rsplit(":", 1)[1])
        self.metrics_urls[r] = metrics

    async def _spawn_scheduler(self, r: str, *, wait: bool) -> None:
        election = {"leaderElect": True, "resourceLock": "leases", "resourceName": KS_LEASE,
                    "resourceNamespace": NAMESPACE, **LEASE}
        self.identity.pop(r, None)
        await asyncio.to_thread(
            self.cp.spawn_scheduler, self._group(r)[0],
            profiles=(SCHEDULER,), server_url=f"https://127.0.0.1:{self.server_ports[r]}",
            leader_election=election, wait=wait, managed_resources=chart_managed_resources(),
        )
        self.ks_urls[r] = self.cp.scheduler_url

    async def _wait_registered(self) -> None:
        """Until the leading server knows every node (its metrics count the devices)."""
        want = sum(node_objects(node_name(i), gpus=self.cfg.gpus)[0]["metadata"]["annotations"].get(
            "hami.io/node-nvidia-register", "[]").count('"id"') for i in range(self.cfg.nodes))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            for r in REPLICAS:
                try:
                    seen = await asyncio.to_thread(self.cp.registered_devices, self.metrics_urls[r])
                except OSError:
                    continue
                if seen >= want:
                    return
            await asyncio.sleep(1.0)
        self.notes.append(f"registration: fewer than {want} NVIDIA devices seen after 180 s")

    # -- leadership -----------------------------------------------------------------------------

    async def _ks_holder(self) -> str:
        try:
            lease = await self.client.get_lease(NAMESPACE, KS_LEASE)
        except (ApiError, ApiConnectionError):
            return ""
        return str((lease.get("spec") or {}).get("holderIdentity") or "")

    async def _resolve(self, identity: str) -> str:
        """The replica whose kube-scheduler is `identity`: the one replica whose current identity
        is unknown, else the one whose kube-scheduler says it is the leader."""
        unknown = [r for r in REPLICAS if r not in self.identity and r not in self.down]
        replica = unknown[0] if len(unknown) == 1 else ""
        for _ in range(20):
            if replica:
                break
            for r in REPLICAS:
                with contextlib.suppress(Exception):
                    if MASTER.search(await asyncio.to_thread(self._ks_metrics, r)):
                        replica = r
            await asyncio.sleep(0.5)
        if replica:
            self.identity[replica] = identity
            return hostname(replica)
        self.notes.append(f"lease holder {identity} not matched to a replica")
        return ""

    def _ks_metrics(self, r: str) -> str:
        ctx = self.cp.certs.ssl_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with urllib.request.urlopen(f"{self.ks_urls[r]}/metrics", context=ctx, timeout=5) as resp:
            text: str = resp.read().decode()
        return text

    async def leader(self) -> str:
        holder = await _until(self._ks_holder, "a Lease holder", 60)
        for r, ident in self.identity.items():
            if ident == holder:
                return r
        await asyncio.sleep(2.0)  # a fresh holder being resolved
        holder = await self._ks_holder()
        return next((r for r, ident in self.identity.items() if ident == holder), self.rng.choice(REPLICAS))

    # -- faults (nemesis.Cluster) ---------------------------------------------------------------

    async def restart_apiserver(self, *, compact: bool) -> None:
        self._apiserver_restarts += 1
        await asyncio.to_thread(self.cp.restart_apiserver, compact=compact, hard=True,
                                log_suffix=f"-{self._apiserver_restarts}")

    def _group(self, r: str) -> list[str]:
        """The current processes of replica `r`, its kube-scheduler and its server (a restart gets
        a new name, so every process keeps its own log)."""
        out = []
        for prefix in ("kube-scheduler", "vgpu-scheduler"):
            n = self.restarts[f"{prefix}-{r}"]
            out.append(f"{prefix}-{r}-{n}" if n else f"{prefix}-{r}")
        return out

    async def kill_replica(self, replica: str) -> None:
        self.down.add(replica)
        for name in self._group(replica):
            await asyncio.to_thread(self.cp.kill, name)

    async def start_replica(self, replica: str) -> None:
        for name in self._group(replica):  # whatever is left of it (a SIGCONTed server)
            await asyncio.to_thread(self.cp.kill, name)
        self.restarts[f"kube-scheduler-{replica}"] += 1
        self.restarts[f"vgpu-scheduler-{replica}"] += 1
        await asyncio.to_thread(self._spawn_server, replica)
        await self._spawn_scheduler(replica, wait=False)
        self.down.discard(replica)

    async def pause_replica(self, replica: str) -> None:
        self.down.add(replica)
        for name in self._group(replica):
            self._signal(name, signal.SIGSTOP)

    async def resume_replica(self, replica: str) -> None:
        for name in self._group(replica):
            self._signal(name, signal.SIGCONT)
        self.down.discard(replica)

    def _signal(self, name: str, sig: int) -> None:
        proc = self.cp.procs[name].popen
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)

    async def supervise(self) -> None:
        """Start again a replica process that exited by itself, alone (kube-scheduler exits when
        it finds it lost the Lease, e.g. after a pause; its server, woken too, stays)."""
        while True:
            await asyncio.sleep(1.0)
            for r in REPLICAS:
                if r in self.down:
                    continue
                ks, srv = self._group(r)
                try:
                    if not self.cp.procs[srv].alive():
                        self.notes.append(f"{srv} exited {self.cp.procs[srv].popen.returncode}: restarted")
                        self.restarts[f"vgpu-scheduler-{r}"] += 1
                        await asyncio.to_thread(self._spawn_server, r)
                    if not self.cp.procs[ks].alive():
                        self.restarts[f"kube-scheduler-{r}"] += 1
                        await self._spawn_scheduler(r, wait=False)
                except ControlPlaneError as exc:
                    self.notes.append(f"replica {r}: restart failed: {exc}")

    def proxy_faults(self, *, delay: float = 0.0, drop: float = 0.0, error: float = 0.0) -> None:
        for proxy in self.proxies.values():
            proxy.faults.delay, proxy.faults.drop, proxy.faults.error = delay, drop, error

    def proxy_drop_all(self) -> None:
        for proxy in self.proxies.values():
            proxy.drop_all()

    def plugin(self, action: str, arg: str | float = "") -> None:
        p = self.plugin_obj
        assert p is not None
        if action == "pause":
            p.pause()
        elif action == "resume":
            p.resume()
        elif action == "late":
            p.late(float(arg))
        elif action == "kill":
            p.kill(str(arg))
        elif action == "revive":
            p.revive(str(arg))

    def nodes(self) -> Sequence[str]:
        return [node_name(i) for i in range(self.cfg.nodes)]

    async def reregister_node(self, node: str, variant: int) -> None:
        """Deleted, its pods deleted as the pod GC would, then created with another inventory."""
        await _ignore_api(self.client.delete(api.NODES, node))
        await asyncio.sleep(1.0)  # binds in flight to it land (or fail) first
        pods = await self.client.list_pods(NAMESPACE, field_selector=f"spec.nodeName={node}")
        await asyncio.gather(*(_ignore_api(self.client.delete(api.PODS, p["metadata"]["name"], NAMESPACE,
                                                              grace_period_seconds=0)) for p in pods))
        await asyncio.sleep(1.0)
        self.variants[node] = (self.variants.get(node, 0) + 1 + variant % 2) % 3
        await create_node(self.client, *node_objects(node, gpus=self.cfg.gpus, variant=self.variants[node]))

    # -- the end --------------------------------------------------------------------------------

    async def heal_all(self) -> None:
        self.proxy_faults()
        if self.plugin_obj is not None:
            self.plugin_obj.late(0.0)
            self.plugin_obj.resume()
            for node in list(self.plugin_obj.dead):
                self.plugin_obj.revive(node)
        for r in REPLICAS:
            if r in self.down or any(not self.cp.procs[n].alive() for n in self._group(r)):
                await self.start_replica(r)

    async def stop(self) -> None:
        if self.mirror is not None:
            await self.mirror.__aexit__(None, None, None)
        for proxy in self.proxies.values():
            await proxy.stop()


class ResolvingMirror(LeaseMirror):
    """LeaseMirror whose holder names are learnt: an identity not known yet is resolved (the
    harness asks which replica it is) before the mirror copies it; until then the mirror keeps
    its last copy, which our servers let expire by themselves."""

    def __init__(self, *args: Any, resolve: Callable[[str], Awaitable[str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resolve = resolve
        self._resolving: set[str] = set()
        self._latest: Obj | None = None

    def _offer(self, lease: Obj) -> None:
        self._latest = lease
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
        if holder and holder not in self.names:
            if holder not in self._resolving:
                self._resolving.add(holder)
                asyncio.get_running_loop().create_task(self._learn(holder))
            return
        super()._offer(lease)

    async def _learn(self, holder: str) -> None:
        try:
            name = await self.resolve(holder)
            if name:
                self.names[holder] = name
                if self._latest is not None:
                    self._offer(self._latest)
        finally:
            self._resolving.discard(holder)


async def _ignore_api(coro: Awaitable[Any]) -> None:
    with contextlib.suppress(ApiError, ApiConnectionError):
        await coro


async def _until(probe: Callable[[], Awaitable[str]], what: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while not (got := await probe()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)
    return got


async def _converge(client: KubeClient, limit: float) -> tuple[float, list[Violation], list[Obj], list[Obj]]:
    """Poll the final state until nothing is unsettled, at most `limit` + 30 s; returns the time it
    took, what is still unsettled, and the last pods and nodes read."""
    start = time.monotonic()
    while True:
        try:
            snap = await snapshot(client, NAMESPACE, group_selector(GROUP))
        except (ApiError, ApiConnectionError):
            await asyncio.sleep(1.0)
            continue
        now = time.monotonic()
        problems = final_problems(snap.pods, snap.reasons, t=now)
        if not problems or now - start > limit + 30:
            return now - start, problems, snap.pods, snap.nodes
        await asyncio.sleep(2.0)


async def run_chaos(cfg: ChaosConfig, bin_dir: Path, *, log: Callable[[str], None] = print) -> RunResult:
    """One run; the replicas run this checkout's server (see `_this_checkout`)."""
    with _this_checkout():
        return await _run_chaos(cfg, bin_dir, log=log)


@contextlib.contextmanager
def _this_checkout() -> Iterator[None]:
    """The servers are subprocesses started in the run's temp dir: a relative PYTHONPATH (`src`)
    would not reach them there, and they would import whatever vgpu_scheduler the venv has
    installed, maybe another checkout's. Put this checkout's src first, absolute, for the run."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(SRC), *([before] if before else [])])
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


async def _run_chaos(cfg: ChaosConfig, bin_dir: Path, *, log: Callable[[str], None]) -> RunResult:
    rng = random.Random(cfg.seed)
    cp = await asyncio.to_thread(ControlPlane.start, bin_dir)
    cp.keep_dir = cfg.keep_logs
    client = await make_client(str(cp.kubeconfig), qps=500, burst=1000)
    cluster = ChaosCluster(cp, client, cfg, rng)
    reflectors: list[Reflector] = []
    tasks: list[asyncio.Task[Any]] = []
    started = time.monotonic()
    try:
        await cluster.start()
        log(f"chaos seed={cfg.seed}: {cfg.nodes} nodes x {cfg.gpus}, cluster up in "
            f"{time.monotonic() - started:.0f}s")
        recorder = Recorder(cluster.history, replica_of=_replica_of)
        reflectors = [
            Reflector(client, api.PODS, namespace=NAMESPACE, handler=recorder.pods),
            Reflector(client, api.NODES, label_selector=group_selector(GROUP), handler=recorder.nodes),
            Reflector(client, api.LEASES, namespace=NAMESPACE, field_selector=f"metadata.name={MIRROR_LEASE}",
                      handler=recorder.lease),
        ]
        for r in reflectors:
            r.start()
            await r.wait_synced(timeout=60)
        plugin = ChaosDevicePlugin(client, delay=cfg.plugin_delay, namespace=NAMESPACE)
        await plugin.__aenter__()
        cluster.plugin_obj = plugin
        workload = Workload(client, namespace=NAMESPACE, scheduler_name=SCHEDULER,
                            rng=random.Random(rng.random()), rate=cfg.rate, max_live=cfg.max_live)
        nemesis = Nemesis(cluster, rng=random.Random(rng.random()), clock=time.monotonic, kinds=cfg.kinds)
        cluster.history.faults = nemesis.faults
        supervisor = asyncio.get_running_loop().create_task(cluster.supervise())
        tasks.append(supervisor)
        t0 = time.monotonic()
        await asyncio.gather(workload.run(cfg.seconds), nemesis.run(cfg.seconds))
        supervisor.cancel()
        await cluster.heal_all()
        minutes = (time.monotonic() - t0) / 60
        converged, unsettled, pods, nodes = await _converge(client, cfg.converge_limit)
        verdict: Verdict = check(cluster.history, lock_timeout=cfg.lock_timeout)
        violations = list(verdict.violations)
        now = time.monotonic()
        violations.extend(Violation(kind, now, f"final state: {msg}")
                          for kind, msg in allocation_problems(pods, nodes))
        violations.extend(unsettled)
        if converged > cfg.converge_limit:
            violations.append(Violation("not-converged", now, f"{converged:.0f}s after the faults stopped, "
                                        f"{len(unsettled)} pods unsettled"))
        notes = [*cluster.notes, *nemesis.errors, *plugin.errors[:5]]
        return RunResult(
            seed=cfg.seed, minutes=minutes, faults=dict(Counter(f.kind for f in nemesis.faults)),
            placed=verdict.placed, created=workload.stats.created, deleted=workload.stats.deleted,
            violations=violations, recovery=verdict.recovery, converged_s=converged, notes=notes,
            logs="" if not violations else cp.logs(lines=30),
        )
    finally:
        # Every step, even after a failed one: no process may outlive the run. The processes go
        # first, so that no replica opens a proxy connection while the proxies close.
        for task in tasks:
            task.cancel()
        _stop_keeping(cp, cfg.keep_logs, log)  # blocking, but nothing (a cancellation) can skip it
        for step in (
            *(r.stop() for r in reflectors),
            *((cluster.plugin_obj.stop(),) if cluster.plugin_obj is not None else ()),
            cluster.stop(),
            client.close(),
        ):
            try:
                await step
            except (Exception, asyncio.CancelledError) as exc:
                log(f"cleanup: {exc!r}")


def _stop_keeping(cp: ControlPlane, keep: bool, log: Callable[[str], None]) -> None:
    if keep:
        log(f"logs kept in {cp.dir}")
    cp.stop()


def _replica_of(holder: str) -> str:
    prefix = holder.rsplit("_", 1)[0]
    return prefix.removeprefix("chaos-replica-") if prefix.startswith("chaos-replica-") else prefix
