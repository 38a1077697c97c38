"""The scheduler's options: every flag of HAMi's scheduler command as one frozen value.

`vgpu_scheduler.flags` (the command line) fills it; the process composition, the server and the
simulator read it. It sits below them so none of them needs the CLI parser.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vgpu_scheduler.devices.protocol import VendorFlags
from vgpu_scheduler.engine.policy import unknown_gpu_policy, unknown_node_policy
from vgpu_scheduler.wire.gocompat import go_quote

# Deliberate difference from HAMi (client-go defaults 5/10): one scheduler serving a whole cluster
# does a lot of pod patches and Bindings at filter/bind time; 5 QPS throttles it visibly.
DEFAULT_KUBE_QPS = 200.0
DEFAULT_KUBE_BURST = 400


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    """Every flag of the scheduler command, with HAMi's names (as snake_case) and defaults."""

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
    enable_ascend: bool = False
    enable_iluvatar: bool = False
    cambricon_mlu_name: str = "cambricon.com/mlu"
    cambricon_mlu_memory: str = "cambricon.com/mlu.smlu.vmemory"
    cambricon_mlu_cores: str = "cambricon.com/mlu.smlu.vcore"
    dcu_name: str = "hygon.com/dcunum"
    dcu_memory: str = "hygon.com/dcumem"
    dcu_cores: str = "hygon.com/dcucores"
    mthreads_name: str = "mthreads.com/vgpu"
    mthreads_memory: str = "mthreads.com/sgpu-memory"
    mthreads_cores: str = "mthreads.com/sgpu-core"
    metax_name: str = "metax-tech.com/gpu"
    metax_vcount: str = "metax-tech.com/sgpu"
    metax_vcore: str = "metax-tech.com/vcore"
    metax_vmemory: str = "metax-tech.com/vmemory"
    sgpu_topology_aware: bool = False
    kunlun_name: str = "kunlunxin.com/xpu"
    kunlun_vcount: str = "kunlunxin.com/vxpu"
    kunlun_vmemory: str = "kunlunxin.com/vxpu-memory"
    enflame_gcu_resource_name: str = "enflame.com/gcu"
    enflame_drs_gcu_resource_name: str = "enflame.com/drs-gcu"
    enflame_gcu_memory_resource_name: str = "enflame.com/gcu-memory"
    enflame_gcu_core_resource_name: str = "enflame.com/gcu-core"
    enflame_vgcu_legacy_resource_name: str = "enflame.com/vgcu"
    enflame_vgcu_percentage_resource_name: str = "enflame.com/vgcu-percentage"
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



LEGACY_VENDOR_FLAGS: tuple[str, ...] = (
    "cambricon_mlu_name", "cambricon_mlu_memory", "cambricon_mlu_cores",
    "dcu_name", "dcu_memory", "dcu_cores",
    "mthreads_name", "mthreads_memory", "mthreads_cores",
    "metax_name", "metax_vcount", "metax_vcore", "metax_vmemory", "sgpu_topology_aware",
    "kunlun_name", "kunlun_vcount", "kunlun_vmemory",
    "enflame_gcu_resource_name", "enflame_drs_gcu_resource_name", "enflame_gcu_memory_resource_name",
    "enflame_gcu_core_resource_name", "enflame_vgcu_legacy_resource_name",
    "enflame_vgcu_percentage_resource_name",
)
"""The per-vendor global flags (§1.2), handed to the vendors by option name."""


def vendor_flags(opts: SchedulerOptions) -> VendorFlags:
    """What the vendors read of the command line: the two gates and the legacy per-vendor flags."""
    return VendorFlags(
        enable_ascend=opts.enable_ascend,
        enable_iluvatar=opts.enable_iluvatar,
        legacy={name: getattr(opts, name) for name in LEGACY_VENDOR_FLAGS},
    )


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
