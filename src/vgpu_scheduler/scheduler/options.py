"""The scheduler's options: every flag of HAMi's scheduler command as one frozen value.

`vgpu_scheduler.flags` (the command line) fills it; the process composition, the server and the
simulator read it. It sits below them so none of them needs the CLI parser.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from vgpu_scheduler.devices.protocol import VendorFlags
from vgpu_scheduler.devices.registry import REGISTRY
from vgpu_scheduler.devices.spec import VendorFlag, VendorSpec
from vgpu_scheduler.engine.policy import unknown_gpu_policy, unknown_node_policy
from vgpu_scheduler.gocompat.parsing import go_quote

# Deliberate difference from HAMi (client-go defaults 5/10): one scheduler serving a whole cluster
# does a lot of pod patches and Bindings at filter/bind time; 5 QPS throttles it visibly.
DEFAULT_KUBE_QPS = 200.0
DEFAULT_KUBE_BURST = 400


_Options = TypeVar("_Options")


def vendor_options(registry: Sequence[VendorSpec] = REGISTRY) -> dict[str, VendorFlag]:
    """Every vendor option (gates and legacy flags) by option name, in registry order: the first
    flag setting an option gives its default (an alias sets its target's option)."""
    out: dict[str, VendorFlag] = {}
    for spec in registry:
        for flag in spec.all_flags:
            out.setdefault(flag.option, flag)
    return out


def gate_flags(registry: Sequence[VendorSpec] = REGISTRY) -> tuple[VendorFlag, ...]:
    """The vendors' enable gates (`--enable-ascend`, …) as flags, in registry order."""
    return tuple(gate for spec in registry if (gate := spec.gate_flag) is not None)


def with_gates(opts: SchedulerOptions, gates: Mapping[str, bool]) -> SchedulerOptions:
    """`opts` with the gate options `gates` (`{"enable_ascend": True}`) set."""
    changes: dict[str, Any] = dict(gates)
    return dataclasses.replace(opts, **changes)


def _with_vendor_options(cls: type[_Options]) -> type[_Options]:
    """Adds a field per vendor option of the registry (§1.2 global flags), with its default, before
    the dataclass is made: the vendors declare them (`VendorSpec.flags`), not this module."""
    for name, flag in vendor_options().items():
        cls.__annotations__[name] = type(flag.default).__name__
        setattr(cls, name, flag.default)
    return cls


@dataclass(frozen=True, slots=True)
@_with_vendor_options
class SchedulerOptions:
    """Every flag of the scheduler command, with HAMi's names (as snake_case) and defaults; the
    vendors' global flags (`enable_ascend`, `dcu_name`, …) are fields too, added from the registry."""

    # Root flags (§1.1).
    http_bind: str = "127.0.0.1:8080"
    cert_file: str = ""
    key_file: str = ""
    scheduler_name: str = ""
    node_scheduler_policy: str = "binpack"
    gpu_scheduler_policy: str = "spread"
    metrics_bind_address: str = ":9395"
    node_label_selector: dict[str, str] = field(default_factory=dict)
    kube_qps: float = DEFAULT_KUBE_QPS
    kube_burst: int = DEFAULT_KUBE_BURST
    kube_timeout: int = 0  # seconds; 0 = no timeout
    profiling: bool = False
    node_lock_timeout: float = 300.0  # seconds (Go duration on the command line)
    node_lock_retry_timeout: float = 28.0  # seconds
    force_overwrite_default_scheduler: bool = True
    leader_elect: bool = False
    leader_elect_resource_name: str = ""
    leader_elect_resource_namespace: str = ""
    legacy_metrics: bool = False
    # Ours.
    kubeconfig: str = ""
    cluster_snapshot: str = ""
    embedded_api_bind: str = ""
    bind_timeout: float = 20.0  # seconds; keep well under the extender's httpTimeout
    lock_aware_placement: bool = True
    requeue_nudges: bool = True
    explain_on_main_port: bool = False
    help: bool = False
    # Global flags (§1.2).
    device_config_file: str = ""
    debug: bool = False
    # klog flags (§1.2).
    add_dir_header: bool = False
    alsologtostderr: bool = False
    log_backtrace_at: str = ""  # "file.go:N" or "" (printed as ":0")
    log_dir: str = ""
    log_file: str = ""
    log_file_max_size: int = 1800  # MB
    logtostderr: bool = True
    one_output: bool = False
    skip_headers: bool = False
    skip_log_headers: bool = False
    stderrthreshold: int = 2  # klog severity number: 0 INFO, 1 WARNING, 2 ERROR, 3 FATAL
    v: int = 0
    vmodule: str = ""




def options_type(registry: Sequence[VendorSpec]) -> type[SchedulerOptions]:
    """`SchedulerOptions`, with a field more for each option `registry` declares that it lacks (a
    vendor registered outside the package, such as a test's): what `flags.parse_args` fills."""
    known = {f.name for f in dataclasses.fields(SchedulerOptions)}
    extra = [
        (name, type(flag.default), dataclasses.field(default=flag.default))
        for name, flag in vendor_options(registry).items()
        if name not in known
    ]
    if not extra:
        return SchedulerOptions
    made: type[SchedulerOptions] = dataclasses.make_dataclass(
        "SchedulerOptions", extra, bases=(SchedulerOptions,), frozen=True, slots=True
    )
    return made


def vendor_flags(opts: SchedulerOptions, registry: Sequence[VendorSpec] = REGISTRY) -> VendorFlags:
    """What the vendors read of the command line: the gates and the legacy per-vendor flags."""
    gates = {spec.gate: bool(getattr(opts, spec.gate, False)) for spec in registry if spec.gate}
    legacy = {
        name: getattr(opts, name, flag.default)
        for spec in registry
        for flag in spec.flags
        if (name := flag.option) not in gates
    }
    return VendorFlags(legacy=legacy, **gates)


def invalid_policy(opts: SchedulerOptions) -> str:
    """The first default policy no scheduler code knows, as one line for the operator ("" when both
    are known). A deliberate difference: HAMi starts with any string and schedules an unknown node
    policy as binpack and an unknown GPU policy as spread, silently (#1931)."""
    checks = (
        ("--node-scheduler-policy", opts.node_scheduler_policy, unknown_node_policy),
        ("--gpu-scheduler-policy", opts.gpu_scheduler_policy, unknown_gpu_policy),
    )
    for flag, value, check in checks:
        problem = check(value)
        if problem:
            return f"invalid {flag} {go_quote(value)}: {problem}"
    return ""
