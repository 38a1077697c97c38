"""What a scrape reads from the scheduler state, as plain data: `take_snapshot` runs on the event
loop (references to the immutable pod allocations, copies of the usage counters: milliseconds) and
`snapshot_rows` turns it into rows in the renderer's worker thread, so the state is only ever read
on the loop thread."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vgpu_scheduler.engine.podinfo import PodAllocation
    from vgpu_scheduler.engine.quota import QuotaEntry
    from vgpu_scheduler.engine.state import SchedulerState
    from vgpu_scheduler.model import DeviceInfo


AMD = "AMD"


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
    devices, by_id = _device_rows(raw)
    device_of: dict[str, tuple[int, int, bool]] = {}  # uuid -> (index, devcore, AMD), first node wins
    for d in devices:
        device_of.setdefault(d.uuid, (d.index, d.devcore, d.amd))
    migs: list[MigRow] = []
    containers: list[ContainerRow] = []
    for alloc in raw.pods:
        migs.extend(_mig_rows(alloc, by_id.get(alloc.node, {})))
        containers.extend(_container_rows(alloc, device_of))
    quotas = tuple(QuotaRow(e.namespace, e.resource, e.used, e.limit) for e in raw.quotas)
    return MetricsSnapshot(tuple(devices), tuple(migs), tuple(containers), quotas)


def _device_rows(raw: StateSnapshot) -> tuple[list[DeviceRow], dict[str, dict[str, tuple[int, int]]]]:
    """One row per registered device, and node -> device id -> (index, devcore) for the MIG rows."""
    devices: list[DeviceRow] = []
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
    return devices, by_id


def _mig_rows(alloc: PodAllocation, node_ids: Mapping[str, tuple[int, int]]) -> Iterator[MigRow]:
    """The pod's realized MIG instances on registered devices of its node."""
    for m in alloc.mig:
        found = node_ids.get(m.gpu_uuid)
        if found is None or not m.mig_uuid or m.gpu_instance_id is None or m.compute_instance_id is None:
            continue  # not on a registered device, or not realized by the device plugin yet
        yield MigRow(
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


def _container_rows(
    alloc: PodAllocation, device_of: Mapping[str, tuple[int, int, bool]]
) -> Iterator[ContainerRow]:
    """One row per device entry of each container (entries without a UUID skipped, as HAMi)."""
    for per_container in alloc.devices.values():
        for ci, entries in enumerate(per_container):
            for entry in entries:
                if not entry.uuid:
                    continue  # HAMi skips (and warns about) entries without a UUID
                # HAMi finds the device by UUID among the registered ones and normalizes by
                # its type and core capacity (an unknown device keeps the raw value).
                _, devcore, amd = device_of.get(entry.uuid, (0, 0, False))
                yield ContainerRow(
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
