"""Prometheus metrics (`GET /metrics` on --metrics-bind-address, §8.4).

A fresh `CollectorRegistry` (no process/platform collectors) with two collectors:

* `hami_build_info` = 1, labelled with `version.build_info_labels()`;
* `SchedulerCollector`, which computes every other series per scrape from the scheduler state:
  registered devices and their usage (ledger), realized MIG instances, namespace quotas and the
  collapsed per-pod allocations. Each of those series carries the constant label `zone="vGPU"`.
  With `legacy=True` (--legacy-metrics) the pre-2.8 names are emitted as well.

Output matches client_golang's: families sorted by name, series sorted by label values, labels
sorted by name inside a series (prometheus_client's text writer sorts them the same way), and a
duplicated series (same labels twice, e.g. a device id listed twice on a node) emitted once
instead of failing the whole scrape.

The state belongs to the event loop. The HTTP handler renders in a worker thread (building and
formatting the series is the expensive part: seconds for thousands of nodes) and the collector
asks the loop for a snapshot (`take_snapshot`: references to the immutable pod allocations and
copies of the usage counters, milliseconds), so the state is only ever read on the loop thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gzip
import logging
import math
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from vgpu_scheduler.server.gohttp import servemux_fallback
from vgpu_scheduler.version import build_info_labels

if TYPE_CHECKING:
    from vgpu_scheduler.engine.podinfo import PodAllocation
    from vgpu_scheduler.engine.quota import QuotaEntry
    from vgpu_scheduler.engine.state import SchedulerState
    from vgpu_scheduler.model import DeviceInfo
    from vgpu_scheduler.scheduler.extender import ExtenderStats

log = logging.getLogger(__name__)

ZONE = "vGPU"
MIB = 1024 * 1024
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"
"""What client_golang's promhttp answers for the classic text format."""

AMD = "AMD"


# ---------------------------------------------------------------------------------------------
# Snapshot: plain data read from the state on the event loop


@dataclass(frozen=True, slots=True)
class DeviceRow:
    node: str
    uuid: str
    index: int
    type: str
    devmem: int
    devcore: int
    used: int
    usedmem: int
    usedcores: int
    amd: bool


@dataclass(frozen=True, slots=True)
class MigRow:
    node: str
    uuid: str
    index: int
    mig_uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int
    placement_start: int
    placement_size: int


@dataclass(frozen=True, slots=True)
class ContainerRow:
    namespace: str
    node: str
    pod: str
    container_index: int
    uuid: str
    usedmem: int
    usedcores: int
    devcore: int
    """Core capacity of the device on its node (0 when unknown); AMD cores are normalized by it."""
    amd: bool


@dataclass(frozen=True, slots=True)
class QuotaRow:
    namespace: str
    resource: str
    used: int
    limit: int | None


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    devices: tuple[DeviceRow, ...] = ()
    migs: tuple[MigRow, ...] = ()
    containers: tuple[ContainerRow, ...] = ()
    quotas: tuple[QuotaRow, ...] = ()


def _is_amd_device(dev_type: str) -> bool:
    # HAMi's normalizeAMDCoreMetrics goes by the registered type alone, whatever the vendor.
    return dev_type.upper().startswith(AMD)


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    """What the metrics read from the state, copied on the loop thread (cheap: references to
    immutable pod allocations and device infos, copies of the mutable usage counters)."""

    nodes: tuple[tuple[str, tuple[tuple[DeviceInfo, int, int, int], ...]], ...] = ()
    """(node, ((device, used, usedmem, usedcores), ...))."""
    pods: tuple[PodAllocation, ...] = ()
    quotas: tuple[QuotaEntry, ...] = ()


def take_snapshot(state: SchedulerState) -> StateSnapshot:
    """Must run on the thread that owns `state` (the event loop)."""
    ledger = state.ledger
    nodes = []
    for node in ledger.node_names():
        view = ledger.view(node)
        if view is not None:
            usage = tuple(
                (dev, use.used, use.usedmem, use.usedcores)
                for dev, use in zip(view.devices, view.usage, strict=True)
            )
            nodes.append((node, usage))
    return StateSnapshot(tuple(nodes), tuple(state.pods()), tuple(state.quota.entries()))


def snapshot_rows(raw: StateSnapshot) -> MetricsSnapshot:
    """The metric rows of a state snapshot (any thread)."""
    devices: list[DeviceRow] = []
    # node -> device id -> (index, devcore), for MIG rows and AMD core normalization.
    by_id: dict[str, dict[str, tuple[int, int]]] = {}
    for node, usage in raw.nodes:
        ids = by_id[node] = {}
        for dev, used, usedmem, usedcores in usage:
            ids.setdefault(dev.id, (dev.index, dev.devcore))
            devices.append(
                DeviceRow(
                    node,
                    dev.id,
                    dev.index,
                    dev.type,
                    dev.devmem,
                    dev.devcore,
                    used,
                    usedmem,
                    usedcores,
                    _is_amd_device(dev.type),
                )
            )
    device_of: dict[str, tuple[int, int, bool]] = {}  # uuid -> (index, devcore, AMD), first node wins
    for d in devices:
        device_of.setdefault(d.uuid, (d.index, d.devcore, d.amd))
    migs: list[MigRow] = []
    containers: list[ContainerRow] = []
    for alloc in raw.pods:
        node_ids = by_id.get(alloc.node, {})
        for m in alloc.mig:
            found = node_ids.get(m.gpu_uuid)
            if found is None or not m.mig_uuid or m.gpu_instance_id is None or m.compute_instance_id is None:
                continue  # not on a registered device, or not realized by the device plugin yet
            migs.append(
                MigRow(
                    alloc.node,
                    m.gpu_uuid,
                    found[0],
                    m.mig_uuid,
                    m.profile,
                    m.gpu_instance_id,
                    m.compute_instance_id,
                    m.placement.start,
                    m.placement.size,
                )
            )
        for per_container in alloc.devices.values():
            for ci, entries in enumerate(per_container):
                for entry in entries:
                    if not entry.uuid:
                        continue  # HAMi skips (and warns about) entries without a UUID
                    # HAMi finds the device by UUID among the registered ones and normalizes by
                    # its type and core capacity (an unknown device keeps the raw value).
                    _, devcore, amd = device_of.get(entry.uuid, (0, 0, False))
                    containers.append(
                        ContainerRow(
                            alloc.namespace,
                            alloc.node,
                            alloc.name,
                            ci,
                            entry.uuid,
                            entry.usedmem,
                            entry.usedcores,
                            devcore,
                            amd,
                        )
                    )
    quotas = tuple(QuotaRow(e.namespace, e.resource, e.used, e.limit) for e in raw.quotas)
    return MetricsSnapshot(tuple(devices), tuple(migs), tuple(containers), quotas)


# ---------------------------------------------------------------------------------------------
# Families


@dataclass(frozen=True, slots=True)
class _Spec:
    name: str
    help: str
    labels: tuple[str, ...]
    """Declared order (§8.4); the text output sorts them by name, as client_golang does."""


_DEV = ("node", "device_uuid", "device_index", "device_type")
_LEGACY_DEV = ("nodeid", "deviceuuid", "deviceidx", "devicetype")
_CTR = ("namespace", "node", "pod", "container_index", "device_uuid")
_LEGACY_CTR = ("podnamespace", "nodename", "podname", "containeridx", "deviceuuid")

MEMORY_LIMIT = _Spec("hami_gpu_memory_limit_bytes", "Device memory limit for a certain GPU", _DEV)
CORE_LIMIT = _Spec("hami_gpu_core_limit_ratio", "Device core limit for a certain GPU", _DEV)
MEMORY_ALLOCATED = _Spec(
    "hami_gpu_memory_allocated_bytes",
    "Device memory allocated for a certain GPU",
    ("node", "device_uuid", "device_index", "device_cores", "device_type"),
)
SHARED_COUNT = _Spec("hami_gpu_shared_count", "Number of containers sharing this GPU", _DEV)
CORE_ALLOCATED = _Spec("hami_gpu_core_allocated_ratio", "Device core allocated for a certain GPU", _DEV)
OVERVIEW = _Spec(
    "hami_node_gpu_overview",
    "GPU overview on a certain node",
    ("node", "device_uuid", "device_index", "device_cores", "device_memory_limit", "device_type"),
)
MEMORY_RATIO = _Spec(
    "hami_node_gpu_memory_allocated_ratio", "GPU memory allocated ratio on a certain GPU (0-1)", _DEV
)
MIG_INSTANCE = _Spec(
    "hami_node_gpu_mig_instance_info",
    "Realized MIG instance identity and scheduler placement",
    (
        "node",
        "device_uuid",
        "device_index",
        "mig_uuid",
        "profile",
        "gpu_instance_id",
        "compute_instance_id",
        "placement_start",
        "placement_size",
    ),
)
QUOTA_USED = _Spec(
    "hami_resource_quota_used",
    "resourcequota usage for a certain device",
    ("namespace", "quota_name", "limit"),
)
QUOTA_LIMIT = _Spec(
    "hami_resource_quota_limit", "resourcequota limit for a certain device", ("namespace", "quota_name")
)
VGPU_MEMORY = _Spec("hami_vgpu_memory_allocated_bytes", "vGPU memory allocated from a container", _CTR)
VGPU_CORE = _Spec("hami_vgpu_core_allocated_ratio", "vGPU core allocated from a container", _CTR)

LEGACY_MEMORY_LIMIT = _Spec("GPUDeviceMemoryLimit", "Device memory limit for a certain GPU", _LEGACY_DEV)
LEGACY_CORE_LIMIT = _Spec("GPUDeviceCoreLimit", "Device memory core limit for a certain GPU", _LEGACY_DEV)
LEGACY_MEMORY_ALLOCATED = _Spec(
    "GPUDeviceMemoryAllocated",
    "Device memory allocated for a certain GPU",
    ("nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype"),
)
LEGACY_SHARED = _Spec("GPUDeviceSharedNum", "Number of containers sharing this GPU", _LEGACY_DEV)
LEGACY_CORE_ALLOCATED = _Spec(
    "GPUDeviceCoreAllocated", "Device core allocated for a certain GPU", _LEGACY_DEV
)
LEGACY_OVERVIEW = _Spec(
    "nodeGPUOverview",
    "GPU overview on a certain node",
    ("nodeid", "deviceuuid", "deviceidx", "devicecores", "devicememorylimit", "devicetype"),
)
LEGACY_MEMORY_PERCENTAGE = _Spec(
    "nodeGPUMemoryPercentage",
    "GPU Memory Allocated Percentage on a certain GPU",
    ("nodeid", "deviceuuid", "deviceidx"),
)
LEGACY_MIG = _Spec(
    "nodeGPUMigInstance",
    "GPU Sharing mode. 0 for hami-core, 1 for mig, 2 for mps",
    ("nodeid", "deviceuuid", "deviceidx", "migname"),
)
LEGACY_QUOTA_USED = _Spec(
    "QuotaUsed", "resourcequota usage for a certain device", ("quotanamespace", "quotaName", "limit")
)
LEGACY_VGPU_MEMORY = _Spec("vGPUMemoryAllocated", "vGPU memory allocated from a container", _LEGACY_CTR)
LEGACY_VGPU_CORE = _Spec("vGPUCoreAllocated", "vGPU core allocated from a container", _LEGACY_CTR)

BUILD_INFO = "hami_build_info"
BUILD_INFO_HELP = "hami build metadata exposed as labels with a constant value of 1."


def normalized_cores(allocated: int, total: int) -> float:
    """AMD core ratio: allocated cores as a ceil'ed percentage of the device's core capacity."""
    if total <= 0:
        return 0.0
    return float(math.ceil(allocated / total * 100))


class _Family:
    """Samples of one family, deduplicated and sorted on output."""

    def __init__(self, spec: _Spec, zone: bool) -> None:
        self.spec = spec
        self.zone = zone
        self.rows: dict[tuple[str, ...], float] = {}

    def add(self, values: Sequence[str], value: float) -> None:
        self.rows.setdefault(tuple(values), value)  # first wins, like a linear search would

    def metric(self) -> Metric:
        labels = [*self.spec.labels, "zone"] if self.zone else list(self.spec.labels)
        family = GaugeMetricFamily(self.spec.name, self.spec.help, labels=labels)
        # client_golang orders a family's series by their label values, labels taken by name.
        by_name = operator.itemgetter(*sorted(range(len(self.spec.labels)), key=self.spec.labels.__getitem__))
        name, samples = self.spec.name, family.samples
        for values in sorted(self.rows, key=by_name):  # "zone" is constant: it cannot reorder
            label_map = dict(zip(labels, (*values, ZONE) if self.zone else values, strict=True))
            samples.append(Sample(name, label_map, self.rows[values]))
        return family


def families(snapshot: MetricsSnapshot, legacy: bool = False) -> list[Metric]:
    """Every §8.4 family for `snapshot` (legacy names too when asked), sorted by name."""
    fams: dict[str, _Family] = {}

    def fam(spec: _Spec) -> _Family:
        f = fams.get(spec.name)
        if f is None:
            f = fams[spec.name] = _Family(spec, zone=True)
        return f

    for d in snapshot.devices:
        idx, cores, memlimit = str(d.index), str(d.devcore), str(d.devmem)
        dev = (d.node, d.uuid, idx, d.type)
        fam(MEMORY_LIMIT).add(dev, float(d.devmem * MIB))
        amd_cores = d.amd and d.devcore > 0  # HAMi normalizes AMD only with a known capacity
        fam(CORE_LIMIT).add(dev, 100.0 if amd_cores else float(d.devcore))
        fam(MEMORY_ALLOCATED).add((d.node, d.uuid, idx, cores, d.type), float(d.usedmem * MIB))
        fam(SHARED_COUNT).add(dev, float(d.used))
        fam(CORE_ALLOCATED).add(
            dev, normalized_cores(d.usedcores, d.devcore) if amd_cores else float(d.usedcores)
        )
        fam(OVERVIEW).add((d.node, d.uuid, idx, cores, memlimit, d.type), float(d.usedmem * MIB))
        if d.devmem > 0:
            fam(MEMORY_RATIO).add(dev, d.usedmem / d.devmem)
        if legacy:
            fam(LEGACY_MEMORY_LIMIT).add(dev, float(d.devmem * MIB))
            fam(LEGACY_CORE_LIMIT).add(dev, float(d.devcore))
            fam(LEGACY_MEMORY_ALLOCATED).add((d.node, d.uuid, idx, cores, d.type), float(d.usedmem * MIB))
            fam(LEGACY_SHARED).add(dev, float(d.used))
            fam(LEGACY_CORE_ALLOCATED).add(dev, float(d.usedcores))
            fam(LEGACY_OVERVIEW).add((d.node, d.uuid, idx, cores, memlimit, d.type), float(d.usedmem * MIB))
            if d.devmem > 0:
                fam(LEGACY_MEMORY_PERCENTAGE).add((d.node, d.uuid, idx), d.usedmem / d.devmem)

    for m in snapshot.migs:
        fam(MIG_INSTANCE).add(
            (
                m.node,
                m.uuid,
                str(m.index),
                m.mig_uuid,
                m.profile,
                str(m.gpu_instance_id),
                str(m.compute_instance_id),
                str(m.placement_start),
                str(m.placement_size),
            ),
            1.0,
        )
        if legacy:
            fam(LEGACY_MIG).add((m.node, m.uuid, str(m.index), f"{m.profile}-{m.gpu_instance_id}"), 1.0)

    for q in snapshot.quotas:
        limit = q.limit if q.limit is not None else 0
        fam(QUOTA_USED).add((q.namespace, q.resource, str(limit)), float(q.used))
        if q.limit is not None:
            fam(QUOTA_LIMIT).add((q.namespace, q.resource), float(q.limit))
        if legacy:
            fam(LEGACY_QUOTA_USED).add((q.namespace, q.resource, str(limit)), float(q.used))

    for c in snapshot.containers:
        ctr = (c.namespace, c.node, c.pod, str(c.container_index), c.uuid)
        fam(VGPU_MEMORY).add(ctr, float(c.usedmem * MIB))
        amd_cores = c.amd and c.devcore > 0
        fam(VGPU_CORE).add(ctr, normalized_cores(c.usedcores, c.devcore) if amd_cores else float(c.usedcores))
        if legacy:
            fam(LEGACY_VGPU_MEMORY).add(ctr, float(c.usedmem * MIB))
            fam(LEGACY_VGPU_CORE).add(ctr, float(c.usedcores))

    return [fams[name].metric() for name in sorted(fams)]


# ---------------------------------------------------------------------------------------------
# Collectors


class SchedulerCollector(Collector):
    """Every series but hami_build_info, computed per scrape from `state`.

    `collect()` may run on any thread: off the loop it asks `loop` (the running loop at
    construction time unless given) for the snapshot and waits at most `snapshot_timeout`."""

    def __init__(
        self,
        state: SchedulerState,
        *,
        legacy: bool = False,
        loop: asyncio.AbstractEventLoop | None = None,
        snapshot_timeout: float = 10.0,
    ) -> None:
        self.state = state
        self.legacy = legacy
        self.snapshot_timeout = snapshot_timeout
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
        self.loop = loop

    def snapshot(self) -> StateSnapshot:
        loop = self.loop
        if loop is None or not loop.is_running() or _running_loop() is loop:
            return take_snapshot(self.state)
        result: concurrent.futures.Future[StateSnapshot] = concurrent.futures.Future()

        def grab() -> None:
            try:
                result.set_result(take_snapshot(self.state))
            except BaseException as exc:  # handed to the waiting thread
                result.set_exception(exc)

        loop.call_soon_threadsafe(grab)
        return result.result(timeout=self.snapshot_timeout)

    def collect(self) -> Iterable[Metric]:
        return families(snapshot_rows(self.snapshot()), self.legacy)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class BuildInfoCollector(Collector):
    """`hami_build_info` = 1 (no zone label)."""

    def __init__(self, labels: Mapping[str, str] | None = None) -> None:
        self.labels = dict(labels if labels is not None else build_info_labels())

    def collect(self) -> Iterator[Metric]:
        names = list(self.labels)
        family = GaugeMetricFamily(BUILD_INFO, BUILD_INFO_HELP, labels=names)
        family.add_metric([self.labels[n] for n in names], 1.0)
        yield family


class ExtenderCollector(Collector):
    """Our own counters beside HAMi's names: what the extender verbs did, and why binds stopped."""

    def __init__(self, stats: ExtenderStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        st = self.stats
        yield _counter("vgpu_scheduler_filter_requests", "Filter requests received.", st.filters)
        yield _counter(
            "vgpu_scheduler_filter_unknown_pod",
            "Filters refused because the pod is not in the informer cache (nothing reserved).",
            st.filters_unknown_pod,
        )
        yield _counter(
            "vgpu_scheduler_filter_lock_contention",
            "Filters refused with lock contention: every fitting node was locked or about to be "
            "locked by another pod's bind (nothing reserved; kube-scheduler retries).",
            st.filters_all_busy,
        )
        yield _counter("vgpu_scheduler_bind_requests", "Bind requests received.", st.binds)
        yield _counter(
            "vgpu_scheduler_bind_failures", "Bind requests answered with an error.", st.bind_failures
        )
        yield _counter(
            "vgpu_scheduler_bind_lock_contention",
            "Binds that found the node lock held by another live pod.",
            st.lock_contention,
        )
        stopped = CounterMetricFamily(
            "vgpu_scheduler_bind_stopped",
            "Binds stopped before their next write, by reason: superseded (a newer filter for the "
            "pod), cancelled (the caller went away), deadline (--bind-timeout), wrong_node (not the "
            "node of the latest filter). Each released the node lock it held.",
            labels=["reason"],
        )
        for reason, value in (
            ("superseded", st.binds_superseded),
            ("cancelled", st.binds_cancelled),
            ("deadline", st.binds_deadline),
            ("wrong_node", st.binds_wrong_node),
        ):
            stopped.add_metric([reason], float(value))
        yield stopped


def _counter(name: str, help_text: str, value: int) -> Metric:
    family = CounterMetricFamily(name, help_text)
    family.add_metric([], float(value))
    return family


def metrics_registry(
    state: SchedulerState,
    *,
    legacy: bool = False,
    build_info: Mapping[str, str] | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
    extender_stats: ExtenderStats | None = None,
) -> CollectorRegistry:
    """A fresh registry with hami_build_info and the scheduler collector (call it on the loop), plus
    our extender counters when `extender_stats` is given."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BuildInfoCollector(build_info))
    registry.register(SchedulerCollector(state, legacy=legacy, loop=loop))
    if extender_stats is not None:
        registry.register(ExtenderCollector(extender_stats))
    return registry


# ---------------------------------------------------------------------------------------------
# HTTP


def go_float(value: float) -> str:
    """A sample value as client_golang's text format writes it: Go's `%g`-shortest float64
    (`2`, `0.25`, `8.589934592e+09`, `1e+06`), `+Inf`/`-Inf`/`NaN`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    digits, exp = _shortest_digits(abs(value))
    sign = "-" if value < 0 else ""
    if exp < -4 or exp >= 6:  # shortest %g switches to the exponent form at 1e+06 (eprec 6)
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    whole = digits[: exp + 1].ljust(exp + 1, "0")
    frac = digits[exp + 1 :]
    return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"


def _shortest_digits(value: float) -> tuple[str, int]:
    """(significant digits, decimal exponent) of the shortest repr that round-trips (Python's
    repr is shortest-round-trip, as Go's strconv with precision -1)."""
    mantissa, _, exp = f"{value!r}".partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    lead_zeros = len(whole + frac) - len((whole + frac).lstrip("0"))
    exponent = len(whole) - 1 - lead_zeros + (int(exp) if exp else 0)
    return digits.rstrip("0") or "0", exponent


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_order(item: tuple[str, str]) -> tuple[bool, str]:
    return item[0] == "le", item[0]  # a bucket's `le` comes after the series' own labels, as in Go


def exposition(registry: CollectorRegistry) -> bytes:
    """The text format (0.0.4) as client_golang's expfmt writes it: families sorted by name, labels
    sorted by name (a histogram bucket's `le` last), values in Go's float formatting (`2`, not
    `2.0`)."""
    lines: list[str] = []
    for family in sorted(registry.collect(), key=operator.attrgetter("name")):
        # prometheus_client keeps a counter's name without `_total`; Go writes the full name.
        name = f"{family.name}_total" if family.type == "counter" else family.name
        lines.append(f"# HELP {name} {_escape_help(family.documentation)}")
        lines.append(f"# TYPE {name} {family.type}")
        for sample in family.samples:
            labels = ",".join(
                f'{k}="{_escape_label(v)}"' for k, v in sorted(sample.labels.items(), key=_label_order)
            )
            lines.append(
                f"{sample.name}{{{labels}}} {go_float(sample.value)}"
                if labels
                else f"{sample.name} {go_float(sample.value)}"
            )
    return ("\n".join(lines) + "\n").encode() if lines else b""


def render(registry: CollectorRegistry, compress: bool = False) -> bytes:
    """The text exposition of `registry`, gzip-compressed when asked."""
    body = exposition(registry)
    return gzip.compress(body, compresslevel=6) if compress else body


def make_metrics_app(
    registry: CollectorRegistry,
    *,
    executor: concurrent.futures.Executor | None = None,
    renderer: Callable[[CollectorRegistry, bool], bytes] = render,
) -> web.Application:
    """An aiohttp app serving only `/metrics` (the caller binds it to --metrics-bind-address)."""

    async def metrics(request: web.Request) -> web.Response:
        compress = "gzip" in request.headers.get("Accept-Encoding", "").lower()
        try:
            body = await asyncio.get_running_loop().run_in_executor(executor, renderer, registry, compress)
        except Exception as exc:
            log.exception("collecting metrics failed")
            return web.Response(status=500, text=f"An error has occurred while serving metrics:\n\n{exc}")
        headers = {"Content-Type": CONTENT_TYPE}
        if compress:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    # HAMi: a net/http ServeMux holding promhttp at /metrics, which answers every method.
    app = web.Application(middlewares=[servemux_fallback])
    app.router.add_route("*", "/metrics", metrics)
    return app
