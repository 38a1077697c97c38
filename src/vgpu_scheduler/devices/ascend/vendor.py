"""One Ascend chip (HAMi `pkg/device/ascend`, one `Devices` per `vnpus.configs` entry).

Keys are built from the chip's `commonWord` (cw): inventory `hami.io/node-register-<cw>` (JSON),
handshake `hami.io/node-handshake-<cw>`, allocations `hami.io/<cw>-devices-{to-allocate,allocated}`,
uuid selection `hami.io/use-<cw>-uuid` / `hami.io/no-use-<cw>-uuid`, node lock
`hami.io/mutex.lock`. What differs from the generic pattern:

* the request: memory may not be negative, cores default to 0 and are read with `Value()`;
* Fit: no type annotations or NUMA; a pod in `huawei.com/vnpu-mode: hami-core` fails a node that
  does not support hami-core (ModeNotFit) and counts cores against 100 instead of the device's
  aiCore; 910-family nodes whose devices all carry a NetworkID collect every passing device and
  take the best network; 910C requests above one NPU take whole modules (pairs);
* PatchAnnotations also writes `predicate-time` and `huawei.com/<cw>` (runtime JSON), which
  needs the pod's vnpu-mode (`patch_pod_annotations`);
* ScoreNode (910 family): how concentrated each container's devices are on one network;
* MutateAdmission: 910C pairing, template rounding of memory, the hard-split core ban,
  runtimeClassName and `ASCEND_VISIBLE_DEVICES`.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from fractions import Fraction
from typing import Any

from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.devices.ascend import topology
from vgpu_scheduler.devices.ascend.config import VnpuConfig
from vgpu_scheduler.devices.ascend.inventory import (
    AscendDevice,
    has_network_id,
    network_id,
    node_hami_core,
    read_inventory,
)
from vgpu_scheduler.devices.base import GenericVendor
from vgpu_scheduler.devices.protocol import (
    FitResult,
    Health,
    MutationError,
    NodeBound,
    Obj,
    PodFitContext,
    ResourceNames,
)
from vgpu_scheduler.devices.resources import trunc_div
from vgpu_scheduler.devices.selection import SelectionFilters, uuid_set
from vgpu_scheduler.gocompat.parsing import go_json
from vgpu_scheduler.model import (
    PERCENTAGE_UNSET,
    ContainerDeviceRequest,
    ContainerDevices,
    DeviceInfo,
    DeviceUsage,
    PodSingleDevice,
)
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire import reasons as R
from vgpu_scheduler.wire.quantity import QuantityError, canonical_quantity, parse_quantity

ASCEND910_PREFIX = "Ascend910"
ASCEND910C = "Ascend910C"
VNPU_MODE = "huawei.com/vnpu-mode"
HAMI_CORE = "hami-core"
NETWORK_WEIGHT = 10
NETWORKED_MEMO = 20_000
"""Device lists `_networked` remembers (nodes), emptied when full."""
PREDICATE_TIME = "predicate-time"
VISIBLE_DEVICES_ENV = "ASCEND_VISIBLE_DEVICES"
INT32_MAX = res.INT32_MAX

_F32 = struct.Struct("f")


def f32(x: float) -> float:
    """Round to float32 (HAMi's scores are float32)."""
    result: float = _F32.unpack(_F32.pack(x))[0]
    return result


@dataclass(slots=True, frozen=True)
class AscendFilters:
    """What of the pod an Ascend fit reads: the uuid annotations and hami-core mode."""

    uuids: SelectionFilters
    hami_core: bool


def _exact(raw: object) -> Fraction | None:
    """A quantity's exact value (None: unreadable; Go's API objects never hold such values)."""
    if raw is None:
        return Fraction(0)
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        return None
    try:
        return parse_quantity(repr(raw) if isinstance(raw, float) else str(raw))
    except (QuantityError, ValueError):
        return None


def _value(raw: object) -> int:
    """Go's `Quantity.Value()`: rounded up, away from zero."""
    exact = _exact(raw)
    if exact is None:
        return 0
    return math.ceil(exact) if exact >= 0 else math.floor(exact)


class AscendVendor(GenericVendor):
    """One chip of the `vnpus` section."""

    inventory_dialect = "json"
    default_cores = 0
    prefilter = False  # in hami-core mode cores count against 100, not the device's aiCore

    def __init__(self, config: VnpuConfig, *, hami_vnpu_core: bool = False) -> None:
        cw = config.common_word
        self.config = config
        self.hami_vnpu_core = hami_vnpu_core
        self.key = cw
        self.allocation_keys = (f"hami.io/{cw}-devices-to-allocate", f"hami.io/{cw}-devices-allocated")
        self.handshake_key = f"hami.io/node-handshake-{cw}"
        self.register_key = f"hami.io/node-register-{cw}"
        self.uuid_keys = (f"hami.io/use-{cw}-uuid", f"hami.io/no-use-{cw}-uuid")
        self.use_uuid_key, self.nouse_uuid_key = self.uuid_keys
        self.runtime_key = f"huawei.com/{cw}"
        self.scores_nodes = cw.startswith(ASCEND910_PREFIX)
        super().__init__(ResourceNames(
            config.resource_name, config.resource_memory_name, config.resource_core_name,
            config.memory_factor,
        ))
        self._node_modes: dict[str, bool | None] = {}
        self._networked_memo: dict[int, tuple[Sequence[DeviceInfo], bool]] = {}
        """Node -> its `hami-vnpu-core` annotation at the last registration pass."""

    # -- requests (GenerateResourceRequests) ------------------------------------------------------

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        resources = res.resources_of(container)
        if resources is None:
            return None
        count = res.as_int(res.lookup(resources, self.names.count))
        if count is None or count <= 0 or count > INT32_MAX:
            return None
        memory = 0
        raw = res.lookup(resources, self.names.memory)
        if raw is not res.MISSING:
            exact = _exact(raw)
            if exact is not None and exact < 0:
                return None  # checked before AsInt64, which refuses fractions such as -1m
            mem = res.as_int(raw)
            if mem is not None:
                if mem > INT32_MAX:  # memory is in MiB: a byte quantity such as 16Gi is a mistake
                    return None
                factor = self.names.memory_factor
                if factor > 1:
                    mem *= factor
                    if mem > INT32_MAX:
                        return None
                memory = mem
        cores = 0
        raw = res.lookup(resources, self.names.cores)
        if raw is not res.MISSING:
            cores = _value(raw)
            if cores < 0 or cores > INT32_MAX:
                return None
        return ContainerDeviceRequest(
            nums=count, type=self.key, memreq=memory, mem_percentage_req=100 if memory == 0 else 0,
            coresreq=cores,
        )

    # -- inventory (GetNodeDevices) ---------------------------------------------------------------

    def node_devices(self, node: Obj) -> list[DeviceInfo]:
        assert self.register_key is not None
        return read_inventory(node, self.register_key, self.key)

    def check_health(self, node: Obj, now: datetime, tz: tzinfo | None) -> Health:
        """The generic handshake check; also notes the node's `hami-vnpu-core` annotation, which
        Fit reads (the registration loop calls this for every node at every pass)."""
        self._node_modes[objects.name(node)] = node_hami_core(node)
        return super().check_health(node, now, tz)

    def forget_node(self, name: str) -> None:
        self._node_modes.pop(name, None)

    # -- fit --------------------------------------------------------------------------------------

    def pod_filters(self, annotations: Mapping[str, str]) -> Hashable:
        uuids = SelectionFilters(
            use_uuids=uuid_set(annotations.get(self.uuid_keys[0])),
            nouse_uuids=uuid_set(annotations.get(self.uuid_keys[1])),
        )
        return AscendFilters(uuids, annotations.get(VNPU_MODE) == HAMI_CORE)

    def node_supports_hami_core(self, devices: Sequence[DeviceInfo], order: Sequence[int]) -> bool:
        """The node's `hami-vnpu-core` annotation when set, else the section's `hamiVnpuCore`.
        The annotation as the last registration pass saw it, else as the inventory was read
        (nodes that no registration loop watches: template nodes, tests)."""
        for pos in order:
            dev = devices[pos]
            if isinstance(dev, AscendDevice):
                mode = self._node_modes.get(dev.node_name, dev.node_hami_core)
                return self.hami_vnpu_core if mode is None else mode
        return self.hami_vnpu_core

    def needs_topology(self, devices: Sequence[DeviceInfo], order: Sequence[int]) -> bool:
        """910 family, and every device of the node carries a NetworkID."""
        return self.key.startswith(ASCEND910_PREFIX) and all(
            has_network_id(_custom_info(devices[p])) for p in order
        )

    def ladder(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage],
        order: Sequence[int], *, ctx: PodFitContext, cordoned: frozenset[str],
        allocated: Sequence[ContainerDevices] = (), quick: bool = False,
    ) -> FitResult | str | None:
        """HAMi's Ascend `Fit` over `order`, walked from the END. Quick: "" (fits), the reason,
        or None when the outcome depends on the order (topology and module pairing choose
        among every passing device)."""
        filters = ctx.filters(self)
        assert isinstance(filters, AscendFilters)
        total = len(order)
        if filters.hami_core and not self.node_supports_hami_core(devices, order):
            reason = R.gen_reason({R.MODE_NOT_FIT: 1}, total)
            return reason if quick else FitResult(False, reason=reason)
        origin = request.nums
        pairing = request.type == ASCEND910C and origin > 1
        collect_all = self.needs_topology(devices, order) or pairing
        if quick and collect_all:
            return None
        coresreq = min(request.coresreq, 100) if quick else request.coresreq
        pct = request.mem_percentage_req
        by_pct = pct != PERCENTAGE_UNSET and request.memreq == 0
        fixed_mem = max(request.memreq, 0)
        type_ok = request.type == self.key
        uuids = filters.uuids
        uuid_filters = uuids.uuids_active
        mutex = ctx.mutex
        hami_core = filters.hami_core
        remaining = origin
        reasons: dict[str, int] = {}
        collected: list[tuple[int, int, int]] = []

        for pos in reversed(order):
            dev = devices[pos]
            u = usage[pos]
            if not dev.health:
                reason = R.CARD_NOT_HEALTH
            elif not type_ok:
                reason = R.CARD_TYPE_MISMATCH
            elif uuid_filters and not uuids.uuid_ok(dev.id):
                reason = R.CARD_UUID_MISMATCH
            elif dev.count <= u.used:
                reason = R.CARD_TIME_SLICING_EXHAUSTED
            elif mutex and u.used > 0:
                reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            else:
                if coresreq > 100:
                    coresreq = 100  # HAMi logs and clamps; the clamp sticks for later devices
                memreq = trunc_div(dev.devmem * pct, 100) if by_pct else fixed_mem
                devcore = 100 if hami_core else dev.devcore
                if dev.devmem - u.usedmem < memreq:
                    reason = R.CARD_INSUFFICIENT_MEMORY
                elif devcore - u.usedcores < coresreq:
                    reason = R.CARD_INSUFFICIENT_CORE
                elif devcore == 100 and coresreq == 100 and u.used > 0:
                    reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
                elif devcore != 0 and u.usedcores == devcore and coresreq == 0:
                    reason = R.CARD_COMPUTE_UNITS_EXHAUSTED
                else:
                    if remaining > 0:
                        if not collect_all:
                            remaining -= 1
                        collected.append((pos, memreq, coresreq))
                    if remaining == 0 and not collect_all:
                        return "" if quick else self._success(devices, collected)
                    continue
            reasons[reason] = reasons.get(reason, 0) + 1

        if not quick:
            entries = [self.entry(devices[p], m, c) for p, m, c in collected]
            if pairing:
                chosen = topology.best_by_module(entries, origin)
                if len(chosen) == origin:
                    return FitResult(True, chosen, self._positions(devices, order, chosen))
                reasons[R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(chosen)
                return FitResult(False, reason=R.gen_reason(reasons, origin))
            if collect_all and len(entries) >= origin:
                if len(entries) > origin:
                    if origin == 1:
                        entries = entries[:1]
                    else:
                        info = {devices[p].id: devices[p] for p in order}
                        entries = topology.best_by_network(
                            entries, lambda c: network_id(_custom_info(info.get(c.uuid))), origin
                        )
                return FitResult(True, entries, self._positions(devices, order, entries))
        if collected:
            reasons[R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(collected)
        reason_text = R.gen_reason(reasons, total)
        return reason_text if quick else FitResult(False, reason=reason_text)

    @staticmethod
    def _positions(
        devices: Sequence[DeviceInfo], order: Sequence[int], chosen: ContainerDevices
    ) -> list[int]:
        where = {devices[p].id: p for p in order}
        return [where[c.uuid] for c in chosen]

    # -- annotations (PatchAnnotations) -----------------------------------------------------------

    def extra_annotations(
        self, per_container: PodSingleDevice, *, node: str, now: int, pod: Obj | None
    ) -> dict[str, str]:
        """PatchAnnotations, reading the pod's `huawei.com/vnpu-mode`: next to the allocation under
        both keys, `predicate-time` and the runtime JSON `huawei.com/<cw>` (a template name per
        device, except in hami-core mode)."""
        hami_core = pod is not None and objects.annotation(pod, VNPU_MODE) == HAMI_CORE
        runtime: list[dict[str, Any]] = []
        for ctr in per_container:
            for dev in ctr:
                template = "" if hami_core else self.config.trim_memory(dev.usedmem)[1]
                runtime.append(runtime_info(dev.uuid, template, dev.usedmem, dev.usedcores))
        return {
            PREDICATE_TIME: str(now),
            self.runtime_key: go_json(runtime) if runtime else "null",
        }

    # -- score (ScoreNode) ------------------------------------------------------------------------

    def score_node(
        self,
        per_container: PodSingleDevice,
        *,
        annotations: Mapping[str, str],
        devices: Sequence[DeviceInfo],
        previous: Sequence[DeviceUsage],
        policy: str,
    ) -> float:
        """910 family: Σ over containers of (devices on its most common network / its devices),
        × 10; 0 as soon as one chosen device has no NetworkID key."""
        if not self.scores_nodes:
            return 0.0
        # Any Ascend device: a request sees every device whose type contains the commonWord.
        info = {d.id: d for d in devices if isinstance(d, AscendDevice)}
        score = 0.0
        for ctr in per_container:
            if not ctr:
                continue
            counts: dict[int, int] = {}
            for entry in ctr:
                custom = _custom_info(info.get(entry.uuid))
                if not has_network_id(custom):
                    return 0.0
                nid = network_id(custom)
                if nid is not None:
                    counts[int(nid)] = counts.get(int(nid), 0) + 1
            total = sum(counts.values())
            if total == 0:
                continue
            score = f32(score + f32(f32(max(counts.values())) / f32(total)))
        return f32(score * NETWORK_WEIGHT)

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
        """Each container adds the share of its devices on their most common network: at most 1,
        so binpack's bound is 10 × the containers asking, on any node. Under spread, per node: a
        device without NetworkID zeroes the score, so the bound is 0 unless every device a fit
        may take and every Ascend device (the ones ScoreNode looks up) has a numeric NetworkID;
        then a container taking n devices adds at least 1/n."""
        if not self.scores_nodes:
            return 0.0
        if policy != "spread":
            return float(NETWORK_WEIGHT * len(requests))
        if annotations is None:
            return None  # depends on the node's devices
        if not self._networked(devices):
            return 0.0
        return _least_network_score(tuple(r.nums for r in requests))

    def score_bound_key(
        self,
        requests: Sequence[ContainerDeviceRequest],
        *,
        pod_annotations: Mapping[str, str],
        policy: str,
    ) -> Hashable | None:
        """The per-node bound (spread) reads only the device counts asked."""
        return tuple(r.nums for r in requests)

    def node_score_bound(
        self,
        requests: Sequence[ContainerDeviceRequest],
        *,
        pod_annotations: Mapping[str, str],
        policy: str,
    ) -> NodeBound:
        """`score_bound` per node with the pod's part (the least score on a networked node) worked
        out once."""
        if not self.scores_nodes or policy != "spread":
            everywhere = self.score_bound(requests, pod_annotations=pod_annotations, policy=policy)
            return lambda annotations, devices, previous: everywhere
        least = _least_network_score(tuple(r.nums for r in requests))
        networked = self._networked
        return lambda annotations, devices, previous: least if networked(devices) else 0.0

    def _networked(self, devices: Sequence[DeviceInfo]) -> bool:
        """Every Ascend device, and every device of this vendor's type, has a numeric NetworkID.
        Memoised per device list: the engine asks it of every node a spread decision ranks, and a
        node's list is replaced, never changed in place, when its inventory changes (the memo
        holds the list it keyed, so its id cannot be reused meanwhile)."""
        memo = self._networked_memo.get(id(devices))
        if memo is not None and memo[0] is devices:
            return memo[1]
        needle = self.key.lower()
        networked = True
        for dev in devices:
            if isinstance(dev, AscendDevice):
                networked = dev.numeric_network
            else:
                networked = self.key not in dev.type and needle not in dev.type.lower()
            if not networked:
                break
        if len(self._networked_memo) >= NETWORKED_MEMO:
            self._networked_memo.clear()
        self._networked_memo[id(devices)] = (devices, networked)
        return networked

    # -- admission (MutateAdmission) --------------------------------------------------------------

    def mutate(self, container: dict[str, Any], pod: dict[str, Any]) -> bool:
        cfg = self.config
        if not res.present(container, "limits", cfg.resource_name):
            if cfg.overwrite_env:
                res.append_env(container, VISIBLE_DEVICES_ENV, "")
            return False
        resources = container["resources"]
        count = _value(resources["limits"][cfg.resource_name])
        if cfg.common_word == ASCEND910C and cfg.super_pod:
            if count == 1:
                # One module (two NPUs) is the smallest unit: 1 becomes 2.
                resources["limits"][cfg.resource_name] = "2"
                if res.present(container, "requests", cfg.resource_name):
                    resources["requests"][cfg.resource_name] = "2"
            elif count % 2 != 0:
                raise MutationError(f"Ascend910C device request must be 1 or 2*n, got {count}")
        hami_core = _pod_annotations(pod).get(VNPU_MODE) == HAMI_CORE
        if not hami_core and cfg.resource_core_name:
            core_name = cfg.resource_core_name
            cores = res.value(container, core_name) if _readable(container, core_name) else 0
            if cores is not None and cores > 0:
                raise MutationError(f"{core_name} is only supported in hami-core (soft split) mode")
        memory = cfg.memory_allocatable
        if res.present(container, "limits", cfg.resource_memory_name):
            asked = _value(resources["limits"][cfg.resource_memory_name])
            if hami_core:
                memory = asked
            else:
                memory = cfg.trim_memory(asked)[0]
                if memory <= 0:
                    raise MutationError(f"{cfg.resource_memory_name} {asked} is invalid")
        if count > 1 and not hami_core and memory != cfg.memory_allocatable:
            raise MutationError("vNPU not supported for multiple devices")
        quantity = canonical_quantity(str(memory))
        res.set_limit(container, cfg.resource_memory_name, quantity)
        if not isinstance(resources.get("requests"), dict):
            resources["requests"] = {}
        resources["requests"][cfg.resource_memory_name] = quantity
        spec = pod.get("spec")
        if isinstance(spec, dict) and spec.get("runtimeClassName") is None and cfg.runtime_class_name:
            spec["runtimeClassName"] = cfg.runtime_class_name
        return True


@functools.lru_cache(maxsize=256)
def _least_network_score(nums: tuple[int, ...]) -> float:
    """ScoreNode's least value when every device has a numeric NetworkID: each container taking
    n devices adds at least 1/n, summed as score_node sums (so the rounding keeps the bound)."""
    score = 0.0
    for n in nums:
        score = f32(score + f32(f32(1) / f32(n)))
    return f32(score * NETWORK_WEIGHT)


def runtime_info(uuid: str, template: str, memory: int, core: int) -> dict[str, Any]:
    """One element of `huawei.com/<cw>` (Go `RuntimeInfo`, empty fields omitted)."""
    out: dict[str, Any] = {}
    if uuid:
        out["UUID"] = uuid
    if template:
        out["temp"] = template
    if memory:
        out["memory"] = memory
    if core:
        out["core"] = core
    return out


def _custom_info(dev: DeviceInfo | None) -> dict[str, Any] | None:
    return dev.custom_info if isinstance(dev, AscendDevice) else None


def _pod_annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def _readable(container: Mapping[str, Any], name: str) -> bool:
    """The resource is named in limits or requests with a readable quantity."""
    for section in ("limits", "requests"):
        if res.present(container, section, name):
            return _exact(container["resources"][section][name]) is not None
    return False
