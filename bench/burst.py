"""Burst benchmark on a real control plane: M pods created at once, scheduled by kube-scheduler v1.36.

    scripts/control-plane-build && .venv/bin/python bench/burst.py \
        [--nodes 200] [--gpus 8] [--pods 2000] [--delays 0.015 2] [--policies binpack spread] \
        [--no-floor] [--fleet]

Each scenario gets a fresh control plane (tests/e2e/controlplane.py: etcd, kube-apiserver,
kube-scheduler, our server as extender + webhook) with N nodes × G GPUs registered like HAMi's device
plugin, then creates M pods concurrently through the API and waits (bounded) until every pod is bound
and, with the extender, confirmed by the device-plugin stand-in (tests/e2e/pluginstandin.py) after its delay:

* `kube-scheduler alone`: pods asking only cpu, default-scheduler profile, our server never called;
* `extender <policy> <delay>`: one-GPU pods (gpumem 4000), hami-scheduler profile,
  `--node-scheduler-policy <policy>`, device plugin confirming after <delay> seconds;
* `floor <delay>`: the same pods and stand-in, with bench/floor_extender.py in place of our server:
  our API writes per pod with trivial decisions, the protocol's own cost on this machine. Each run
  ends with our pods/s as a fraction of the floor's and of kube-scheduler alone's.

`--fleet` is the fleet-sized burst (2,000 nodes × 8 GPUs, 20,000 pods, binpack, plugin 15 ms; heavy,
not for CI): it also prints kube-scheduler's scheduling-algorithm p99 (the extender's filter call over
HTTP is most of it; kube-scheduler v1.36 has no metric of the extender call alone) and our peak RSS.

Figures: pods/s (bound pods / time from the first create to the last binding), time to bind p50/p99
(create call → nodeName seen on the watch), failed attempts (FailedScheduling events, counting each
event's series) and of those the extender errors, and violations read from the API at the end:
`wrong-node` devices in a pod's allocation that are not on its node, `overcommit` devices whose pods
together exceed count/memory/cores, `unconfirmed` bound GPU pods without `bind-phase: success`,
`locks` nodes still carrying `hami.io/mutex.lock`. Figures only; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "tests" / "e2e"))
sys.path.insert(0, str(BENCH_DIR.parent))  # the repository root: pluginstandin imports tests.builders
from controlplane import (  # noqa: E402
    ControlPlane,
    ControlPlaneUnavailable,
    find_binaries_or_raise,
    free_port,
)
from faultcheck import allocation_problems  # noqa: E402
from pluginstandin import DevicePluginStandIn, cpu_pod, create_node, gpu_node, gpu_pod  # noqa: E402

from vgpu_scheduler.cluster import api  # noqa: E402
from vgpu_scheduler.cluster.client import KubeClient  # noqa: E402
from vgpu_scheduler.cluster.kubeconfig import make_client  # noqa: E402
from vgpu_scheduler.cluster.reflector import Reflector  # noqa: E402
from vgpu_scheduler.wire import keys  # noqa: E402

Obj = dict[str, Any]
NAMESPACE = "burst"
GPUMEM = 4000
# A FailedScheduling note that is not a filter verdict ("0/20 nodes are available: ...") is an error of
# a scheduling or binding call: with managed resources, our extender's (its Error or the HTTP call).
FILTER_VERDICT = re.compile(r"^\d+/\d+ nodes are available")


@dataclass
class Scenario:
    name: str
    extender: bool
    policy: str = "binpack"
    delay: float = 0.0
    floor: bool = False
    """bench/floor_extender.py in place of our server (extender is True too: GPU pods, stand-in)."""


FLOOR_PROC = "floor extender"
OUR_PROC = "vgpu-scheduler"


class FloorControlPlane(ControlPlane):
    """The control plane with the protocol floor (bench/floor_extender.py) where our server runs:
    same port, certificates, webhook configuration and kube-scheduler extender configuration."""

    def spawn_server(self, name: str, *, port: int | None = None, metrics_port: int | None = None,
                     extra: Sequence[str] = (), hostname: str | None = None,
                     wait: bool = True) -> tuple[str, str]:
        port = port or free_port()
        c = self.certs
        proc = self._spawn(FLOOR_PROC, [
            sys.executable, str(BENCH_DIR / "floor_extender.py"), f"--port={port}",
            f"--server={self.apiserver_url}", f"--ca={c.ca_file}", f"--cert={c.admin_cert}",
            f"--key={c.admin_key}", f"--serving-cert={c.serving_cert}", f"--serving-key={c.serving_key}",
        ])
        url = f"https://127.0.0.1:{port}"
        if wait:
            self._wait_ready(proc, f"{url}/readyz", c.ssl_context(client_cert=False), b"ok")
        return url, ""


@dataclass
class Result:
    scenario: Scenario
    pods: int
    bound: int = 0
    confirmed: int = 0
    pods_per_s: float = 0.0
    bind_p50: float = 0.0
    bind_p99: float = 0.0
    failed_attempts: int = 0
    extender_errors: int = 0
    violations: Counter[str] = field(default_factory=Counter)
    events: Counter[str] = field(default_factory=Counter)
    """Events in the namespace after the burst, by reason (what `kubectl describe pod` shows)."""
    timed_out: bool = False
    wall: float = 0.0
    notes: list[str] = field(default_factory=list)


class Recorder:
    """Reflector handler: loop time at which each pod was first seen bound / confirmed."""

    def __init__(self) -> None:
        self.bound: dict[str, float] = {}
        self.confirmed: dict[str, float] = {}
        self.progress = asyncio.Event()

    def on_add(self, obj: Obj) -> None:
        self._see(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._see(new)

    def on_delete(self, obj: Obj) -> None:
        pass

    def _see(self, pod: Obj) -> None:
        name = pod["metadata"]["name"]
        now = asyncio.get_running_loop().time()
        if pod.get("spec", {}).get("nodeName") and name not in self.bound:
            self.bound[name] = now
            self.progress.set()
        phase = (pod["metadata"].get("annotations") or {}).get(keys.BIND_PHASE)
        if phase == keys.BIND_PHASE_SUCCESS and name not in self.confirmed:
            self.confirmed[name] = now
            self.progress.set()


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def violations(pods: list[Obj], nodes: list[Obj]) -> Counter[str]:
    """What must never happen, read from the final API state (see the module docstring)."""
    out = Counter(kind for kind, _ in allocation_problems(pods, nodes))
    for pod in pods:
        ann = pod["metadata"].get("annotations") or {}
        allocated = ann.get(keys.VGPU_ALLOCATED) or ann.get(keys.VGPU_TO_ALLOCATE)
        if pod["spec"].get("nodeName") and allocated and ann.get(keys.BIND_PHASE) != keys.BIND_PHASE_SUCCESS:
            out["unconfirmed"] += 1
    out["locks"] += sum(1 for node in nodes if keys.NODE_LOCK in (node["metadata"].get("annotations") or {}))
    return +out  # zero counts dropped


async def run_scenario(cp: ControlPlane, sc: Scenario, n_nodes: int, gpus: int, n_pods: int,
                       timeout: float, stall: float, concurrency: int) -> Result:
    res = Result(sc, n_pods)
    client: KubeClient = await make_client(str(cp.kubeconfig), qps=5000, burst=5000)
    loop = asyncio.get_running_loop()
    try:
        sem = asyncio.Semaphore(concurrency)

        async def bounded(coro: Any) -> Any:
            async with sem:
                return await coro

        await asyncio.gather(*(bounded(create_node(client, *gpu_node(f"node-{i:04d}", gpus)))
                               for i in range(n_nodes)))
        if sc.extender and not sc.floor:
            await asyncio.to_thread(cp.wait_devices_registered, n_nodes * gpus)
        cp.ensure_namespace(NAMESPACE, webhook=sc.extender)
        recorder = Recorder()
        watch = Reflector(client, api.PODS, namespace=NAMESPACE, handler=recorder)
        watch.start()
        await watch.wait_synced(timeout=60)
        plugin = DevicePluginStandIn(client, delay=sc.delay, namespace=NAMESPACE) if sc.extender else None
        if plugin is not None:
            await plugin.__aenter__()
        try:
            created: dict[str, float] = {}

            async def create(i: int) -> None:
                name = f"p-{i:05d}"
                pod = gpu_pod(name, NAMESPACE, gpumem=GPUMEM) if sc.extender else cpu_pod(name, NAMESPACE)
                async with sem:
                    created[name] = loop.time()
                    await client.create(api.PODS, pod)

            t0 = loop.time()
            await asyncio.gather(*(create(i) for i in range(n_pods)))
            deadline, last_progress = t0 + timeout, loop.time()
            while True:
                done = len(recorder.bound) >= n_pods and (
                    not sc.extender or len(recorder.confirmed) >= n_pods)
                now = loop.time()
                if done:
                    break
                if now > deadline or now - last_progress > stall:
                    res.timed_out = True
                    break
                recorder.progress.clear()
                try:
                    await asyncio.wait_for(recorder.progress.wait(), 1.0)
                    last_progress = loop.time()
                except TimeoutError:
                    pass
            res.wall = loop.time() - t0
            res.bound, res.confirmed = len(recorder.bound), len(recorder.confirmed)
            if recorder.bound:
                res.pods_per_s = res.bound / max(1e-9, max(recorder.bound.values()) - t0)
            waits = [recorder.bound[n] - created[n] for n in recorder.bound if n in created]
            res.bind_p50, res.bind_p99 = pct(waits, 0.50), pct(waits, 0.99)
            if plugin is not None:
                # Let in-flight admissions land: their lock releases follow the confirmations the
                # wait above counted (a fleet's slow PATCHes once left 21 locks cut by `stop`).
                await asyncio.sleep(max(0.5, sc.delay * 2))
                await plugin.drain(timeout=30.0)
                res.notes.extend(plugin.errors[:3])
        finally:
            if plugin is not None:
                await plugin.stop()
            await watch.stop()
        events, _ = await client.list_all(api.EVENTS_V1, NAMESPACE)
        why: Counter[str] = Counter()
        for ev in events:
            res.events[str(ev.get("reason") or "")] += 1
            if ev.get("reason") != "FailedScheduling":
                continue
            n = int((ev.get("series") or {}).get("count") or 1)
            note = str(ev.get("note") or "")
            res.failed_attempts += n
            why[re.sub(r"\d+", "N", note)[:140]] += n  # p-00012 / ports / counts alike
            if not FILTER_VERDICT.match(note):
                res.extender_errors += n
        res.notes.extend(f"{n}x {note}" for note, n in why.most_common(3))
        pods = await client.list_pods(NAMESPACE)
        nodes, _ = await client.list_all(api.NODES)
        res.violations = violations(pods, nodes)
    finally:
        await client.close()
    return res


# Mean latencies read from the components' /metrics after a scenario: where the time went.
SCHEDULER_MEANS = {
    "ks algorithm": ("scheduler_scheduling_algorithm_duration_seconds", {}),
    "ks attempt": ("scheduler_scheduling_attempt_duration_seconds", {"result": "scheduled"}),
}
REQUESTS = "apiserver_request_duration_seconds"
APISERVER_MEANS = {
    "PATCH pod": (REQUESTS, {"verb": "PATCH", "resource": "pods", "subresource": ""}),
    "PATCH node": (REQUESTS, {"verb": "PATCH", "resource": "nodes", "subresource": ""}),
    "POST binding": (REQUESTS, {"verb": "POST", "resource": "pods", "subresource": "binding"}),
    "POST pod": (REQUESTS, {"verb": "POST", "resource": "pods", "subresource": ""}),
}
SAMPLE = re.compile(r'^(\w+?)_(sum|count)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metric_means(text: str, wanted: dict[str, tuple[str, dict[str, str]]]) -> dict[str, float]:
    """Mean seconds of each wanted histogram (sum/count over the series whose labels match)."""
    sums: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        name, kind, labels_text, value = m.groups()
        labels = dict(LABEL.findall(labels_text or ""))
        for key, (metric, match) in wanted.items():
            if name == metric and all(labels.get(k, "") == v for k, v in match.items()):
                (sums if kind == "sum" else counts)[key] += float(value)
    return {key: sums[key] / counts[key] for key in wanted if counts[key]}


TOTAL = re.compile(r'^apiserver_request_total\{(.*)\} (\S+)$')
WRITE_VERBS = {"POST", "PATCH", "PUT", "DELETE", "APPLY"}


def api_writes(text: str) -> Counter[str]:
    """Mutating requests kube-apiserver served since it started, by "VERB resource[/sub]": what
    a scheduled pod costs the API server, the resource both schedulers share."""
    out: Counter[str] = Counter()
    for line in text.splitlines():
        m = TOTAL.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(1)))
        if labels.get("verb") in WRITE_VERBS:
            sub = labels.get("subresource", "")
            kind = f"{labels['verb']} {labels.get('resource', '')}{'/' + sub if sub else ''}"
            out[kind] += int(float(m.group(2)))
    return out


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its live descendants (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += times.get(p, 0.0)
        todo.extend(c for c, parent in parents.items() if parent == p)
    return total


def component_cpu(cp: ControlPlane) -> dict[str, float]:
    """CPU seconds used so far by each component of the control plane, and by this process (the
    pod creator, the device-plugin stand-in and the watch that times the binds)."""
    out = {name: tree_cpu_seconds(proc.popen.pid) for name, proc in cp.procs.items()}
    out["bench (creator, stand-in)"] = time.process_time()
    return out


def component_latencies(cp: ControlPlane) -> dict[str, float]:
    out: dict[str, float] = {}
    try:
        out.update(metric_means(cp.scheduler_metrics(), SCHEDULER_MEANS))
        out.update(metric_means(cp.apiserver_metrics(), APISERVER_MEANS))
    except Exception as exc:  # figures only: a failed read must not lose the scenario's result
        print(f"   (component metrics not read: {exc})", flush=True)
    return out


def table(results: list[Result]) -> str:
    head = (f"{'scenario':<26} {'bound':>11} {'pods/s':>7} {'bind p50':>9} {'bind p99':>9} "
            f"{'failed':>7} {'ext.err':>7} {'wrong-node':>10} {'overcommit':>10} {'unconfirmed':>11} "
            f"{'locks':>5}")
    lines = [head, "-" * len(head)]
    for r in results:
        v = r.violations
        bound = f"{r.bound}/{r.pods}" + ("!" if r.timed_out else "")
        lines.append(
            f"{r.scenario.name:<26} {bound:>11} {r.pods_per_s:>7.1f} {r.bind_p50:>8.2f}s {r.bind_p99:>8.2f}s "
            f"{r.failed_attempts:>7} {r.extender_errors:>7} {v['wrong-node']:>10} {v['overcommit']:>10} "
            f"{v['unconfirmed']:>11} {v['locks']:>5}"
        )
    return "\n".join(lines)


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    out = [] if args.no_alone else [Scenario("kube-scheduler alone", extender=False)]
    for delay in args.delays:
        if not args.no_floor:
            out.append(Scenario(f"floor {delay:g}s", True, delay=delay, floor=True))
        for policy in args.policies:
            out.append(Scenario(f"extender {policy} {delay:g}s", True, policy, delay))
    return out


BUCKET = re.compile(r'^(\w+)_bucket\{(.*)\} (\S+)$')


def histogram_quantile(text: str, metric: str, q: float) -> float | None:
    """The upper bound of the bucket holding quantile `q` of a histogram (every series summed), as
    Prometheus' histogram_quantile would bound it; None without observations."""
    buckets: Counter[float] = Counter()
    for line in text.splitlines():
        m = BUCKET.match(line)
        if not m or m.group(1) != metric:
            continue
        le = dict(LABEL.findall(m.group(2))).get("le", "")
        buckets[float("inf") if le == "+Inf" else float(le)] += float(m.group(3))
    if not buckets:
        return None
    total = buckets[float("inf")] if float("inf") in buckets else max(buckets.values())
    if total <= 0:
        return None
    for le in sorted(buckets):
        if buckets[le] >= q * total:
            return le
    return None


def peak_rss_mib(pid: int) -> float | None:
    """VmHWM (peak resident set) of a process, MiB; None once it has exited."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def ratios(results: list[Result]) -> list[str]:
    """Our pods/s against the floor's (same delay) and against kube-scheduler alone's."""
    alone = next((r.pods_per_s for r in results if not r.scenario.extender), 0.0)
    floors = {r.scenario.delay: r.pods_per_s for r in results if r.scenario.floor}
    lines = []
    for r in results:
        if not r.scenario.extender or r.scenario.floor:
            continue
        parts = []
        floor = floors.get(r.scenario.delay, 0.0)
        if floor:
            parts.append(f"{r.pods_per_s / floor:.2f}x the floor ({floor:.1f} pods/s)")
        if alone:
            parts.append(f"{r.pods_per_s / alone:.2f}x kube-scheduler alone ({alone:.1f} pods/s)")
        if parts:
            lines.append(f"{r.scenario.name}: {r.pods_per_s:.1f} pods/s = " + ", ".join(parts))
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=200)
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--pods", type=int, default=2000)
    p.add_argument("--delays", type=float, nargs="+", default=[0.015, 2.0],
                   help="device-plugin confirmation delays, seconds")
    p.add_argument("--policies", nargs="+", default=["binpack", "spread"], choices=["binpack", "spread"])
    p.add_argument("--no-alone", action="store_true", help="skip the kube-scheduler-alone baseline")
    p.add_argument("--no-floor", action="store_true",
                   help="skip the protocol floor (bench/floor_extender.py)")
    p.add_argument("--fleet", action="store_true",
                   help="the fleet-sized burst: 2,000 nodes, 20,000 pods, binpack, plugin 15 ms, no "
                        "baselines unless --with-baselines (heavy; not for CI)")
    p.add_argument("--with-baselines", action="store_true", help="with --fleet: run alone and floor too")
    p.add_argument("--timeout", type=float, default=600.0, help="bound on one scenario's wait, seconds")
    p.add_argument("--stall", type=float, default=120.0, help="give up after this long without progress")
    p.add_argument("--concurrency", type=int, default=100, help="API requests in flight while creating")
    p.add_argument("--keep-logs", action="store_true",
                   help="keep each scenario's temp dir (component logs) instead of removing it")
    p.add_argument("--cpu-profile", metavar="FILE",
                   help="sample our server's (and the floor's) CPU time: collapsed stacks in FILE.<pid> "
                        "(bench/cpuprofile; read them with bench/cpuprofile/report.py)")
    args = p.parse_args()
    if args.cpu_profile:
        hook = str(BENCH_DIR / "cpuprofile")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [hook, os.environ.get("PYTHONPATH")]))
        os.environ["VGPU_CPU_PROFILE"] = os.path.abspath(args.cpu_profile)
    if args.fleet:
        args.nodes, args.pods, args.policies, args.delays = 2000, 20000, ["binpack"], [0.015]
        args.timeout, args.concurrency = max(args.timeout, 1800.0), 200
        if not args.with_baselines:
            args.no_alone = args.no_floor = True
    try:
        bin_dir = find_binaries_or_raise()
    except ControlPlaneUnavailable as exc:
        print(exc)
        return 2
    results: list[Result] = []
    for sc in scenarios(args):
        started = time.monotonic()
        print(f"== {sc.name}: {args.nodes} nodes x {args.gpus} GPUs, {args.pods} pods", flush=True)
        plane = FloorControlPlane if sc.floor else ControlPlane
        with plane.start(bin_dir, node_policy=sc.policy) as cp:
            cpu_before = component_cpu(cp)
            res = asyncio.run(run_scenario(cp, sc, args.nodes, args.gpus, args.pods,
                                           args.timeout, args.stall, args.concurrency))
            cpu = {k: v - cpu_before.get(k, 0.0) for k, v in component_cpu(cp).items()}
            latencies = component_latencies(cp)
            ours = cp.procs.get(OUR_PROC)
            rss = peak_rss_mib(ours.popen.pid) if ours is not None else None
            try:
                algorithm_p99 = histogram_quantile(
                    cp.scheduler_metrics(), "scheduler_scheduling_algorithm_duration_seconds", 0.99)
            except Exception:  # figures only
                algorithm_p99 = None
            try:
                writes = api_writes(cp.apiserver_metrics())
            except Exception as exc:  # figures only
                print(f"   (API write counts not read: {exc})", flush=True)
                writes = Counter()
            cp.keep_dir = args.keep_logs
            if args.keep_logs:
                print(f"   logs kept in {cp.dir}", flush=True)
        results.append(res)
        if latencies:
            print("   mean latency: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in latencies.items()),
                  flush=True)
        if writes and res.bound:
            total = sum(writes.values())
            top = ", ".join(f"{k} {v / res.bound:.2f}" for k, v in writes.most_common(8))
            print(f"   API writes since start (setup included): {total}, {total / res.bound:.2f} per bound "
                  f"pod, {total / max(res.wall, 1e-9):.0f}/s over the burst; per pod: {top}", flush=True)
        if sc.extender and (algorithm_p99 is not None or rss is not None):
            p99 = "?" if algorithm_p99 is None else f"<= {algorithm_p99 * 1000:g} ms"
            print(f"   kube-scheduler algorithm p99 (extender filter over HTTP included): {p99}"
                  + (f"; our server's peak RSS {rss:.0f} MiB" if rss is not None else ""), flush=True)
        server = FLOOR_PROC if sc.floor else OUR_PROC
        if res.bound and server in cpu:
            print(f"   {server} CPU per bound pod: {cpu[server] * 1000 / res.bound:.2f} ms", flush=True)
        if res.bound:
            print("   CPU ms per bound pod: " + ", ".join(
                f"{k} {v * 1000 / res.bound:.1f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])
            ) + f" (over a {res.wall:.1f} s burst on {os.cpu_count()} cores)", flush=True)
        if res.bound and res.events:
            shown = ("FilteringSucceed", "BindingSucceed", "Scheduled", "FilteringFailed", "FailedScheduling")
            print("   events per bound pod: " + ", ".join(
                f"{reason} {res.events[reason] / res.bound:.2f}" for reason in shown if res.events[reason]
            ), flush=True)
        extra = "\n             ".join(res.notes)
        print(f"   bound {res.bound}/{res.pods}, confirmed {res.confirmed}, burst {res.wall:.1f}s, "
              f"scenario {time.monotonic() - started:.0f}s" + (" (TIMED OUT)" if res.timed_out else "")
              + (f"\n   failures: {extra}" if extra else ""), flush=True)
    print()
    print(table(results))
    print("bound: '!' = the bounded wait ended first. failed = FailedScheduling events (with series counts); "
          "ext.err = those that are call errors, not filter verdicts.")
    for line in ratios(results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
