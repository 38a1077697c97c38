"""`GenericVendor`: the behaviour most of HAMi's backends repeat, written once.

HAMi copies one pattern into nearly every `pkg/device/<vendor>/device.go`: an inventory in a node
annotation, the generic handshake, a request of count/memory/cores, the same per-device check
ladder in `Fit`, `AddResourceUsage` adding the entry, the allocation list written under two keys,
`hami.io/mutex.lock` taken when a regular container asks, a node score of 0. A vendor module
subclasses `GenericVendor`, sets its keys and options, and overrides only what differs.

The ladder (`ladder`) is HAMi's NVIDIA `Fit` with each NVIDIA-only step behind an option, so one
loop serves both the ordered walk (`fit`) and the order-free verdict (`quick_verdict`). A vendor
whose `Fit` differs overrides `ladder` alone (both answers from one method); one that writes more
than its allocation at filter time returns it from `extra_annotations`. `quick_judge` is the
order-free verdict specialised for the common request (`devices/quick.py`) while `ladder` is this
one, else the vendor's `quick_verdict` itself.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any

from vgpu_scheduler.devices import handshake
from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.devices.podquota import quota_usage
from vgpu_scheduler.devices.protocol import (
    FitResult,
    Health,
    MemoryShortfall,
    NodeBound,
    NodeLockSpec,
    Obj,
    Pinned,
    PodFitContext,
    QuickJudge,
    ResourceNames,
)
from vgpu_scheduler.devices.quick import plain_judge, short_of_memory
from vgpu_scheduler.devices.selection import NO_FILTERS, type_list, uuid_set
from vgpu_scheduler.devices.selection import SelectionFilters as SelectionFilters
from vgpu_scheduler.model import (
    PERCENTAGE_UNSET,
    ContainerDevice,
    ContainerDeviceRequest,
    ContainerDevices,
    DeviceInfo,
    DeviceUsage,
    MigAllocation,
    PodSingleDevice,
)
from vgpu_scheduler.wire import keys, objects
from vgpu_scheduler.wire import reasons as R
from vgpu_scheduler.wire.allocation import encode_container_list
from vgpu_scheduler.wire.inventory import InventoryError, decode_node_devices

Collected = list[tuple[int, int, int]]
"""(node position, memory, cores) of the devices a fit took so far."""


# --------------------------------------------------------------------------------------------
# The shared vendor


class GenericVendor:
    """A vendor following HAMi's common backend pattern; subclasses set the class attributes."""

    # -- identity and wire keys (§3, §4.4) --
    key: str = ""
    allocation_keys: tuple[str, str] = ("", "")
    handshake_key: str | None = None
    cleanup_key: str | None = None
    """Defaults to `handshake_key` (set in `__init__`)."""
    lock_key: str | None = keys.NODE_LOCK
    node_lock: NodeLockSpec | None = None
    """Set in `__init__` from `lock_key` (the shared mutex) unless a vendor declares its own lock,
    whose key then becomes `lock_key`."""
    register_key: str | None = None
    """Node annotation holding the inventory."""
    inventory_dialect: str = "auto"
    """How it is written: "legacy" (comma form), "json", or "auto" (either, by its first character)."""

    # -- pod selection annotations (§4.7); None = not supported --
    use_type_key: str | None = None
    nouse_type_key: str | None = None
    use_uuid_key: str | None = None
    nouse_uuid_key: str | None = None

    # -- request defaults (§5.1) --
    default_cores: int = 100
    """Cores of a container that names none."""

    # -- fit options: HAMi NVIDIA's extra steps, off unless a vendor does them (§5.3) --
    honours_cordon: bool = False
    """Skip devices listed in `hami.io/device-cordon` (CardCordoned)."""
    groups_by_numa: bool = False
    """With numa-bind, the devices of one container come from one NUMA node (NumaNotFit)."""
    checks_quota: bool = False
    """ResourceQuota inside the fit, over the whole pod (ResourceQuotaNotFit)."""
    topology_aware: bool = False
    """Policy topology-aware collects every passing device and `select`s among them."""
    instance_mode: str | None = None
    """Devices in this mode hold several instances of one container (NVIDIA MIG): each instance
    must pass `instance_fits`, and the device is examined again after taking one."""

    writes_to_allocate: bool = True
    """`patch_annotations` writes the allocation under the to-allocate key too."""

    prefilter: bool = True
    scores_nodes: bool = False
    counted_pod_keys: frozenset[str] = frozenset()
    """Counted pods' annotations the fit reads (see the protocol)."""

    def __init__(self, names: ResourceNames, *, extra_resources: Sequence[str] = ()) -> None:
        self.names = names
        self.managed_resources = frozenset(
            n for n in (names.count, names.memory, names.cores, *extra_resources) if n
        )
        self.inventory_keys: tuple[str, ...] = (self.register_key,) if self.register_key else ()
        if self.cleanup_key is None:
            self.cleanup_key = self.handshake_key
        if self.node_lock is not None:
            self.lock_key = self.node_lock.key
        elif self.lock_key is not None:
            self.node_lock = NodeLockSpec(self.lock_key)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.names!r})"

    # -- requests (§5.1) ----------------------------------------------------------------------

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        """The common request: count, memory (× memoryFactor) and cores (default `default_cores`);
        memory 0 means the whole device (percentage 100). Out-of-range values drop the request."""
        resources = res.resources_of(container)
        if resources is None:
            return None
        count = res.as_int(res.lookup(resources, self.names.count))
        if count is None or count <= 0 or count > res.INT32_MAX:
            return None
        memory = 0
        raw = res.lookup(resources, self.names.memory)
        if raw is not res.MISSING:
            mem = res.as_int(raw)
            if mem is not None:
                factor = self.names.memory_factor
                if mem < 0 or mem > res.INT32_MAX or (factor > 1 and mem * factor > res.INT32_MAX):
                    return None
                memory = mem * factor if factor > 1 else mem
        cores = self.default_cores
        raw = res.lookup(resources, self.names.cores)
        if raw is not res.MISSING:
            parsed = res.as_int(raw)
            if parsed is not None:
                if parsed < 0 or parsed > res.INT32_MAX:
                    return None
                cores = parsed
        return ContainerDeviceRequest(
            nums=count, type=self.key, memreq=memory, mem_percentage_req=100 if memory == 0 else 0,
            coresreq=cores,
        )

    def whole_device_request(
        self, container: Obj, *, drop_empty: bool = False
    ) -> ContainerDeviceRequest | None:
        """Whole devices by count (limits, else requests; wrapped to int32 as Go converts): all of
        their memory, no cores. `drop_empty`: a count <= 0 is no request (HAMi's Resourcereqs)."""
        resources = res.resources_of(container)
        if resources is None:
            return None
        count = res.as_int(res.lookup(resources, self.names.count))
        if count is None:
            return None
        nums = res.int32(count)
        if drop_empty and nums <= 0:
            return None
        return ContainerDeviceRequest(nums=nums, type=self.key, memreq=0, mem_percentage_req=100, coresreq=0)

    # -- registration (§3.2, §3.4) ---------------------------------------------------------------

    def node_devices(self, node: Obj) -> list[DeviceInfo]:
        key = self.register_key
        value = objects.annotation(node, key) if key else None
        if value is None:
            raise InventoryError(f"annos not found {key}")
        devices = decode_node_devices(value, self.inventory_dialect)
        for dev in devices:
            dev.device_vendor = self.key
        if not devices:
            raise InventoryError("no gpu found on node")
        return devices

    def check_health(self, node: Obj, now: datetime, tz: tzinfo | None) -> Health:
        if self.handshake_key is None:
            return Health(healthy=True, need_update=True)
        return handshake.check_node(node, self.handshake_key, self.names.count, now, tz=tz)

    def forget_node(self, name: str) -> None:
        pass

    # -- fit (§5.3) ------------------------------------------------------------------------------

    def pod_filters(self, annotations: Mapping[str, str]) -> Hashable:
        def get(key: str | None) -> str | None:
            return annotations.get(key) if key else None

        raw = (get(self.use_type_key), get(self.nouse_type_key), get(self.use_uuid_key),
               get(self.nouse_uuid_key))
        if raw == (None, None, None, None):  # most pods: nothing to parse
            return NO_FILTERS
        filters = SelectionFilters(type_list(raw[0]), type_list(raw[1]), uuid_set(raw[2]), uuid_set(raw[3]))
        return NO_FILTERS if filters == NO_FILTERS else filters

    def fit(
        self,
        request: ContainerDeviceRequest,
        devices: Sequence[DeviceInfo],
        usage: Sequence[DeviceUsage],
        order: Sequence[int],
        *,
        ctx: PodFitContext,
        cordoned: frozenset[str],
        allocated: Sequence[ContainerDevices],
    ) -> FitResult:
        result = self.ladder(request, devices, usage, order, ctx=ctx, cordoned=cordoned, allocated=allocated)
        assert isinstance(result, FitResult)
        return result

    def quick_verdict(
        self,
        request: ContainerDeviceRequest,
        devices: Sequence[DeviceInfo],
        usage: Sequence[DeviceUsage],
        positions: Sequence[int],
        *,
        ctx: PodFitContext,
        cordoned: frozenset[str],
    ) -> str | None:
        result = self.ladder(request, devices, usage, positions, ctx=ctx, cordoned=cordoned, quick=True)
        assert not isinstance(result, FitResult)
        return result

    def quick_judge(self, request: ContainerDeviceRequest, ctx: PodFitContext) -> QuickJudge | None:
        """`quick_verdict` with the request's part worked out once: the ladder's own steps for a
        plain request (`devices/quick.py`), else the ladder itself; None when the ladder's quick
        answer is always None (an order-dependent step applies)."""
        if self._order_dependent(ctx):
            return None

        def full(
            devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage], positions: Sequence[int],
            cordoned: frozenset[str],
        ) -> str | None:
            return self.quick_verdict(request, devices, usage, positions, ctx=ctx, cordoned=cordoned)

        filters = self._plain_filters(request, ctx)
        if filters is None:
            return full  # a vendor's own ladder, a mutex, or another type's request
        by_pct = request.mem_percentage_req != PERCENTAGE_UNSET and request.memreq == 0
        return plain_judge(
            nums=request.nums,
            memreq=request.memreq,
            percentage=request.mem_percentage_req if by_pct else None,
            coresreq=request.coresreq,
            instance_mode=self.instance_mode,
            cordon_aware=self.honours_cordon,
            type_ok=filters.type_ok if filters.types_active else None,
            use_uuids=filters.use_uuids,
            nouse_uuids=filters.nouse_uuids,
            fallback=full,
        )

    def _order_dependent(self, ctx: PodFitContext) -> bool:
        """A step of this vendor's ladder for the pod of `ctx` reads the devices taken before (NUMA
        grouping, quota, topology): no order-free verdict then."""
        return bool(
            (self.groups_by_numa and ctx.numa_bind) or (self.checks_quota and ctx.quota is not None)
            or (self.topology_aware and ctx.topology)
        )

    def _plain_filters(self, request: ContainerDeviceRequest, ctx: PodFitContext) -> SelectionFilters | None:
        """The pod's selection filters when `request` goes through the generic ladder's own steps
        (`devices/quick.py`), else None (a vendor's own ladder, a mutex, another type)."""
        cls = type(self)
        if cls.ladder is not GenericVendor.ladder or cls.quick_verdict is not GenericVendor.quick_verdict:
            return None
        filters = ctx.filters(self)
        assert isinstance(filters, SelectionFilters)
        if ctx.mutex or request.type != self.key:
            return None
        return filters

    def memory_shortfall(self, request: ContainerDeviceRequest, ctx: PodFitContext) -> MemoryShortfall | None:
        if self._order_dependent(ctx):
            return None
        filters = self._plain_filters(request, ctx)
        if filters is None or filters.types_active:
            return None
        if filters.use_uuids is not None or filters.nouse_uuids is not None:
            return None  # a device may fail the uuid check before its memory
        if request.mem_percentage_req != PERCENTAGE_UNSET and request.memreq == 0:
            return None  # the memory asked depends on each device
        return MemoryShortfall(max(request.memreq, 0), short_of_memory)

    def pinned_devices(self, request: ContainerDeviceRequest, ctx: PodFitContext) -> Pinned | None:
        if self._order_dependent(ctx):
            return None
        filters = self._plain_filters(request, ctx)
        if filters is None or filters.use_uuids is None:
            return None
        # The ladder checks health (with MIG conflicts), cordon, type, then uuid, before any usage;
        # before it, the device-count pre-check reads the count and the mode filter.
        elsewhere = (self.key, request.nums, filters.use_types, filters.nouse_types, filters.mode)
        return Pinned(filters.use_uuids, elsewhere)

    def may_exceed_devices(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], positions: Sequence[int],
        ctx: PodFitContext,
    ) -> bool:
        return False

    def ladder(
        self,
        request: ContainerDeviceRequest,
        devices: Sequence[DeviceInfo],
        usage: Sequence[DeviceUsage],
        order: Sequence[int],
        *,
        ctx: PodFitContext,
        cordoned: frozenset[str],
        allocated: Sequence[ContainerDevices] = (),
        quick: bool = False,
    ) -> FitResult | str | None:
        """HAMi's per-device checks over `order`, walked from the END (§5.3).

        The first failing check of a device counts one reason and skips it; the reason total is
        len(order). Ordered (`quick=False`): HAMi `Fit`, stopping once Nums devices passed, with
        NUMA groups, quota, instance devices and topology as the options say; returns a
        FitResult. Quick: without those order-dependent steps every device is judged on its own
        and the node fits iff Nums devices pass, so `order` may be any order; returns "" (fits,
        as soon as Nums passed), the reason string, or None when an order-dependent step applies.
        """
        numa = self.groups_by_numa and ctx.numa_bind
        quota = ctx.quota if self.checks_quota else None
        topology = self.topology_aware and ctx.topology
        if quick and (numa or quota is not None or topology):
            return None
        origin = request.nums
        coresreq = request.coresreq
        pct = request.mem_percentage_req
        req_mem = request.memreq
        instance_mode = self.instance_mode
        if quick:
            coresreq = min(coresreq, 100)  # in Fit the clamp precedes every check that reads it
        filters = ctx.filters(self)
        assert isinstance(filters, SelectionFilters)
        type_filters = filters.types_active
        uuid_filters = filters.uuids_active
        type_ok = request.type == self.key
        cordon = cordoned if self.honours_cordon else None
        mutex = ctx.mutex
        by_pct = pct != PERCENTAGE_UNSET and req_mem == 0
        fixed_mem = max(req_mem, 0)
        remaining = origin
        reasons: dict[str, int] = {}
        collected: Collected = []
        prevnuma = -1

        i = len(order) - 1
        while i >= 0:
            pos = order[i]
            i -= 1
            dev = devices[pos]
            u = usage[pos]
            if not dev.health or u.mig_conflict:
                reason = R.CARD_NOT_HEALTH
            elif cordon and dev.id in cordon:
                reason = R.CARD_CORDONED
            elif not type_ok or (type_filters and not filters.type_ok(dev)):
                reason = R.CARD_TYPE_MISMATCH
            else:
                if numa and prevnuma != dev.numa:
                    # A new NUMA group: what the previous group collected cannot be used together.
                    if remaining != origin:
                        reasons[R.NUMA_NOT_FIT] = reasons.get(R.NUMA_NOT_FIT, 0) + len(collected)
                    remaining = origin
                    prevnuma = dev.numa
                    collected = []
                used = u.used
                if uuid_filters and not filters.uuid_ok(dev.id):
                    reason = R.CARD_UUID_MISMATCH
                elif dev.count <= used:
                    reason = R.CARD_TIME_SLICING_EXHAUSTED
                elif mutex and used > 0:
                    reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
                else:
                    if coresreq > 100:
                        coresreq = 100  # HAMi logs and clamps; the clamp sticks for later devices
                    memreq = res.trunc_div(dev.devmem * pct, 100) if by_pct else fixed_mem
                    devcore = dev.devcore
                    if quota is not None and not quota.fits(
                        # HAMi `fitQuota`: the whole pod's would-be usage of this vendor.
                        ctx.namespace, self.key, *quota_usage(
                            allocated, ctx.n_init,
                            [*((devices[p].id, m, c) for p, m, c in collected), (dev.id, memreq, coresreq)],
                        ),
                    ):
                        reason = R.RESOURCE_QUOTA_NOT_FIT
                    elif dev.devmem - u.usedmem < memreq:
                        reason = R.CARD_INSUFFICIENT_MEMORY
                    elif devcore - u.usedcores < coresreq:
                        reason = R.CARD_INSUFFICIENT_CORE
                    elif devcore == 100 and coresreq == 100 and used > 0:
                        # Coresreq 100 asks for the whole card.
                        reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
                    elif devcore != 0 and u.usedcores == devcore and coresreq == 0:
                        reason = R.CARD_COMPUTE_UNITS_EXHAUSTED
                    elif instance_mode is not None and dev.mode == instance_mode:
                        if quick:
                            return None  # instances of one container interact: order matters
                        if not self.instance_fits(dev, u, [m for p, m, _ in collected if p == pos], memreq):
                            reason = R.CARD_MIG_TOPOLOGY_INFEASIBLE
                        else:
                            if remaining > 0:
                                if not topology:
                                    remaining -= 1
                                collected.append((pos, memreq, coresreq))
                            if remaining == 0 and not topology:
                                return self._success(devices, collected)
                            # Look at this device again for the next instance (until the look that
                            # fails and counts its reason); bounded so a bad inventory cannot loop.
                            if sum(1 for c in collected if c[0] == pos) <= self.instance_capacity(dev):
                                i += 1
                            continue
                    else:
                        if remaining > 0:
                            if not topology:
                                remaining -= 1
                            collected.append((pos, memreq, coresreq))
                        if remaining == 0 and not topology:
                            return "" if quick else self._success(devices, collected)
                        continue
            reasons[reason] = reasons.get(reason, 0) + 1

        if topology:
            if len(collected) == origin:
                return self._success(devices, collected)
            if len(collected) > origin:
                return self._success(devices, self.select(devices, collected, origin))
        if collected:
            reasons[R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(collected)
        reason_text = R.gen_reason(reasons, len(order))
        return reason_text if quick else FitResult(False, reason=reason_text)

    def instance_fits(self, dev: DeviceInfo, usage: DeviceUsage, earlier: list[int], memreq: int) -> bool:
        """Can `dev` (in `instance_mode`) host one more instance of `memreq` after `earlier`?"""
        return True

    def instance_capacity(self, dev: DeviceInfo) -> int:
        """Upper bound of instances `dev` can hold (guards the re-examination)."""
        return 0

    def select(self, devices: Sequence[DeviceInfo], collected: Collected, nums: int) -> Collected:
        """Topology-aware choice of `nums` among more collected devices (default: the first)."""
        return collected[:nums]

    def entry(self, dev: DeviceInfo, memory: int, cores: int) -> ContainerDevice:
        """The allocation entry of one chosen device (its type field is the vendor key, §4.5)."""
        return ContainerDevice(dev.id, self.key, memory, cores, dev.index)

    def _success(self, devices: Sequence[DeviceInfo], chosen: Collected) -> FitResult:
        out = [self.entry(devices[p], m, c) for p, m, c in chosen]
        mode = self.instance_mode
        adjust = mode is not None and any(devices[p].mode == mode for p, _, _ in chosen)
        return FitResult(True, out, [p for p, _, _ in chosen], adjust=adjust)

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
        usage.used += 1
        usage.usedcores += entry.usedcores
        usage.usedmem += entry.usedmem
        return entry

    # -- annotations, score, admission -----------------------------------------------------------

    def patch_annotations(
        self,
        per_container: PodSingleDevice,
        migs: Sequence[MigAllocation],
        *,
        node: str,
        now: int,
        pod: Obj | None = None,
    ) -> dict[str, str]:
        if not per_container:
            return {}
        to_allocate, allocated = self.allocation_keys
        encoded = encode_container_list(per_container)
        out: dict[str, str] = {}
        if to_allocate and self.writes_to_allocate:  # some vendors only write an "allocated" key (§4.4)
            out[to_allocate] = encoded
        out[allocated] = encoded
        out.update(self.extra_annotations(per_container, node=node, now=now, pod=pod))
        return out

    def extra_annotations(
        self, per_container: PodSingleDevice, *, node: str, now: int, pod: Obj | None
    ) -> dict[str, str]:
        """What a vendor writes next to its allocation at filter time (called only with devices)."""
        return {}

    def score_node(
        self,
        per_container: PodSingleDevice,
        *,
        annotations: Mapping[str, str],
        devices: Sequence[DeviceInfo],
        previous: Sequence[DeviceUsage],
        policy: str,
    ) -> float:
        return 0.0

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
        """0 for a vendor whose ScoreNode is always 0; unknown for one that scores and does not
        say how much (a subclass overriding `score_node` only stays exact)."""
        return None if self.scores_nodes else 0.0

    def score_bound_key(
        self,
        requests: Sequence[ContainerDeviceRequest],
        *,
        pod_annotations: Mapping[str, str],
        policy: str,
    ) -> Hashable | None:
        """None: bounds from the pod alone need no key, and a vendor bounding per node says what
        its bound reads of the pod (`Vendor.score_bound_key`)."""
        return None

    def node_score_bound(
        self,
        requests: Sequence[ContainerDeviceRequest],
        *,
        pod_annotations: Mapping[str, str],
        policy: str,
    ) -> NodeBound:
        """`score_bound` on the node at hand, called as it is."""

        def bound(annotations: Mapping[str, str], devices: Sequence[DeviceInfo],
                  previous: Sequence[DeviceUsage]) -> float | None:
            return self.score_bound(requests, pod_annotations=pod_annotations, policy=policy,
                                    annotations=annotations, devices=devices, previous=previous)

        return bound

    def node_bound_class(self, annotations: Mapping[str, str]) -> Hashable | None:
        """None: a bound per node may read the node's devices and usage."""
        return None

    def mutate(self, container: dict[str, Any], pod: dict[str, Any]) -> bool:
        """The common MutateAdmission: nothing changes; the count in `limits` makes it a device pod."""
        return res.present(container, "limits", self.names.count)
