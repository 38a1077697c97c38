"""The NVIDIA backend (HAMi `pkg/device/nvidia`): the generic pattern plus every NVIDIA extra.

On top of `GenericVendor`: its own request rules and admission (`requests`, `admission`), an
inventory with pair scores, health with per-node counters (`health`), and in the fit the device
cordon, NUMA groups, ResourceQuota, MIG instances (`mig`) and the topology-aware choice
(`topology`); the MIG placements are written to `hami.io/vgpu-mig-allocations`.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any

from vgpu_scheduler.config import NvidiaConfig
from vgpu_scheduler.devices import handshake
from vgpu_scheduler.devices.base import Collected, GenericVendor
from vgpu_scheduler.devices.nvidia import admission, health, mig, topology
from vgpu_scheduler.devices.nvidia.requests import nvidia_request
from vgpu_scheduler.devices.protocol import Health, Obj, PodFitContext, ResourceNames, UsageError
from vgpu_scheduler.devices.selection import SelectionFilters
from vgpu_scheduler.model import (
    MIG_MODE,
    NVIDIA,
    ContainerDevice,
    ContainerDeviceRequest,
    DeviceInfo,
    DeviceUsage,
    MigAllocation,
    PodSingleDevice,
)
from vgpu_scheduler.wire import keys, objects
from vgpu_scheduler.wire.inventory import decode_nvidia_inventory
from vgpu_scheduler.wire.mig import encode_mig_allocations

MIG_ALLOCATION_FAILED = "MIG profile and placement allocation failed"


class NvidiaVendor(GenericVendor):
    key = NVIDIA
    allocation_keys = (keys.VGPU_TO_ALLOCATE, keys.VGPU_ALLOCATED)
    handshake_key = keys.NODE_HANDSHAKE
    register_key = keys.NODE_NVIDIA_REGISTER
    use_type_key = keys.USE_GPUTYPE
    nouse_type_key = keys.NOUSE_GPUTYPE
    use_uuid_key = keys.USE_GPUUUID
    nouse_uuid_key = keys.NOUSE_GPUUUID
    honours_cordon = True
    groups_by_numa = True
    checks_quota = True
    topology_aware = True
    instance_mode = MIG_MODE

    def __init__(self, cfg: NvidiaConfig | None = None) -> None:
        cfg = cfg if cfg is not None else NvidiaConfig()
        super().__init__(
            ResourceNames(cfg.resource_count_name, cfg.resource_memory_name, cfg.resource_core_name,
                          cfg.memory_factor),
            extra_resources=(cfg.resource_memory_percentage_name, cfg.resource_priority_name),
        )
        self.cfg = cfg
        self.inventory_keys = (keys.NODE_NVIDIA_REGISTER, keys.NODE_NVIDIA_SCORE)
        self._counters: dict[str, health.NodeCounters] = {}

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        return nvidia_request(container, self.cfg)

    # -- registration ----------------------------------------------------------------------------

    def node_devices(self, node: Obj) -> list[DeviceInfo]:
        annotations = objects.annotations(node)
        return decode_nvidia_inventory(
            annotations.get(keys.NODE_NVIDIA_REGISTER), annotations.get(keys.NODE_NVIDIA_SCORE)
        )

    def check_health(self, node: Obj, now: datetime, tz: tzinfo | None) -> Health:
        name = objects.name(node)
        annotations = objects.annotations(node)
        current = handshake.allocatable_count(node, self.cfg.resource_count_name)
        generic = handshake.check_handshake(annotations.get(keys.NODE_HANDSHAKE), now, current, tz)
        register = annotations.get(keys.NODE_NVIDIA_REGISTER) or ""
        verdict = health.check_nvidia(self.counters(name), current, register, generic)
        self._counters[name] = verdict.counters
        return Health(verdict.healthy, verdict.need_update, generic.write_requesting)

    def counters(self, name: str) -> health.NodeCounters:
        """What the health check remembers of a node."""
        return self._counters.get(name, health.UNSEEN)

    def forget_node(self, name: str) -> None:
        self._counters.pop(name, None)

    # -- fit -------------------------------------------------------------------------------------

    def pod_filters(self, annotations: Mapping[str, str]) -> Hashable:
        base = super().pod_filters(annotations)
        assert isinstance(base, SelectionFilters)
        mode = annotations.get(keys.VGPU_MODE)
        if mode is None:
            return base
        return SelectionFilters(base.use_types, base.nouse_types, base.use_uuids, base.nouse_uuids, mode)

    def may_exceed_devices(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], positions: Sequence[int],
        ctx: PodFitContext,
    ) -> bool:
        """HAMi `isMIGRequest`: MIG devices may take several instances of one container, unless
        the pod's `nvidia.com/vgpu-mode` excludes mig."""
        if request.type != NVIDIA:
            return False
        filters = ctx.filters(self)
        assert isinstance(filters, SelectionFilters)
        if filters.mode is not None and MIG_MODE not in filters.mode:
            return False
        return any(devices[p].mode == MIG_MODE for p in positions)

    def instance_fits(self, dev: DeviceInfo, usage: DeviceUsage, earlier: list[int], memreq: int) -> bool:
        return mig.mig_feasible(dev.mig_profiles, [pl for _, pl in usage.mig_taken], earlier, memreq)

    def instance_capacity(self, dev: DeviceInfo) -> int:
        return mig.placement_capacity(dev.mig_profiles)

    def select(self, devices: Sequence[DeviceInfo], collected: Collected, nums: int) -> Collected:
        """Topology-aware: one device = the worst-linked, several = the best-linked combination."""
        uuids = [devices[p].id for p, _, _ in collected]
        scores = {uid: devices[p].pair_scores for uid, (p, _, _) in zip(uuids, collected, strict=True)}
        if nums == 1:
            return [collected[topology.worst_single(uuids, scores)]]
        return [collected[k] for k in topology.best_combination(uuids, nums, scores)]

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
        """A MIG device gets a concrete profile + placement now: the entry's memory/cores become
        the profile's and a MigAllocation is recorded (§5.3 "MIG devices")."""
        if device.mode == MIG_MODE:
            chosen = mig.select_mig(device.mig_profiles, [pl for _, pl in usage.mig_taken], entry.usedmem)
            if chosen is None:
                raise UsageError(MIG_ALLOCATION_FAILED)
            profile, placement = chosen
            entry = ContainerDevice(entry.uuid, entry.type, profile.memory_mb, profile.core, entry.idx)
            usage.mig_taken.append((profile.name, placement))
            migs.append(MigAllocation(container_index, device_index, device.id, profile.name, placement))
        return super().add_usage(
            device, usage, entry, container_index=container_index, device_index=device_index, migs=migs
        )

    # -- annotations, admission ------------------------------------------------------------------

    def patch_annotations(
        self,
        per_container: PodSingleDevice,
        migs: Sequence[MigAllocation],
        *,
        node: str,
        now: int,
        pod: Obj | None = None,
    ) -> dict[str, str]:
        out = super().patch_annotations(per_container, migs, node=node, now=now, pod=pod)
        if out and migs:
            out[keys.VGPU_MIG_ALLOCATIONS] = encode_mig_allocations(migs)
        return out

    def mutate(self, container: dict[str, Any], pod: dict[str, Any]) -> bool:
        return admission.mutate_container(container, pod, self.cfg)
