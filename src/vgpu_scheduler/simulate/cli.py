"""`vgpu-scheduler simulate`: run the scheduler on an embedded cluster, no Kubernetes needed.

Exit codes: 0 done, 2 bad input (flags, snapshot/pods/device-config file, missing matplotlib for
`--plot`) with one message on stderr and nothing written.

`--extender-url URL` sends the same filter/bind bodies to a running server. That server has its own
cluster, so it must hold the same nodes *and* the pods to schedule: start it with
`vgpu-scheduler --cluster-snapshot FILE` on a file holding the snapshot followed by the pods. The
simulation then mirrors every bind the server accepted into its own embedded cluster (an in-process
bind to the node the server chose, which fits the pod there with the same engine), and the report
is read from that mirror. The mirror matches the server only while both see the same pods come and
go, i.e. for pods without run-time annotations (the server's device plugin counts run times in wall
seconds, the simulation in simulated seconds).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import DeviceConfigError, default_device_config, load_device_config
from vgpu_scheduler.devices import registry
from vgpu_scheduler.devices.protocol import VendorConfigError
from vgpu_scheduler.engine.policy import NODE_POLICIES, unknown_gpu_policy
from vgpu_scheduler.scheduler.extender import Extender
from vgpu_scheduler.scheduler.options import SchedulerOptions, gate_flags, vendor_flags, with_gates
from vgpu_scheduler.simulate.extenderio import HttpExtender
from vgpu_scheduler.simulate.loop import Simulation, run_to_result
from vgpu_scheduler.simulate.options import (
    ARRIVAL_ANNOTATION,
    SimulationOptions,
    SimulationResult,
    arrival_seconds,
)
from vgpu_scheduler.simulate.plot import INSTALL_HINT
from vgpu_scheduler.simulate.providers import DEFAULT_PROVIDER, provider_names
from vgpu_scheduler.simulate.queue import pod_key
from vgpu_scheduler.simulate.report import dumps_report
from vgpu_scheduler.simulate.workload import demo_workload
from vgpu_scheduler.standin.embedded.fleet import demo_fleet
from vgpu_scheduler.standin.embedded.runtime import InvalidDurationError, duration_seconds
from vgpu_scheduler.standin.embedded.snapshot import Snapshot, SnapshotError, load_snapshot
from vgpu_scheduler.wire import objects

PROG = "vgpu-scheduler simulate"


def _gpu_policy(value: str) -> str:
    """HAMi treats unknown names as spread (a known trap, #1931); a what-if run says so instead of
    silently simulating spread, as the server refuses to start with one."""
    problem = unknown_gpu_policy(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


DEFAULT_COUNT = 200


def _go_bool(value: str) -> bool:
    """`--enable-ascend=true` as the scheduler's Go flag takes it (1, t, T, TRUE, true, True, ...)."""
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {value!r}")


def _gates(args: argparse.Namespace) -> dict[str, bool]:
    """The vendors' enable gates as given (`{"enable_ascend": True, ...}`)."""
    return {gate.option: getattr(args, gate.option) for gate in gate_flags()}


class InputError(ValueError):
    """Bad input; the message is shown as is and the command exits 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2, like every other bad input
        raise InputError(f"{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Schedule pods on a simulated cluster with the scheduler's own code, in simulated time.",
    )
    p.add_argument("--snapshot", metavar="FILE", help="cluster state (kubectl get nodes,pods,resourcequotas "
                   "-o yaml|json, or multi-document YAML); default: the 16-node demo fleet")
    p.add_argument("--pods", metavar="FILE", help="a List or multi-document YAML/JSON of Pods to schedule in "
                   f"order (Nodes in it join the cluster at their {ARRIVAL_ANNOTATION}); "
                   "default: a generated demo workload")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the demo workload (default 0)")
    p.add_argument("--count", type=int, default=DEFAULT_COUNT, metavar="N",
                   help=f"pods in the demo workload (default {DEFAULT_COUNT})")
    p.add_argument("--device-config-file", metavar="FILE", help="device config (default: the chart's)")
    for gate in gate_flags():  # the vendors' --enable-<vendor>
        vendor = gate.option.removeprefix("enable_")
        p.add_argument(f"--{gate.name}", dest=gate.option, nargs="?", const=True, default=False,
                       type=_go_bool, metavar="BOOL",
                       help=f"register the {vendor} section, as the scheduler's flag does")
    p.add_argument("--node-scheduler-policy", default="binpack", choices=NODE_POLICIES)
    p.add_argument(
        "--gpu-scheduler-policy",
        default="spread",
        metavar="POLICY",
        type=_gpu_policy,
        help="binpack, spread, topology-aware, mutex, numa, best-fit (ours), or a comma chain such as "
        "binpack,numa",
    )
    p.add_argument("--provider", default=DEFAULT_PROVIDER, choices=provider_names(),
                   help="algorithm provider: the predicates and priorities kube-scheduler runs")
    p.add_argument("--extender-url", metavar="URL",
                   help="send filter/bind to a running server (see the module documentation)")
    p.add_argument("--output", metavar="FILE.json", help="write the JSON report here")
    p.add_argument("--explain", action="store_true",
                   help="pending pods in the report carry their explanation (as `explain -o json`)")
    p.add_argument("--plot", metavar="FILE.png", help=f"draw the report (needs matplotlib: {INSTALL_HINT})")
    p.add_argument("--progress", action="store_true", help="progress bar even when stderr is not a terminal")
    p.add_argument("--max-sim-time", type=_sim_seconds, metavar="SECONDS",
                   help="stop once the next thing to do lies beyond this simulated time (default: "
                   "run until nothing is left to try); the report's summary.end says so")
    return p


def _sim_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"expected simulated seconds >= 0, got {value!r}")
    return seconds


@dataclass(slots=True)
class Inputs:
    nodes: list[dict[str, Any]]
    existing: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    added_nodes: list[dict[str, Any]]
    device_config: DeviceConfig


def _name(obj: Mapping[str, Any]) -> str:
    ns, name = objects.namespace(obj), objects.name(obj)
    return f"{ns}/{name}" if ns else name


def _check_pod_annotations(
    path: str, pods: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]
) -> None:
    for obj, kind in [*((p, "Pod") for p in pods), *((n, "Node") for n in nodes)]:
        try:
            arrival_seconds(obj)
            if kind == "Pod":
                duration_seconds(obj)
        except (ValueError, InvalidDurationError) as exc:
            raise InputError(f"{path}: {kind} {_name(obj)}: {exc}") from None


def load_inputs(args: argparse.Namespace) -> Inputs:
    if args.count < 0:
        raise InputError(f"--count must be >= 0, got {args.count}")
    try:
        if args.device_config_file:
            config = load_device_config(args.device_config_file)
        else:
            config = default_device_config()
    except DeviceConfigError as exc:
        raise InputError(f"failed to load device config: {exc}") from None
    try:  # the sections only a gate (--enable-ascend, …) registers are read now
        registry.build(config, vendor_flags(with_gates(SchedulerOptions(), _gates(args))))
    except VendorConfigError as exc:
        raise InputError(f"failed to initialize devices: {exc}") from None
    try:
        snapshot = load_snapshot(args.snapshot) if args.snapshot else Snapshot(nodes=demo_fleet())
        extra = load_snapshot(args.pods) if args.pods else Snapshot(pods=demo_workload(args.count, args.seed))
    except SnapshotError as exc:
        raise InputError(str(exc)) from None
    pods_file = args.pods or "<demo workload>"
    if extra.resourcequotas:
        q = extra.resourcequotas[0]
        raise InputError(f"{pods_file}: ResourceQuota {_name(q)}: only Pods and Nodes belong in a pods file")
    # Pending, unbound pods of the snapshot are scheduled too (kube-scheduler would), before the file's.
    pending = [p for p in snapshot.pods
               if not objects.node_name(p) and (objects.phase(p) or "Pending") == "Pending"]
    existing = [p for p in snapshot.pods if not any(p is q for q in pending)]
    seen = {pod_key(p) for p in snapshot.pods}
    for p in extra.pods:
        if pod_key(p) in seen:
            raise InputError(f"{pods_file}: Pod {pod_key(p)}: already in the snapshot {args.snapshot}")
    known_nodes = {objects.name(n) for n in snapshot.nodes}
    for n in extra.nodes:
        if objects.name(n) in known_nodes:
            raise InputError(f"{pods_file}: Node {_name(n)}: already in the snapshot {args.snapshot}")
    _check_pod_annotations(args.snapshot or "<demo fleet>", pending, [])
    _check_pod_annotations(pods_file, extra.pods, extra.nodes)
    return Inputs(
        nodes=snapshot.nodes,
        existing=[*existing, *snapshot.resourcequotas],
        pods=[*pending, *extra.pods],
        added_nodes=extra.nodes,
        device_config=config,
    )


class _MirrorEndpoint:
    """`--extender-url`: the server decides and binds; the embedded cluster mirrors accepted binds."""

    def __init__(self, remote: HttpExtender, local: Extender) -> None:
        self.remote = remote
        self.local = local

    async def filter(self, body: bytes) -> bytes:
        return await self.remote.filter(body)

    async def bind(self, body: bytes) -> bytes:
        answer = await self.remote.bind(body)
        if b'"Error":""' in answer.replace(b" ", b""):
            return await self.local.bind(body)
        return answer

    async def close(self) -> None:
        await self.remote.close()


def _progress_callback(enabled: bool, total: int) -> tuple[Callable[[int, int], None] | None, Any]:
    if not enabled or total == 0:
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=total, unit="pod", file=sys.stderr, desc="scheduled", leave=False)

    def update(done: int, _total: int) -> None:
        bar.update(done - bar.n)

    return update, bar


async def _run(
    inputs: Inputs, args: argparse.Namespace, progress: Callable[[int, int], None] | None
) -> SimulationResult:
    options = SimulationOptions(
        provider=args.provider,
        node_scheduler_policy=args.node_scheduler_policy,
        gpu_scheduler_policy=args.gpu_scheduler_policy,
        device_config=inputs.device_config,
        seed=args.seed,
        vendor_gates=frozenset(gate for gate, on in _gates(args).items() if on),
        explain=args.explain,
        max_sim_time=args.max_sim_time,
    )
    sim = Simulation(
        inputs.nodes, inputs.pods, existing=inputs.existing, added_nodes=inputs.added_nodes,
        options=options, progress=progress,
    )
    try:
        await sim.start()
        if args.extender_url:
            sim.endpoint = _MirrorEndpoint(HttpExtender(args.extender_url), sim.process.extender)
        return await sim.run()
    finally:
        await sim.close()


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def summary_lines(result: SimulationResult) -> list[str]:
    s = result.report["summary"]
    alloc, peak, frag = s["allocation"], s["peak_allocation"], s["fragmentation"]
    pods = s["pods"]
    wall = result.wall_seconds
    rate = pods["scheduled"] / wall if wall > 0 else 0.0
    erring = pods["pending_error"]
    erring_text = f" ({erring} of them on an error: see their \"error\")" if erring else ""
    lines = [
        f"pods: {pods['scheduled']}/{pods['total']} scheduled, {pods['pending']} pending{erring_text} "
        f"({result.cycles} scheduling cycles)",
        f"fleet: {s['gpu_nodes']} GPU nodes, {s['gpus']} GPUs",
        f"GPU allocation at the end: memory {_pct(alloc['memory']['ratio'])} "
        f"(peak {_pct(peak['memory_ratio'])}), "
        f"cores {_pct(alloc['cores']['ratio'])} (peak {_pct(peak['core_ratio'])}), "
        f"slots {_pct(alloc['slots']['ratio'])} (peak {_pct(peak['slot_ratio'])})",
        f"fragmentation: {frag['fragmented_memory_mib']} of {frag['free_memory_mib']} MiB free GPU memory "
        f"unusable by the pending pods ({_pct(frag['fraction'])})",
        f"simulated makespan: {s['makespan_seconds']:.3f} s; wall time {wall:.2f} s ({rate:.1f} pods/s)",
    ]
    if s["end"] != "done":
        lines.append(f"stopped early: {_END_TEXT.get(s['end'], s['end'])}")
    return lines


_END_TEXT = {
    "max_sim_time": "--max-sim-time reached with pods still to try",
    "no_progress": "node locks kept expiring and being taken again with nothing scheduled in between",
}


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(args_list)
        if args.plot and importlib.util.find_spec("matplotlib") is None:
            raise InputError(f"--plot needs matplotlib; install it with: {INSTALL_HINT}")
        inputs = load_inputs(args)
    except InputError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    show = args.progress or sys.stderr.isatty()
    progress, bar = _progress_callback(show, len(inputs.pods))
    started = time.perf_counter()
    try:
        result = run_to_result(_run(inputs, args, progress))
    finally:
        if bar is not None:
            bar.close()
    result.wall_seconds = time.perf_counter() - started
    text = dumps_report(result.report)
    if args.output:
        _write_atomically(args.output, text)
    if args.plot:
        from vgpu_scheduler.simulate.plot import plot

        plot(result.report, args.plot)
    print("\n".join(summary_lines(result)))
    return 0


def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
