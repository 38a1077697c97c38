"""Every per-device rule of §5.3 on the ordered Fit path, not only on the fast path.

A plain single-container pod is decided by `simple_outcomes`, which never runs `fit_request`. The
ordered walk runs for numa-bind, topology-aware, quota-checked and MIG pods; each rule there is a
separate line of code, so each is checked here through each of those triggers (one device, so the
order cannot matter and the reason is the rule's own).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from tests.builders import device, pod
from tests.builders import quota as quota_object
from vgpu_scheduler.devices.nvidia import NvidiaVendor
from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.engine.fit import NodeFailure, NodeFit, evaluate_node, pod_fit_context
from vgpu_scheduler.engine.nodeview import DeviceUsage, NodeView
from vgpu_scheduler.engine.quota import QuotaManager, VendorQuotaNames
from vgpu_scheduler.model import NVIDIA, PERCENTAGE_UNSET, ContainerDeviceRequest, DeviceInfo
from vgpu_scheduler.wire import keys

VENDORS = Vendors([NvidiaVendor()])
NAMESPACE = "team"


def _quota_with_room() -> QuotaManager:
    """A quota that limits the namespace (so Fit consults it) but never binds in these cases."""
    manager = QuotaManager({NVIDIA: VendorQuotaNames("nvidia.com/gpumem", "nvidia.com/gpucores")})
    manager.upsert_quota(quota_object({"limits.nvidia.com/gpumem": "1000000"}, namespace=NAMESPACE))
    return manager


# Each trigger sends the pod down `fit_request` instead of the order-free fast path.
TRIGGERS: dict[str, tuple[Mapping[str, str], bool]] = {
    "numa-bind": ({keys.NUMA_BIND: "true"}, False),
    "topology-aware": ({keys.GPU_SCHEDULER_POLICY: "topology-aware"}, False),
    "quota": ({}, True),
}


@dataclass(frozen=True)
class Case:
    dev: DeviceInfo
    usage: DeviceUsage
    cores: int = 0
    mem: int = 1000
    annotations: Mapping[str, str] = field(default_factory=dict)
    cordoned: frozenset[str] = frozenset()


A100 = device("GPU-0", devmem=16000)
RULES: dict[str, tuple[Case, str]] = {
    "full card, no cores asked -> compute units exhausted": (
        Case(A100, DeviceUsage(used=1, usedmem=0, usedcores=100), cores=0),
        "1/1 CardComputeUnitsExhausted",
    ),
    "full card, some cores asked -> insufficient core": (
        Case(A100, DeviceUsage(used=1, usedmem=0, usedcores=100), cores=10),
        "1/1 CardInsufficientCore",
    ),
    "unhealthy": (Case(device("GPU-0", health=False), DeviceUsage()), "1/1 CardNotHealth"),
    "cordoned": (Case(A100, DeviceUsage(), cordoned=frozenset({"GPU-0"})), "1/1 CardCordoned"),
    "type filter": (
        Case(A100, DeviceUsage(), annotations={keys.USE_GPUTYPE: "V100"}),
        "1/1 CardTypeMismatch",
    ),
    "uuid filter": (
        Case(A100, DeviceUsage(), annotations={keys.NOUSE_GPUUUID: "GPU-0"}),
        "1/1 CardUuidMismatch",
    ),
    "split count used up": (
        Case(device("GPU-0", count=2), DeviceUsage(used=2)),
        "1/1 CardTimeSlicingExhausted",
    ),
    "memory": (Case(A100, DeviceUsage(used=1, usedmem=15500)), "1/1 CardInsufficientMemory"),
    "whole card asked on a shared card": (
        Case(A100, DeviceUsage(used=1), cores=100),
        "1/1 ExclusiveDeviceAllocateConflict",
    ),
}


def _node(case: Case) -> NodeView:
    return NodeView("node-1", [case.dev], [case.usage.copy()], case.cordoned)


@pytest.mark.parametrize("trigger", list(TRIGGERS))
@pytest.mark.parametrize(("case", "reason"), list(RULES.values()), ids=list(RULES))
def test_each_rule_fails_the_ordered_fit_with_its_reason(trigger: str, case: Case, reason: str) -> None:
    extra, with_quota = TRIGGERS[trigger]
    the_pod = pod(namespace=NAMESPACE, annotations={**case.annotations, **extra})
    ctx = pod_fit_context(
        the_pod, quota=_quota_with_room() if with_quota else None, n_init=0, vendors=VENDORS
    )
    request = {NVIDIA: ContainerDeviceRequest(1, NVIDIA, case.mem, PERCENTAGE_UNSET, case.cores)}
    assert evaluate_node([request], 0, _node(case), ctx=ctx) == NodeFailure(reason)


@pytest.mark.parametrize(("case", "reason"), list(RULES.values()), ids=list(RULES))
def test_each_rule_fails_fit_request_itself(case: Case, reason: str) -> None:
    ctx = pod_fit_context(
        pod(namespace=NAMESPACE, annotations=dict(case.annotations)), n_init=0, vendors=VENDORS
    )
    request = ContainerDeviceRequest(1, NVIDIA, case.mem, PERCENTAGE_UNSET, case.cores)
    node = _node(case)
    result = VENDORS[NVIDIA].fit(
        request, node.devices, node.usage, [0], ctx=ctx, cordoned=node.cordoned, allocated=()
    )
    assert (result.ok, result.reason) == (False, reason)


@pytest.mark.parametrize("trigger", list(TRIGGERS))
def test_a_card_advertising_no_cores_is_never_compute_exhausted(trigger: str) -> None:
    # Rule 14 needs devcore != 0: a card that reports 0 cores takes any cores=0 task.
    extra, with_quota = TRIGGERS[trigger]
    ctx = pod_fit_context(
        pod(namespace=NAMESPACE, annotations=dict(extra)),
        quota=_quota_with_room() if with_quota else None,
        n_init=0,
        vendors=VENDORS,
    )
    node = NodeView("node-1", [device("GPU-0", devcore=0)], [DeviceUsage(used=1)])
    request = {NVIDIA: ContainerDeviceRequest(1, NVIDIA, 1000, PERCENTAGE_UNSET, 0)}
    result = evaluate_node([request], 0, node, ctx=ctx)
    assert isinstance(result, NodeFit)
    assert [d.uuid for d in result.devices[NVIDIA][0]] == ["GPU-0"]
