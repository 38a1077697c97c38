"""Metax sGPU (HAMi metax `sdevice.go`): shared devices with QoS policies and app classes.

Inventory in `metax-tech.com/node-gpu-devices` (see `inventory`); health is "the annotation
lists devices"; no handshake; node lock `hami.io/mutex.lock`. A container asks `metax-tech.com/sgpu`
devices in `limits` only, with `vcore` (default 100) and `vmemory` (a bare number is GiB, a
quantity with a unit is bytes → MiB; memory 0 means 100 % of the device).

The fit keeps every device that passes the checks (type, health `CardUnhealthy`, app class, QoS
policy, uuid, slots, mutex, memory, then cores for non-online pods) and picks: online pods by the
app classes already on the devices, unclassed whole-device pods by MetaLink zone, the rest by the
GPU policy order. An online pod takes no cores. Allocation annotations are the common pair plus
`metax-tech.com/gpu-devices-allocated` (the device plugin's JSON) and
`metax-tech.com/predicate-time` (ns). The node score is policy-neutral (×10000, ×−10000 under
spread): app-class penalties for online pods, link-zone gain/loss for whole devices when topology
awareness is on.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any

from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.devices.base import GenericVendor
from vgpu_scheduler.devices.metax import rules
from vgpu_scheduler.devices.metax.inventory import REGISTER, SGPU, SgpuDevice, decode_sdevices
from vgpu_scheduler.devices.protocol import (
    FitResult,
    Health,
    MutationError,
    Obj,
    PodFitContext,
    ResourceNames,
)
from vgpu_scheduler.devices.resources import trunc_div
from vgpu_scheduler.devices.selection import uuid_set
from vgpu_scheduler.gocompat.parsing import GoSyntaxError, go_json, parse_bool
from vgpu_scheduler.model import (
    ContainerDevice,
    ContainerDeviceRequest,
    ContainerDevices,
    DeviceInfo,
    DeviceUsage,
    MigAllocation,
    PodSingleDevice,
)
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire import reasons as R
from vgpu_scheduler.wire.inventory import InventoryError
from vgpu_scheduler.wire.quantity import QuantityError, canonical_quantity, parse_quantity

TO_ALLOCATE = "hami.io/metax-sgpu-devices-to-allocate"
ALLOCATED = "hami.io/metax-sgpu-devices-allocated"
METAX_ALLOCATED = "metax-tech.com/gpu-devices-allocated"
PREDICATE_TIME = "metax-tech.com/predicate-time"
USE_UUID = "metax-tech.com/use-gpuuuid"
NOUSE_UUID = "metax-tech.com/nouse-gpuuuid"
QOS_POLICY = "metax-tech.com/sgpu-qos-policy"
TOPOLOGY_AWARE = "metax-tech.com/sgpu-topology-aware"
APP_CLASS = rules.APP_CLASS

BEST_EFFORT, FIXED_SHARE, BURST_SHARE = "best-effort", "fixed-share", "burst-share"
ONLINE, OFFLINE = rules.ONLINE, rules.OFFLINE
MEMORY_FACTOR = 1024
"""A bare vmemory number is GiB."""
SCORE_WEIGHT = 10000.0
"""HAMi weights a policy-neutral ScoreNode (negated under spread)."""

QOS = "QosPolicy"
"""`DeviceUsage.custom` key of the QoS policy AddResourceUsage sets for the pod's next containers."""


@dataclass(slots=True, frozen=True)
class SgpuEntry(ContainerDevice):
    """An allocation entry with what HAMi keeps in its CustomInfo: the device's QoS policy at fit
    time, its link zone and the pod's annotations (ScoreNode and PatchAnnotations read them)."""

    qos_policy: str = field(default="", compare=False)
    link_zone: int = field(default=0, compare=False)
    pod_annotations: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)


@dataclass(slots=True, frozen=True)
class SgpuFilters:
    """The pod annotations the fit reads (the verdict cache keys on them)."""

    app_class: str | None
    qos: str
    use_uuids: frozenset[str] | None
    nouse_uuids: frozenset[str] | None

    def uuid_ok(self, uuid: str) -> bool:
        if self.use_uuids is not None and uuid not in self.use_uuids:
            return False
        return self.nouse_uuids is None or uuid not in self.nouse_uuids


def _has_letter(text: str) -> bool:
    return any(("a" <= c <= "z") or ("A" <= c <= "Z") for c in text)


def _canonical(raw: object) -> str:
    text = repr(raw) if isinstance(raw, float) else str(raw)
    try:
        return canonical_quantity(text)
    except QuantityError:
        return text


def current_qos(dev: DeviceInfo, usage: DeviceUsage) -> str:
    """The device's QoS policy as this filter sees it (HAMi `DeviceUsage.CustomInfo`)."""
    if usage.custom is not None and QOS in usage.custom:
        return str(usage.custom[QOS])
    return dev.qos_policy if isinstance(dev, SgpuDevice) else ""


def link_zone(dev: DeviceInfo) -> int:
    return dev.link_zone if isinstance(dev, SgpuDevice) else 0


def entry_annotations(per_container: PodSingleDevice) -> Mapping[str, str] | None:
    for ctr in per_container:
        for dev in ctr:
            if isinstance(dev, SgpuEntry):
                return dev.pod_annotations
    return None


class MetaxSgpuVendor(GenericVendor):
    key = SGPU
    allocation_keys = (TO_ALLOCATE, ALLOCATED)
    register_key = REGISTER
    use_uuid_key = USE_UUID
    nouse_uuid_key = NOUSE_UUID
    scores_nodes = True
    prefilter = False  # an online pod needs no free cores
    counted_pod_keys = frozenset({APP_CLASS})  # the app-class rules count classes per device

    def __init__(self, names: ResourceNames, *, topology_aware: bool = False) -> None:
        super().__init__(names)
        self.topology_aware_default = topology_aware
        self.jittery = rules.JitteryQos()
        # Sync runs on every read, as HAMi's does on every registration pass: never cached.
        self.inventory_keys = ()

    # -- requests --------------------------------------------------------------------------------

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        """HAMi reads `limits` only; out-of-range values drop the request, an unreadable core or
        memory quantity keeps its default."""
        resources = res.resources_of(container)
        if resources is None:
            return None
        count = res.as_int(res.limit(resources, self.names.count))
        if count is None or count <= 0 or count > res.INT32_MAX:
            return None
        cores = 100
        raw = res.limit(resources, self.names.cores)
        value = res.as_int(raw)
        if value is not None:
            if value < 0 or value > res.INT32_MAX:
                return None
            cores = value
        memory = 0
        raw = res.limit(resources, self.names.memory)
        value = res.as_int(raw)
        if value is not None:
            if _has_letter(_canonical(raw)):  # a unit: bytes (the canonical text decides, "1000" is "1k")
                memory = trunc_div(trunc_div(value, 1024), 1024)
            else:
                if value < 0 or value > res.INT32_MAX // MEMORY_FACTOR:
                    return None
                memory = value * MEMORY_FACTOR
            if memory < 0 or memory > res.INT32_MAX:
                return None
        return ContainerDeviceRequest(
            nums=count, type=SGPU, memreq=memory, mem_percentage_req=100 if memory == 0 else 0, coresreq=cores
        )

    # -- registration ----------------------------------------------------------------------------

    def node_devices(self, node: Obj) -> list[DeviceInfo]:
        value = objects.annotation(node, REGISTER)
        if value is None:
            raise InventoryError(f"annos not found {REGISTER}")
        devices = decode_sdevices(value)
        self.jittery.sync((d.id, d.qos_policy) for d in devices)
        return list(devices)

    def check_health(self, node: Obj, now: datetime, tz: tzinfo | None) -> Health:
        value = objects.annotation(node, REGISTER)
        try:
            healthy = value is not None and bool(decode_sdevices(value))
        except InventoryError:
            healthy = False
        return Health(healthy=healthy, need_update=True)

    # -- fit -------------------------------------------------------------------------------------

    def pod_filters(self, annotations: Mapping[str, str]) -> Hashable:
        return SgpuFilters(
            annotations.get(APP_CLASS), annotations.get(QOS_POLICY, ""),
            uuid_set(annotations.get(USE_UUID)), uuid_set(annotations.get(NOUSE_UUID)),
        )

    def _candidates(
        self,
        request: ContainerDeviceRequest,
        devices: Sequence[DeviceInfo],
        usage: Sequence[DeviceUsage],
        order: Sequence[int],
        *,
        ctx: PodFitContext,
    ) -> tuple[list[tuple[int, int]], dict[str, int]]:
        """Every device (walked from the end of `order`) that passes the checks, with its memory,
        and the reasons of the others."""
        filters = ctx.filters(self)
        assert isinstance(filters, SgpuFilters)
        app_class = filters.app_class or ""
        online = app_class == ONLINE
        coresreq = request.coresreq
        out: list[tuple[int, int]] = []
        reasons: dict[str, int] = {}
        for pos in reversed(order):
            dev, u = devices[pos], usage[pos]
            if request.type != SGPU:
                reason = R.CARD_TYPE_MISMATCH
            elif not dev.health:
                reason = R.CARD_UNHEALTHY
            elif not rules.app_class_fits(app_class, u):
                reason = R.CARD_APP_CLASS_MISMATCH
            elif not online and not self.qos_fits(filters.qos, dev, u, coresreq):
                reason = R.CARD_QOS_POLICY_MISMATCH
            elif not filters.uuid_ok(dev.id):
                reason = R.CARD_UUID_MISMATCH
            elif dev.count <= u.used:
                reason = R.CARD_TIME_SLICING_EXHAUSTED
            elif ctx.mutex and u.used > 0:
                reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            else:
                memreq = self.memory_of(request, dev)
                if dev.devmem - u.usedmem < memreq:
                    reason = R.CARD_INSUFFICIENT_MEMORY
                elif online:
                    reason = ""
                elif dev.devcore - u.usedcores < coresreq:
                    reason = R.CARD_INSUFFICIENT_CORE
                elif dev.devcore == 100 and coresreq == 100 and u.used > 0:
                    reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
                elif dev.devcore != 0 and u.usedcores == dev.devcore and coresreq == 0:
                    reason = R.CARD_COMPUTE_UNITS_EXHAUSTED
                else:
                    reason = ""
                if not reason:
                    out.append((pos, memreq))
                    continue
            reasons[reason] = reasons.get(reason, 0) + 1
        return out, reasons

    @staticmethod
    def memory_of(request: ContainerDeviceRequest, dev: DeviceInfo) -> int:
        if request.memreq > 0:
            return request.memreq
        return trunc_div(res.int32(dev.devmem * request.mem_percentage_req), 100)

    def qos_fits(self, wanted: str, dev: DeviceInfo, usage: DeviceUsage, coresreq: int) -> bool:
        """HAMi `checkDeviceQos`: an unused device switches to any policy, a whole device needs
        none; otherwise the device's policy (the one being switched to, if any) must be unset or
        the pod's."""
        if usage.used == 0 or coresreq == 100:
            return True
        device_qos = self.jittery.get(dev.id)
        if device_qos is None:
            device_qos = current_qos(dev, usage)
        return device_qos in ("", wanted)

    @staticmethod
    def _failure(candidates: int, reasons: dict[str, int], total: int) -> str:
        if candidates > 0:
            reasons[R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = candidates
        return R.gen_reason(reasons, total)

    def ladder(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage],
        order: Sequence[int], *, ctx: PodFitContext, cordoned: frozenset[str],
        allocated: Sequence[ContainerDevices] = (), quick: bool = False,
    ) -> FitResult | str | None:
        candidates, reasons = self._candidates(request, devices, usage, order, ctx=ctx)
        nums = request.nums
        if len(candidates) < nums:
            reason = self._failure(len(candidates), reasons, len(order))
            return reason if quick else FitResult(False, reason=reason)
        if quick:
            return ""  # each device is judged on its own: whether enough pass does not depend on the order
        memory = dict(candidates)
        positions = [p for p, _ in candidates]
        best = positions[:nums]
        app_class = ctx.annotations.get(APP_CLASS)
        if len(positions) > nums:
            if app_class is not None:
                if app_class == ONLINE:  # offline pods follow the GPU policy order
                    best = rules.prioritize_online(positions, usage, nums)
            elif request.coresreq == 100:
                zones = {p: link_zone(devices[p]) for p in positions}
                best = rules.prioritize_exclusive(positions, zones, nums)
        cores = 0 if app_class == ONLINE else request.coresreq
        chosen: ContainerDevices = [
            SgpuEntry(
                devices[p].id, devices[p].type, memory[p], cores, devices[p].index,
                qos_policy=current_qos(devices[p], usage[p]), link_zone=link_zone(devices[p]),
                pod_annotations=ctx.annotations,
            )
            for p in best
        ]
        return FitResult(True, chosen, list(best))

    def add_usage(
        self,
        device: DeviceInfo,
        usage: DeviceUsage,
        entry: ContainerDevice,
        *,
        container_index: int,
        device_index: int,
        migs: list[MigAllocation],
    ) -> ContainerDevice:
        super().add_usage(
            device, usage, entry, container_index=container_index, device_index=device_index, migs=migs
        )
        annotations = entry.pod_annotations if isinstance(entry, SgpuEntry) else {}
        if annotations.get(APP_CLASS) != ONLINE:
            # The device plugin switches the device to the pod's policy (none for a whole device).
            expected = "" if entry.usedcores == 100 else annotations.get(QOS_POLICY, "")
            usage.custom = {**(usage.custom or {}), QOS: expected}
        return entry

    # -- annotations, score, admission -----------------------------------------------------------

    def extra_annotations(
        self, per_container: PodSingleDevice, *, node: str, now: int, pod: Obj | None
    ) -> dict[str, str]:
        out = {METAX_ALLOCATED: go_json([
            [{"uuid": d.uuid, **({"compute": d.usedcores} if d.usedcores else {}),
              **({"vRam": d.usedmem} if d.usedmem else {})} for d in ctr]
            for ctr in per_container
        ]), PREDICATE_TIME: str(now * 1_000_000_000)}
        annotations = entry_annotations(per_container) or {}
        if annotations.get(APP_CLASS) != ONLINE:
            self.remember_qos(annotations.get(QOS_POLICY, ""), per_container)
        return out

    def remember_qos(self, wanted: str, per_container: PodSingleDevice) -> None:
        """HAMi `addJitteryQos`: until the inventory shows it, a chosen device is taken to have the
        policy the pod needs (none for a whole device)."""
        for ctr in per_container:
            for dev in ctr:
                if not isinstance(dev, SgpuEntry):
                    continue
                expected = "" if dev.usedcores == 100 else wanted
                if dev.qos_policy != expected:
                    self.jittery.add(dev.uuid, expected)

    def score_node(
        self,
        per_container: PodSingleDevice,
        *,
        annotations: Mapping[str, str],
        devices: Sequence[DeviceInfo],
        previous: Sequence[DeviceUsage],
        policy: str,
    ) -> float:
        raw = self.raw_score(per_container, devices, previous)
        return raw * (-SCORE_WEIGHT if policy == "spread" else SCORE_WEIGHT)

    def score_bound(
        self,
        requests: Sequence[ContainerDeviceRequest],
        *,
        pod_annotations: Mapping[str, str],
        policy: str,
        annotations: Mapping[str, str] | None = None,
        devices: Sequence[DeviceInfo] = (),
        previous: Sequence[DeviceUsage] = (),
    ) -> float | None:
        """From the pod alone: `raw_score` is at most `raw_bound`, so the score is at most
        10000 × it (binpack) or at least −10000 × it (spread)."""
        raw = self.raw_bound(requests, pod_annotations)
        return raw * (-SCORE_WEIGHT if policy == "spread" else SCORE_WEIGHT)

    @staticmethod
    def raw_bound(requests: Sequence[ContainerDeviceRequest], pod_annotations: Mapping[str, str]) -> int:
        """An upper bound of `raw_score` for any fit of `requests`: an online pod only gets
        penalties (≤ 0); the others score only by topology over their whole devices (entries of
        100 cores): 11 × the links among the N devices taken (10 per same-zone pair) minus the
        idle links they break, so at most 11 × 10 × N(N−1)/2; without whole devices 0."""
        if pod_annotations.get(APP_CLASS) == ONLINE:
            return 0
        whole = sum(r.nums for r in requests if r.coresreq == 100)
        return 11 * rules.DIRECT_LINK_SCORE * whole * (whole - 1) // 2

    def raw_score(
        self, per_container: PodSingleDevice, devices: Sequence[DeviceInfo], previous: Sequence[DeviceUsage]
    ) -> int:
        """HAMi's policy-independent ScoreNode (higher is better)."""
        entries = [d for ctr in per_container for d in ctr]
        if any(isinstance(d, SgpuEntry) and d.pod_annotations.get(APP_CLASS) == ONLINE for d in entries):
            return rules.score_online({d.uuid for d in entries}, [d.id for d in devices], previous)
        if self.topology_enabled(entries):
            whole = [rules.LinkDevice(d.uuid, d.link_zone if isinstance(d, SgpuEntry) else 0)
                     for d in entries if d.usedcores == 100]
            idle = [rules.LinkDevice(dev.id, link_zone(dev))
                    for dev, u in zip(devices, previous, strict=True) if u.used == 0]
            return rules.score_exclusive(whole, idle)
        return 0

    def topology_enabled(self, entries: Sequence[ContainerDevice]) -> bool:
        """HAMi `topologyAwareEnable`: only for whole devices; the first one's pod annotation
        (a Go bool) overrides the configured `sgpuTopologyAware`."""
        for d in entries:
            if d.usedcores == 100:
                enabled = self.topology_aware_default
                value = d.pod_annotations.get(TOPOLOGY_AWARE) if isinstance(d, SgpuEntry) else None
                if value is not None:
                    with contextlib.suppress(GoSyntaxError):  # not a Go bool: the default stays
                        enabled = parse_bool(value)
                return enabled
        return False

    def mutate(self, container: dict[str, Any], pod: dict[str, Any]) -> bool:
        """HAMi's sGPU MutateAdmission: validate the app class (single device), default the QoS
        policy to best-effort for non-online pods, validate it."""
        limits = (container.get("resources") or {}).get("limits") or {}
        if not self.names.count or self.names.count not in limits:
            return False
        annotations = objects.annotations(pod)
        app_class = annotations.get(APP_CLASS)
        if app_class is not None:
            if app_class not in (ONLINE, OFFLINE):
                raise MutationError(f"{APP_CLASS} must be set one of [{ONLINE}, {OFFLINE}]")
            if _value(limits[self.names.count]) != 1:
                raise MutationError("app-class pod must request single device")
        if app_class == ONLINE:
            return True
        qos = annotations.get(QOS_POLICY)
        if qos is None:
            metadata = pod.setdefault("metadata", {})
            if not isinstance(metadata.get("annotations"), dict):
                metadata["annotations"] = {}
            metadata["annotations"][QOS_POLICY] = BEST_EFFORT
            return True
        if qos not in (BEST_EFFORT, FIXED_SHARE, BURST_SHARE):
            choices = f"{BEST_EFFORT}, {FIXED_SHARE}, {BURST_SHARE}"
            raise MutationError(f"{QOS_POLICY} must be set one of [{choices}]")
        return True


def _value(raw: object) -> int:
    """`Quantity.Value()`: rounded up, away from zero; an unreadable value counts as 0."""
    if raw is None or isinstance(raw, bool):
        return 0
    try:
        exact = parse_quantity(repr(raw) if isinstance(raw, float) else str(raw))
    except (QuantityError, ValueError):
        return 0
    return math.ceil(exact) if exact >= 0 else math.floor(exact)

