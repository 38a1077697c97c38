"""`vgpu-scheduler explain NAMESPACE/POD`: the scheduler's view of one pod, node by node.

The objects come from a snapshot file (`kubectl get nodes,pods,resourcequotas -A -o yaml`) or
from a live cluster through the kubeconfig, read only: they are copied into an embedded cluster
and the scheduler's own composition (registration, ledger, quotas) runs on the copy, so nothing
is ever written to the real cluster. A running server answers the same at
`GET /explain/{namespace}/{pod}` from its live state.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.cluster.kubeconfig import KubeconfigError, make_transport
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import DeviceConfigError, default_device_config, load_device_config
from vgpu_scheduler.engine.explain import Explanation, render_text
from vgpu_scheduler.engine.policy import NODE_POLICIES, unknown_gpu_policy
from vgpu_scheduler.scheduler.options import SchedulerOptions, gate_flags, with_gates
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.standin.embedded.snapshot import SnapshotError, load_snapshot
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport

PROG = "vgpu-scheduler explain"
KINDS = (("nodes", "Node"), ("pods", "Pod"), ("resourcequotas", "ResourceQuota"))


class InputError(ValueError):
    """Bad input: shown as is, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise InputError(f"{message} (see --help)")


def _go_bool(value: str) -> bool:
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {value!r}")


def _gpu_policy(value: str) -> str:
    """Refused as the server refuses it: explaining with a policy HAMi would run as spread misleads."""
    problem = unknown_gpu_policy(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Why a pod is pending, or where it went: per node and per device, "
                "the check that failed and the numbers behind it. Changes nothing.")
    p.add_argument("pod", metavar="NAMESPACE/POD", help="the pod (a bare name means namespace default)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--snapshot", metavar="FILE", help="nodes, pods and resource quotas "
                        "(kubectl get nodes,pods,resourcequotas -A -o yaml)")
    source.add_argument("--kubeconfig", metavar="FILE", help="read the live cluster (read only); "
                        "default when no --snapshot: $KUBECONFIG, ~/.kube/config or in-cluster")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.add_argument("--device-config-file", metavar="FILE", help="device config (default: the chart's)")
    p.add_argument("--node-scheduler-policy", default="binpack", choices=NODE_POLICIES)
    p.add_argument("--gpu-scheduler-policy", default="spread", metavar="POLICY", type=_gpu_policy)
    for gate in gate_flags():  # the vendors' --enable-<vendor>
        vendor = gate.option.removeprefix("enable_")
        p.add_argument(f"--{gate.name}", dest=gate.option, nargs="?", const=True, default=False,
                       type=_go_bool, metavar="BOOL",
                       help=f"register the {vendor} section, as the scheduler's flag does")
    return p


def _pod_ref(text: str) -> tuple[str, str]:
    namespace, _, name = text.rpartition("/")
    if not name or "/" in namespace:
        raise InputError(f"pod {text!r}: expected NAMESPACE/POD or POD")
    return namespace or "default", name


async def _live_objects(kubeconfig: str | None) -> list[dict[str, Any]]:
    try:
        transport = await make_transport(kubeconfig)
    except KubeconfigError as exc:
        raise InputError(str(exc)) from None
    client = KubeClient(transport)
    try:
        out: list[dict[str, Any]] = []
        for resource, kind in KINDS:
            items, _ = await client.list_all(resource)
            out.extend({"apiVersion": "v1", "kind": kind, **item} for item in items)
        return out
    except ApiError as exc:
        raise InputError(f"reading the cluster: {exc.message}") from None
    finally:
        await client.close()


def _snapshot_objects(path: str) -> list[dict[str, Any]]:
    try:
        snapshot = load_snapshot(path)
    except SnapshotError as exc:
        raise InputError(str(exc)) from None
    return [*snapshot.nodes, *snapshot.pods, *snapshot.resourcequotas]


async def explain_objects(
    objects: Sequence[dict[str, Any]],
    namespace: str,
    name: str,
    *,
    opts: SchedulerOptions,
    device_config: DeviceConfig,
) -> Explanation | None:
    """Run the scheduler's composition on an in-memory copy of `objects` and explain the pod."""
    cluster = MemoryCluster()
    cluster.seed_from_list(objects)
    client = KubeClient(MemoryTransport(cluster))
    process = SchedulerProcess(opts, device_config, client, "explain", events=_NoEvents())
    try:
        await process.start()
        return process.explain(namespace, name)
    finally:
        await process.stop()
        await client.close()


class _NoEvents:
    def record(self, pod: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Nothing to tell: explain changes nothing."""


async def _run(args: argparse.Namespace) -> Explanation | None:
    namespace, name = _pod_ref(args.pod)
    try:
        path = args.device_config_file
        config = load_device_config(path) if path else default_device_config()
    except DeviceConfigError as exc:
        raise InputError(str(exc)) from None
    objects = _snapshot_objects(args.snapshot) if args.snapshot else await _live_objects(args.kubeconfig)
    opts = with_gates(
        SchedulerOptions(
            node_scheduler_policy=args.node_scheduler_policy, gpu_scheduler_policy=args.gpu_scheduler_policy
        ),
        {gate.option: getattr(args, gate.option) for gate in gate_flags()},
    )
    return await explain_objects(objects, namespace, name, opts=opts, device_config=config)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        explanation = asyncio.run(_run(args))
    except InputError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if explanation is None:
        print(f"{PROG}: pod {args.pod} not found", file=sys.stderr)
        return 1
    sys.stdout.write(explanation.dumps() if args.output == "json" else render_text(explanation))
    return 0
