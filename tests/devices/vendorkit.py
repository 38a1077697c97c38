"""Scaffolding the vendor tests share: case ids, fit runs, the registration loop on a
MemoryCluster, the simulated device plugin, metrics text and the `simulate` CLI end to end.

Each vendor's test module keeps its own vectors and expectations; only the way a test builds and
runs its inputs lives here (import it as `from tests.devices.vendorkit import ...`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tests.builders import pod
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.registration import PassReport, RegistrationLoop
from vgpu_scheduler.cluster.store import Store
from vgpu_scheduler.configfile import DeviceConfigError, parse_device_config
from vgpu_scheduler.devices.protocol import FitResult, Health, Vendor, Vendors
from vgpu_scheduler.engine.fit import pod_fit_context
from vgpu_scheduler.engine.quota import QuotaManager
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import ContainerDeviceRequest, ContainerDevices, DeviceInfo, DeviceUsage
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.server.metrics import exposition, metrics_registry
from vgpu_scheduler.server.webhook import AdmissionResponse, review_pod
from vgpu_scheduler.simulate.cli import main as simulate_main
from vgpu_scheduler.standin.embedded.deviceplugin import SimDevicePlugin
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire import keys

Obj = dict[str, Any]

NOW = datetime(2026, 11, 29, 21, 3, 30, tzinfo=UTC)
"""The registration clock of the vendor tests."""


# --------------------------------------------------------------------------------------------
# Case ids


def readable(value: object) -> str | None:
    """Case ids for parametrized tables (no pytest-made-up ids): objects as compact JSON-ish text."""
    if isinstance(value, (dict, list, tuple)) or dataclasses.is_dataclass(value):
        text = json.dumps(value, default=repr, separators=(",", ":"), sort_keys=True)
        return text if len(text) <= 60 else text[:57] + "..."
    return None


# --------------------------------------------------------------------------------------------
# Configuration and health


def config_error_key(yaml: str) -> str:
    """The key a device configuration's VendorConfigError names."""
    with pytest.raises(DeviceConfigError) as err:
        parse_device_config(yaml, "f.yaml")
    return err.value.key


HANDSHAKE_HEALTH = [
    # (handshake annotation, allocatable count, healthy, need_update, write_requesting) at NOW
    ("Requesting_2025-01-07 00:00:00", None, False, False, False),  # expired, no devices: gone
    ("Requesting_2025-01-07 00:00:00", "4", True, False, False),  # expired but still allocatable
    ("Requesting_2026-11-29 21:03:00", None, True, False, False),  # within 60 s
    ("Unknown", None, True, True, True),
    (None, None, True, True, True),
]
"""HAMi's handshake health vectors (Test_CheckHealth), shared by the vendors with the generic handshake."""


def health_flags(health: Health) -> tuple[bool, bool, bool]:
    return health.healthy, health.need_update, health.write_requesting


# --------------------------------------------------------------------------------------------
# Fit


@dataclasses.dataclass
class Dev:
    """One device of a fit vector, in the field names of HAMi's device_test.go tables."""

    id: str
    count: int = 100
    totalmem: int = 128
    totalcore: int = 100
    used: int = 0
    usedmem: int = 0
    usedcores: int = 0
    health: bool = True
    index: int = 0


def device_infos(devs: Iterable[Dev], type_: str) -> list[DeviceInfo]:
    return [DeviceInfo(id=d.id, index=d.index, count=d.count, devmem=d.totalmem, devcore=d.totalcore,
                       type=type_, health=d.health) for d in devs]


def usages(devs: Iterable[Dev]) -> list[DeviceUsage]:
    return [DeviceUsage(d.used, d.usedmem, d.usedcores) for d in devs]


FitVector = tuple[list[Dev], ContainerDeviceRequest, dict[str, str], bool, list[str], str]
"""(devices, request, pod annotations, fits, chosen ids, reason)."""


def hami_fit_vectors(vendor_type: str, *, use_uuid: str, nouse_uuid: str) -> list[FitVector]:
    """HAMi's TestDevices_Fit vectors, the same for every vendor with the common ladder: requests
    of `vendor_type`, uuid selection under the vendor's `use_uuid`/`nouse_uuid` annotations."""

    def req(nums: int, mem: int, pct: int, cores: int) -> ContainerDeviceRequest:
        return ContainerDeviceRequest(nums, vendor_type, mem, pct, cores)

    return [
        ([Dev("dev-0"), Dev("dev-1")], req(1, 64, 0, 50), {}, True, ["dev-1"], ""),
        ([Dev("dev-0")], req(1, 512, 0, 50), {}, False, [], "1/1 CardInsufficientMemory"),
        ([Dev("dev-0", totalmem=1024, usedcores=100)], req(1, 512, 0, 50), {}, False, [],
         "1/1 CardInsufficientCore"),
        ([Dev("dev-0")], ContainerDeviceRequest(1, "OtherType", 512, 0, 50), {}, False, [],
         "1/1 CardTypeMismatch"),
        ([Dev("dev-1", totalmem=1280)], req(2, 512, 0, 50), {use_uuid: "dev-0"}, False, [],
         "1/1 CardUuidMismatch"),
        ([Dev("dev-0", totalmem=1280)], req(2, 512, 0, 50), {nouse_uuid: "dev-0"}, False, [],
         "1/1 CardUuidMismatch"),
        ([Dev("dev-0", totalmem=1280, used=100)], req(1, 512, 0, 50), {}, False, [],
         "1/1 CardTimeSlicingExhausted"),
        ([Dev("dev-0", totalmem=1280)], req(1, 512, 0, 120), {}, True, ["dev-0"], ""),  # cores clamped
        ([Dev("dev-0", totalmem=1280, used=20)], req(1, 512, 0, 100), {}, False, [],
         "1/1 ExclusiveDeviceAllocateConflict"),
        ([Dev("dev-0", totalmem=1280, used=20, usedcores=100)], req(1, 512, 0, 0), {}, False, [],
         "1/1 CardComputeUnitsExhausted"),
        ([Dev("dev-0", totalmem=1280, used=20, usedcores=10)], req(2, 512, 0, 20), {}, False, [],
         "1/1 AllocatedCardsInsufficientRequest"),
        ([Dev("dev-0", totalmem=1280, used=20, usedcores=10)], req(1, 0, 10, 20), {}, True, ["dev-0"], ""),
        ([Dev("dev-0", count=2, used=1)], req(1, 64, 0, 50), {keys.GPU_SCHEDULER_POLICY: "mutex"}, False, [],
         "1/1 ExclusiveDeviceAllocateConflict"),
        ([Dev("dev-0", totalmem=1280), Dev("dev-1", totalmem=1280, index=1)], req(3, 512, 0, 20), {}, False,
         [], "2/2 AllocatedCardsInsufficientRequest"),
        ([Dev("dev-0", totalmem=1280, health=False)], req(1, 512, 0, 50), {}, False, [], "1/1 CardNotHealth"),
    ]


class Fitted(NamedTuple):
    result: FitResult
    quick: str | None
    """The order-free verdict over the same devices (in `quick_order` when given)."""


def fit_both(
    vendor: Vendor,
    request: ContainerDeviceRequest,
    devices: Sequence[DeviceInfo],
    usage: Sequence[DeviceUsage],
    *,
    annos: dict[str, str] | None = None,
    order: Sequence[int] | None = None,
    quick_order: Sequence[int] | None = None,
    allocated: Sequence[ContainerDevices] = (),
    quota: QuotaManager | None = None,
    namespace: str = "default",
) -> Fitted:
    """`fit` over `order` (default: inventory order) for a pod in `namespace` with `annos`, and
    `quick_verdict` over `quick_order` (default: the same order)."""
    the_pod = pod(namespace=namespace, annotations=annos or {})
    ctx = pod_fit_context(the_pod, vendors=Vendors([vendor]), quota=quota)
    positions = list(range(len(devices))) if order is None else list(order)
    none = frozenset[str]()
    result = vendor.fit(request, devices, usage, positions, ctx=ctx, cordoned=none, allocated=allocated)
    quick_positions = positions if quick_order is None else list(quick_order)
    quick = vendor.quick_verdict(request, devices, usage, quick_positions, ctx=ctx, cordoned=none)
    # The engine's per-pod form of the same verdict must agree with it on every case.
    judge = vendor.quick_judge(request, ctx)
    assert (None if judge is None else judge(devices, usage, quick_positions, none)) == quick
    return Fitted(result, quick)


def fit_checked(
    vendor: Vendor,
    request: ContainerDeviceRequest,
    devices: Sequence[DeviceInfo],
    usage: Sequence[DeviceUsage],
    *,
    exact: bool = False,
    annos: dict[str, str] | None = None,
    **fit_args: Any,
) -> FitResult:
    """`fit_both`'s ordered result, once the order-free verdict agreed with it where it answers
    (`exact`: it always answers)."""
    result, quick = fit_both(vendor, request, devices, usage, annos=annos, **fit_args)
    if exact:
        assert quick == result.reason
    else:
        assert quick is None or quick == result.reason
    return result


# --------------------------------------------------------------------------------------------
# The registration loop on an in-memory cluster


class Registration(NamedTuple):
    cluster: MemoryCluster
    store: Store
    state: SchedulerState
    loop: RegistrationLoop
    clock: list[datetime]
    """The loop's clock: set `clock[0]` to move time on."""

    def add(self, *nodes: Obj) -> None:
        """Create `nodes` in the cluster and show them to the loop's store."""
        for obj in nodes:
            self.store.upsert(self.cluster.create("nodes", obj))

    def refresh(self, name: str) -> None:
        """Show the loop the node as the cluster has it now."""
        self.store.upsert(self.cluster.get("nodes", name))

    def node_annotations(self, name: str) -> dict[str, str]:
        annotations: dict[str, str] = self.cluster.get("nodes", name)["metadata"]["annotations"]
        return annotations

    async def run(self) -> PassReport:
        """One registration pass, and the handshake writes it asked for."""
        report = await self.loop.run_pass()
        await self.loop.flush_writes()
        return report


@asynccontextmanager
async def registration(vendors: Vendors, now: datetime) -> AsyncIterator[Registration]:
    """A registration loop over a fresh MemoryCluster and an empty store, stopped on exit."""
    cluster = MemoryCluster(seed=1)
    client = KubeClient(MemoryTransport(cluster))
    store = Store()
    state = SchedulerState(vendors)
    clock = [now]
    loop = RegistrationLoop(client, state, store, now=lambda: clock[0], tz=UTC)
    try:
        yield Registration(cluster, store, state, loop, clock)
    finally:
        await loop.stop()
        await client.close()


# --------------------------------------------------------------------------------------------
# The simulated device plugin


class Admitted(NamedTuple):
    phase: str
    """The plugin's verdict."""
    pod: Obj
    """The pod as the cluster has it afterwards."""
    node_annotations: dict[str, str]

    @property
    def annotations(self) -> dict[str, str]:
        annotations: dict[str, str] = self.pod["metadata"]["annotations"]
        return annotations


SHARED_LOCK: Mapping[str, str] = {keys.NODE_LOCK: "2026-01-01T00:00:00Z,default,p"}
"""Node "n1" as the bind of pod "p" leaves it: holding the shared node lock."""


async def admit_bound_pod(
    vendors: Vendors, the_pod: Obj, *, node_annotations: Mapping[str, str] | None = SHARED_LOCK
) -> Admitted:
    """Bind `the_pod` (in "default") to node "n1", annotated with `node_annotations` (None: none),
    and let the simulated device plugin admit it."""
    cluster = MemoryCluster(seed=1)
    metadata: Obj = {"name": "n1"}
    if node_annotations is not None:
        metadata["annotations"] = dict(node_annotations)
    cluster.create("nodes", {"metadata": metadata})
    name = the_pod["metadata"]["name"]
    cluster.create("pods", the_pod)
    cluster.bind("default", name, "n1")
    plugin = SimDevicePlugin(KubeClient(MemoryTransport(cluster)), vendors)
    result = await plugin.admit(cluster.get("pods", name, "default"))
    node_after = cluster.get("nodes", "n1")["metadata"].get("annotations") or {}
    return Admitted(result.phase, cluster.get("pods", name, "default"), node_after)


# --------------------------------------------------------------------------------------------
# The webhook


OUR_SCHEDULER = dataclasses.replace(SchedulerOptions(), scheduler_name="hami-scheduler")
"""Webhook options naming the scheduler pods are put under."""


def review(the_pod: Obj, vendors: Vendors) -> AdmissionResponse:
    """The webhook's answer for `the_pod` with `OUR_SCHEDULER`."""
    return review_pod(the_pod, OUR_SCHEDULER, vendors)


def patch_ops(response: AdmissionResponse) -> dict[tuple[str, str], Any]:
    """The answer's JSON patch as {(op, path): value}."""
    return {(op["op"], op["path"]): op.get("value") for op in response.patch}


def privileged(container: Obj) -> Obj:
    """A pod of `container`, made privileged."""
    return pod(containers=[{**container, "securityContext": {"privileged": True}}])


# --------------------------------------------------------------------------------------------
# Metrics and the simulate CLI


def metrics_text(state: SchedulerState, *, legacy: bool = False) -> str:
    return exposition(metrics_registry(state, legacy=legacy)).decode()


def simulate_report(
    tmp_path: Path, *, nodes: Sequence[Obj], pods: Sequence[str], config: str, flags: Sequence[str] = ()
) -> dict[str, Obj]:
    """`vgpu-scheduler simulate` over a snapshot of `nodes`, the `pods` YAML documents and the device
    config text (and further `flags`); the report's pods by name."""
    snapshot = tmp_path / "snap.json"
    items = [{"apiVersion": "v1", "kind": "Node", **n} for n in nodes]
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    pods_file = tmp_path / "pods.yaml"
    pods_file.write_text("---\n".join(pods))
    config_file = tmp_path / "device-config.yaml"
    config_file.write_text(config)
    out = tmp_path / "r.json"
    args = ["--snapshot", str(snapshot), "--pods", str(pods_file), "--device-config-file", str(config_file),
            "--output", str(out), *flags]
    assert simulate_main(args) == 0
    return {p["name"]: p for p in json.loads(out.read_text())["pods"]}
