"""§5.3 (per-device checks, exact reason strings), §5.4 (per-node evaluation) and the
chosen devices of every GPU policy (§5.6) on nodes with existing usage."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import container_requests, device, device_request
from tests.builders import pod as shared_pod
from vgpu_scheduler.devices.nvidia import NvidiaVendor
from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.engine import fit
from vgpu_scheduler.engine.fit import (
    DEVICE_TYPE_NOT_FOUND,
    NodeFailure,
    NodeFit,
    PodFitContext,
    fit_container,
    node_verdict,
)
from vgpu_scheduler.engine.nodeview import DeviceUsage, NodeView, vendor_positions
from vgpu_scheduler.engine.policy import sort_devices
from vgpu_scheduler.engine.scores import ScoringWeightsError, device_scores
from vgpu_scheduler.model import (
    NVIDIA,
    PERCENTAGE_UNSET,
    ContainerDevice,
    ContainerRequests,
    DeviceInfo,
)
from vgpu_scheduler.wire.reasons import gen_reason, parse_reason

NVIDIA_VENDOR = NvidiaVendor()
VENDORS = Vendors([NVIDIA_VENDOR])
evaluate_node = partial(fit.evaluate_node, vendors=VENDORS)
pod_fit_context = partial(fit.pod_fit_context, vendors=VENDORS)

# --------------------------------------------------------------------------------------------
# builders

# The shared builder with this module's defaults: pod "p" in "team-a", empty annotations.
pod = partial(shared_pod, namespace="team-a", annotations={})


def gpu(
    i: int,
    *,
    type_: str = "NVIDIA-A100",
    devmem: int = 16000,
    pairs: dict[str, int] | None = None,
    **fields: Any,
) -> DeviceInfo:
    """Device `GPU-<i>` at index i (16000 MiB); other keywords as for the shared `device`."""
    return device(f"GPU-{i}", index=i, type=type_, devmem=devmem, pair_scores=pairs, **fields)


def use(used: int = 0, mem: int = 0, cores: int = 0) -> DeviceUsage:
    return DeviceUsage(used=used, usedmem=mem, usedcores=cores)


def make_node(
    devs: list[DeviceInfo], usage: dict[int, DeviceUsage] | None = None, cordoned: tuple[str, ...] = ()
) -> NodeView:
    usage = usage or {}
    return NodeView(
        "node-1", devs, [usage.get(i, DeviceUsage()) for i in range(len(devs))], frozenset(cordoned)
    )


# One container's requests, 1000 MiB unless told otherwise.
creq = partial(container_requests, mem=1000)


@dataclass
class FakeQuota:
    """ResourceQuota stand-in: limits on the pod's total NVIDIA memory/cores in a namespace."""

    memory: int | None = None
    cores: int | None = None
    calls: list[tuple[str, str, int, int]] = field(default_factory=list)

    def fits(self, namespace: str, vendor: str, memory: int, cores: int) -> bool:
        self.calls.append((namespace, vendor, memory, cores))
        return (self.memory is None or memory <= self.memory) and (self.cores is None or cores <= self.cores)


def uuids(result: NodeFit | NodeFailure) -> list[list[str]]:
    assert isinstance(result, NodeFit), result
    return [[d.uuid for d in ctr] for ctr in result.devices[NVIDIA]]


def four(numa: tuple[int, ...] = (0, 0, 1, 1), **kw: Any) -> list[DeviceInfo]:
    return [gpu(i, numa=numa[i], **kw) for i in range(4)]


# --------------------------------------------------------------------------------------------
# reason string format


@pytest.mark.parametrize(
    ("counts", "total", "expected"),
    [
        pytest.param({"CardNotHealth": 1}, 1, "1/1 CardNotHealth", id="one reason"),
        pytest.param(
            {"ResourceQuotaNotFit": 3, "AllocatedCardsInsufficientRequest": 1},
            4,
            "1/4 AllocatedCardsInsufficientRequest, 3/4 ResourceQuotaNotFit",
            id="two reasons sorted by name",
        ),
        pytest.param(
            {"CardTypeMismatch": 2, "CardNotHealth": 10}, 12, "10/12 CardNotHealth, 2/12 CardTypeMismatch",
            id="sorted by name not by count",
        ),
        pytest.param({"CardUuidMismatch": 1, "CardCordoned": 1}, 2, "1/2 CardCordoned, 1/2 CardUuidMismatch",
                     id="equal counts sorted by name"),
        pytest.param({}, 3, "", id="no reasons"),
    ],
)
def test_gen_reason(counts: dict[str, int], total: int, expected: str) -> None:
    assert gen_reason(counts, total) == expected


def test_parse_reason() -> None:
    assert parse_reason("1/4 AllocatedCardsInsufficientRequest, 3/4 ResourceQuotaNotFit") == {
        "AllocatedCardsInsufficientRequest": 1,
        "ResourceQuotaNotFit": 3,
    }
    assert parse_reason("NodeInsufficientDevice") == {"NodeInsufficientDevice": 1}
    assert parse_reason("AddResourceUsage failed for device GPU-0: boom") == {}


# --------------------------------------------------------------------------------------------
# §5.3: one row per check (single container, default policy spread)


@pytest.mark.parametrize(
    ("devs", "usage", "creqs", "annotations", "cordoned", "expected"),
    [
        # 1. health
        pytest.param([gpu(0, health=False)], {}, creq(), {}, (), "1/1 CardNotHealth", id="unhealthy"),
        pytest.param(
            [gpu(0, health=False), gpu(1)],
            {},
            creq(2),
            {},
            (),
            "1/2 AllocatedCardsInsufficientRequest, 1/2 CardNotHealth",
            id="unhealthy, too few left",
        ),
        # 2. cordon (health is checked first)
        pytest.param([gpu(0), gpu(1)], {}, creq(), {}, ("GPU-0", "GPU-1"), "2/2 CardCordoned", id="cordoned"),
        pytest.param(
            [gpu(0, health=False), gpu(1)],
            {},
            creq(),
            {},
            ("GPU-0", "GPU-1"),
            "1/2 CardCordoned, 1/2 CardNotHealth",
            id="health checked before cordon",
        ),
        # 3. type filters and vgpu-mode
        pytest.param(
            [gpu(0), gpu(1)], {}, creq(), {"nvidia.com/use-gputype": "V100"}, (), "2/2 CardTypeMismatch",
            id="use-gputype mismatch",
        ),
        pytest.param(
            [gpu(0), gpu(1)], {}, creq(), {"nvidia.com/use-gputype": "V100,"}, (), "2/2 CardTypeMismatch",
            id="use-gputype with trailing comma",
        ),
        pytest.param(
            [gpu(0), gpu(1)], {}, creq(), {"nvidia.com/nouse-gputype": "a100"}, (), "2/2 CardTypeMismatch",
            id="nouse-gputype matches",
        ),
        pytest.param(
            [gpu(0), gpu(1)], {}, creq(), {"nvidia.com/vgpu-mode": "mps"}, (), "2/2 CardTypeMismatch",
            id="vgpu-mode mismatch",
        ),
        # 5. uuid filters
        pytest.param(
            [gpu(0), gpu(1)], {}, creq(), {"nvidia.com/use-gpuuuid": "GPU-9"}, (), "2/2 CardUuidMismatch",
            id="use-gpuuuid mismatch",
        ),
        pytest.param(
            [gpu(0), gpu(1)],
            {},
            creq(),
            {"nvidia.com/nouse-gpuuuid": "GPU-0, GPU-1"},
            (),
            "2/2 CardUuidMismatch",
            id="nouse-gpuuuid excludes both",
        ),
        pytest.param(
            [gpu(0)],
            {},
            creq(),
            {"nvidia.com/use-gpuuuid": "GPU-0", "nvidia.com/nouse-gpuuuid": "GPU-0"},
            (),
            "1/1 CardUuidMismatch",
            id="nouse-gpuuuid wins over use-gpuuuid",
        ),
        pytest.param(
            [gpu(0)],
            {},
            creq(),
            {"nvidia.com/use-gpuuuid": "gpu-0"},
            (),
            "1/1 CardUuidMismatch",
            id="use-gpuuuid is case-sensitive",
        ),  # exact match
        # type is checked before uuid
        pytest.param(
            [gpu(0)],
            {},
            creq(),
            {"nvidia.com/use-gputype": "V100", "nvidia.com/use-gpuuuid": "GPU-9"},
            (),
            "1/1 CardTypeMismatch",
            id="type checked before uuid",
        ),
        # 6. split count
        pytest.param([gpu(0, count=2)], {0: use(2)}, creq(), {}, (), "1/1 CardTimeSlicingExhausted",
                     id="time slices exhausted"),
        # 7. mutex: any existing user blocks the device
        pytest.param(
            [gpu(0), gpu(1)],
            {0: use(1), 1: use(1)},
            creq(),
            {"hami.io/gpu-scheduler-policy": "mutex"},
            (),
            "2/2 ExclusiveDeviceAllocateConflict",
            id="mutex with every device in use",
        ),
        pytest.param(
            [gpu(0), gpu(1)],
            {0: use(1), 1: use(1)},
            creq(),
            {"hami.io/gpu-scheduler-policy": "binpack,mutex"},
            (),
            "2/2 ExclusiveDeviceAllocateConflict",
            id="binpack,mutex with every device in use",
        ),
        # mutex is checked after the split count
        pytest.param(
            [gpu(0, count=1)],
            {0: use(1)},
            creq(),
            {"hami.io/gpu-scheduler-policy": "mutex"},
            (),
            "1/1 CardTimeSlicingExhausted",
            id="split count checked before mutex",
        ),
        # 11. memory
        pytest.param([gpu(0)], {}, creq(mem=20000), {}, (), "1/1 CardInsufficientMemory",
                     id="memory over device size"),
        pytest.param([gpu(0)], {0: use(1, 15500)}, creq(mem=1000), {}, (), "1/1 CardInsufficientMemory",
                     id="memory over what is left"),
        # percentage memory: 16000*50/100 = 8000 > 16000-8001
        pytest.param([gpu(0)], {0: use(1, 8001)}, creq(mem=0, pct=50), {}, (), "1/1 CardInsufficientMemory",
                     id="percentage memory over what is left"),
        # 12. cores (memory is checked first)
        pytest.param([gpu(0)], {0: use(1, 0, 60)}, creq(cores=50), {}, (), "1/1 CardInsufficientCore",
                     id="cores over what is left"),
        pytest.param([gpu(0)], {0: use(1, 15500, 60)}, creq(cores=50), {}, (), "1/1 CardInsufficientMemory",
                     id="memory checked before cores"),
        # 13. a whole-card request (cores 100) cannot share
        pytest.param(
            [gpu(0)], {0: use(1, 0, 0)}, creq(cores=100), {}, (), "1/1 ExclusiveDeviceAllocateConflict",
            id="whole card cannot share",
        ),
        # 8. cores > 100 are clamped to 100 (no failure) -> then the whole-card rule applies
        pytest.param(
            [gpu(0)], {0: use(1, 0, 0)}, creq(cores=150), {}, (), "1/1 ExclusiveDeviceAllocateConflict",
            id="cores over 100 clamped to a whole card",
        ),
        # 14. a full card cannot take a cores=0 task
        pytest.param([gpu(0)], {0: use(1, 0, 100)}, creq(cores=0), {}, (), "1/1 CardComputeUnitsExhausted",
                     id="full card refuses a cores=0 task"),
        pytest.param([gpu(0)], {0: use(1, 0, 100)}, creq(cores=10), {}, (), "1/1 CardInsufficientCore",
                     id="some cores on a full card"),
        # pre-check: more devices than the node has (not a MIG request)
        pytest.param([gpu(0), gpu(1)], {}, creq(3), {}, (), "NodeInsufficientDevice",
                     id="more devices than the node has"),
        pytest.param(
            [gpu(0), gpu(1, health=False), gpu(2)],
            {},
            creq(3),
            {},
            (),
            "1/3 CardNotHealth, 2/3 AllocatedCardsInsufficientRequest",
            id="some collected, not enough",
        ),
        pytest.param(
            four(),
            {3: use(1, 15500)},
            creq(4),
            {},
            (),
            "1/4 CardInsufficientMemory, 3/4 AllocatedCardsInsufficientRequest",
            id="one device lacks memory, four asked",
        ),
    ],
)
def test_fit_reasons(
    devs: list[DeviceInfo],
    usage: dict[int, DeviceUsage],
    creqs: ContainerRequests,
    annotations: dict[str, str],
    cordoned: tuple[str, ...],
    expected: str,
) -> None:
    assert evaluate_node([creqs], 0, make_node(devs, usage, cordoned),
        pod(annotations=annotations)) == NodeFailure(
        expected
    )


@pytest.mark.parametrize(
    ("devs", "usage", "creqs", "annotations", "cordoned", "expected"),
    [
        # cordon one device: the other is used
        pytest.param([gpu(0), gpu(1)], {}, creq(), {}, ("GPU-1",), [["GPU-0"]], id="cordoned device skipped"),
        # existing usage on a cordoned device does not matter
        pytest.param([gpu(0), gpu(1)], {1: use(1, 64, 50)}, creq(), {}, ("GPU-1",), [["GPU-0"]],
                     id="usage on a cordoned device ignored"),
        # type filters: case-insensitive substring, any member matches, blanks mean no constraint
        pytest.param(
            [gpu(0, type_="NVIDIA-V100"), gpu(1)],
            {},
            creq(),
            {"nvidia.com/use-gputype": "v100"},
            (),
            [["GPU-0"]],
            id="use-gputype case-insensitive substring",
        ),
        pytest.param(
            [gpu(0, type_="NVIDIA-V100"), gpu(1)],
            {},
            creq(),
            {"nvidia.com/use-gputype": "T4, V100"},
            (),
            [["GPU-0"]],
            id="use-gputype any member",
        ),
        pytest.param(
            [gpu(0, type_="NVIDIA-V100"), gpu(1)],
            {},
            creq(),
            {"nvidia.com/nouse-gputype": "A100"},
            (),
            [["GPU-0"]],
            id="nouse-gputype",
        ),
        pytest.param([gpu(0), gpu(1)], {}, creq(), {"nvidia.com/use-gputype": "   "}, (), [["GPU-1"]],
                     id="blank use-gputype is no constraint"),
        pytest.param([gpu(0), gpu(1)], {}, creq(), {"nvidia.com/nouse-gputype": ""}, (), [["GPU-1"]],
                     id="empty nouse-gputype is no constraint"),
        # vgpu-mode must contain the device mode
        pytest.param([gpu(0), gpu(1)], {}, creq(), {"nvidia.com/vgpu-mode": "hami-core,mps"}, (), [["GPU-1"]],
                     id="vgpu-mode list has hami-core"),
        # uuid filters: exact after trimming; use and nouse both apply; blank = no constraint
        pytest.param(
            [gpu(0), gpu(1)], {}, creq(), {"nvidia.com/use-gpuuuid": " GPU-0 , GPU-9"}, (), [["GPU-0"]],
            id="use-gpuuuid trimmed",
        ),
        pytest.param([gpu(0), gpu(1)], {}, creq(), {"nvidia.com/nouse-gpuuuid": "GPU-1"}, (), [["GPU-0"]],
                     id="nouse-gpuuuid"),
        pytest.param(
            [gpu(0), gpu(1)],
            {},
            creq(),
            {"nvidia.com/use-gpuuuid": "GPU-0,GPU-1", "nvidia.com/nouse-gpuuuid": "GPU-1"},
            (),
            [["GPU-0"]],
            id="use-gpuuuid and nouse-gpuuuid both apply",
        ),
        pytest.param([gpu(0), gpu(1)], {}, creq(), {"nvidia.com/use-gpuuuid": " "}, (), [["GPU-1"]],
                     id="blank use-gpuuuid is no constraint"),
        pytest.param(
            [gpu(0), gpu(1)], {1: use(1)}, creq(), {"hami.io/gpu-scheduler-policy": "mutex"}, (), [["GPU-0"]],
            id="mutex picks the idle device",
        ),
        # the whole-card rule needs devcore == 100
        pytest.param([gpu(0, devcore=200)], {0: use(1, 0, 0)}, creq(cores=100), {}, (), [["GPU-0"]],
                     id="whole-card rule needs devcore 100"),
        # devcore 0 never runs out of compute units
        pytest.param([gpu(0, devcore=0)], {0: use(1)}, creq(cores=0), {}, (), [["GPU-0"]],
                     id="devcore 0 never runs out"),
        # devices of other vendors on the node are ignored
        pytest.param([gpu(0, type_="MLU370"), gpu(1)], {}, creq(), {}, (), [["GPU-1"]],
                     id="other vendors ignored"),
    ],
)
def test_fit_choices(
    devs: list[DeviceInfo],
    usage: dict[int, DeviceUsage],
    creqs: ContainerRequests,
    annotations: dict[str, str],
    cordoned: tuple[str, ...],
    expected: list[list[str]],
) -> None:
    assert uuids(evaluate_node([creqs], 0, make_node(devs, usage, cordoned),
        pod(annotations=annotations))) == expected


def test_allocated_entry_values() -> None:
    # percentage memory uses integer division of this device's memory; cores > 100 are clamped.
    node = make_node([gpu(0, devmem=10001)])
    result = evaluate_node([creq(mem=0, pct=50, cores=150)], 0, node, pod())
    assert isinstance(result, NodeFit)
    assert result.devices == {NVIDIA: [[ContainerDevice("GPU-0", NVIDIA, 5000, 100, 0)]]}
    assert result.mig == []


def test_other_vendor_devices_do_not_count_in_total() -> None:
    node = make_node([gpu(0), gpu(1, type_="MLU370"), gpu(2)])
    assert evaluate_node([creq(mem=20000)], 0, node, pod()) == NodeFailure("2/2 CardInsufficientMemory")
    assert evaluate_node([creq(3)], 0, node, pod()) == NodeFailure("NodeInsufficientDevice")


def test_fit_request_rejects_other_request_type() -> None:
    node = make_node([gpu(0)])
    req = device_request(mem=100, type="OtherType")
    result = NVIDIA_VENDOR.fit(
        req, node.devices, node.usage, [0], ctx=PodFitContext(), cordoned=frozenset(), allocated=()
    )
    assert (result.ok, result.reason) == (False, "1/1 CardTypeMismatch")


def test_unknown_vendor_in_request() -> None:
    req = container_requests(mem=100, type="MLU")
    assert evaluate_node([req], 0, make_node([gpu(0)]), pod()) == NodeFailure(DEVICE_TYPE_NOT_FOUND)


# --------------------------------------------------------------------------------------------
# NUMA binding (step 4)


def test_numa_bind_groups() -> None:
    # Sorted (numa asc, score desc): GPU-0, GPU-1, GPU-3, GPU-2. From the end: GPU-2 (numa 1)
    # collected, GPU-3 lacks memory, GPU-1 opens numa 0: the one numa-1 device counts NumaNotFit.
    devs, usage = four(), {3: use(1, 15500)}
    bind = {"nvidia.com/numa-bind": "true"}
    assert uuids(evaluate_node([creq(2)], 0, make_node(devs, usage), pod(annotations=bind))) == [["GPU-1",
        "GPU-0"]]
    assert evaluate_node([creq(3)], 0, make_node(devs, usage), pod(annotations=bind)) == NodeFailure(
        "1/4 CardInsufficientMemory, 1/4 NumaNotFit, 2/4 AllocatedCardsInsufficientRequest"
    )


@pytest.mark.parametrize("value", ["false", "0", "yes", ""])
def test_numa_bind_off(value: str) -> None:
    # Spread without binding: GPU-3 (busy) sorts first, then GPU-0, GPU-1 (numa 0), GPU-2 (numa 1).
    node = make_node(four(), {3: use(1, 15500)})
    result = evaluate_node([creq(2)], 0, node, pod(annotations={"nvidia.com/numa-bind": value}))
    assert uuids(result) == [["GPU-2", "GPU-1"]]


def test_numa_bind_with_topology_never_counts_numa_not_fit() -> None:
    # HAMi only counts NumaNotFit when Nums was decremented, which topology-aware never does.
    node = make_node(four(), {3: use(1, 15500)})
    annos = {"nvidia.com/numa-bind": "true", "hami.io/gpu-scheduler-policy": "topology-aware"}
    assert evaluate_node([creq(3)], 0, node, pod(annotations=annos)) == NodeFailure(
        "1/4 CardInsufficientMemory, 2/4 AllocatedCardsInsufficientRequest"
    )


# --------------------------------------------------------------------------------------------
# ResourceQuota (step 10)


def test_quota_spec_example() -> None:
    quota = FakeQuota(memory=1000)
    node = make_node(four())
    result = evaluate_node([creq(2, mem=1000)], 0, node, pod(), quota=quota)
    assert result == NodeFailure("1/4 AllocatedCardsInsufficientRequest, 3/4 ResourceQuotaNotFit")
    # whole-pod hypothetical usage: this device, then collected + this device
    assert quota.calls[:2] == [("team-a", NVIDIA, 1000, 0), ("team-a", NVIDIA, 2000, 0)]


def test_quota_is_checked_before_memory() -> None:
    node = make_node([gpu(0)])
    result = evaluate_node([creq(mem=20000)], 0, node, pod(), quota=FakeQuota(memory=1000))
    assert result == NodeFailure("1/1 ResourceQuotaNotFit")


def test_quota_counts_earlier_containers_and_cores() -> None:
    node = make_node([gpu(0), gpu(1)])
    quota = FakeQuota(cores=50)
    result = evaluate_node([creq(cores=30), creq(cores=30)], 0, node, pod(), quota=quota)
    assert result == NodeFailure("2/2 ResourceQuotaNotFit")
    assert quota.calls[-1] == ("team-a", NVIDIA, 2000, 60)


def test_quota_sequential_init_containers_count_peak() -> None:
    # Two init containers on the same GPU: 1500 each counts max(1500, 1500), not 3000.
    node = make_node([gpu(0), gpu(1)])
    quota = FakeQuota(memory=2000)
    result = evaluate_node([creq(mem=1500), creq(mem=1500), creq(mem=500)], 2, node, pod(), quota=quota)
    assert uuids(result) == [["GPU-1"], ["GPU-1"], ["GPU-1"]]


def test_quota_app_list_indices_follow_hami() -> None:
    # HAMi passes the app-container list (which starts at index 0) to the quota check, so with one
    # init container the first app container is collapsed as if it were an init container:
    # max(1000, 1000) = 1000 <= 1500 on the one GPU, where a plain sum would be 2000.
    node = make_node([gpu(0)])
    result = evaluate_node([{}, creq(mem=1000), creq(mem=1000)], 1, node, pod(), quota=FakeQuota(memory=1500))
    assert uuids(result) == [[], ["GPU-0"], ["GPU-0"]]


# --------------------------------------------------------------------------------------------
# §5.6 end to end: which devices each policy takes on a node with existing usage
#
# GPU-0 (numa 0): 1 task, 4000 MiB, 30 cores -> score ~6.5
# GPU-1 (numa 0): idle                       -> 0
# GPU-2 (numa 1): 2 tasks, 8000 MiB, 60 cores -> ~13
# GPU-3 (numa 1): idle                       -> 0

BUSY = {0: use(1, 4000, 30), 2: use(2, 8000, 60)}


@pytest.mark.parametrize(
    ("policy", "numa_bind", "nums", "expected"),
    [
        pytest.param("binpack", False, 1, ["GPU-2"], id="binpack, 1 gpu"),
        pytest.param("binpack", False, 2, ["GPU-2", "GPU-0"], id="binpack, 2 gpus"),
        pytest.param("binpack", False, 3, ["GPU-2", "GPU-0", "GPU-3"], id="binpack, 3 gpus"),
        pytest.param("spread", False, 1, ["GPU-3"], id="spread, 1 gpu"),
        pytest.param("spread", False, 2, ["GPU-3", "GPU-1"], id="spread, 2 gpus"),
        pytest.param("pack", False, 1, ["GPU-3"], id="pack (unknown is spread), 1 gpu"),  # unknown -> spread
        pytest.param("mutex", False, 1, ["GPU-3"], id="mutex, 1 gpu"),
        pytest.param("mutex", False, 2, ["GPU-3", "GPU-1"], id="mutex, 2 gpus"),
        pytest.param("binpack,numa", False, 1, ["GPU-2"], id="binpack,numa, 1 gpu"),
        pytest.param("numa,binpack", False, 2, ["GPU-2", "GPU-3"], id="numa,binpack, 2 gpus"),
        pytest.param("numa", False, 2, ["GPU-3", "GPU-2"], id="numa, 2 gpus"),
        pytest.param("spread,numa", False, 1, ["GPU-3"], id="spread,numa, 1 gpu"),
        pytest.param("binpack", True, 2, ["GPU-0", "GPU-1"], id="binpack, 2 gpus, numa-bind"),
        pytest.param("spread", True, 2, ["GPU-3", "GPU-2"], id="spread, 2 gpus, numa-bind"),
        pytest.param("binpack,numa", True, 2, ["GPU-2", "GPU-3"], id="binpack,numa, 2 gpus, numa-bind"),
    ],
)
def test_policy_choice_with_usage(policy: str, numa_bind: bool, nums: int, expected: list[str]) -> None:
    annos = {"hami.io/gpu-scheduler-policy": policy}
    if numa_bind:
        annos["nvidia.com/numa-bind"] = "true"
    assert uuids(evaluate_node([creq(nums)], 0, make_node(four(), BUSY),
        pod(annotations=annos))) == [expected]


def test_mutex_not_enough_idle() -> None:
    result = evaluate_node(
        [creq(3)], 0, make_node(four(), BUSY), pod(annotations={"hami.io/gpu-scheduler-policy": "mutex"})
    )
    assert result == NodeFailure("2/4 AllocatedCardsInsufficientRequest, 2/4 ExclusiveDeviceAllocateConflict")


@pytest.mark.parametrize("policy", ["spread", "binpack", "mutex", "binpack,numa"])
def test_ties_take_last_inventory_device(policy: str) -> None:
    node = make_node(four(numa=(0, 0, 0, 0)))
    assert uuids(evaluate_node([creq()], 0, node,
        pod(annotations={"hami.io/gpu-scheduler-policy": policy}))) == [
        ["GPU-3"]
    ]


def test_default_policy_argument() -> None:
    node = make_node(four(), BUSY)
    assert uuids(evaluate_node([creq()], 0, node, pod(), default_policy="binpack")) == [["GPU-2"]]
    # the pod annotation wins over the default
    annos = {"hami.io/gpu-scheduler-policy": "spread"}
    assert uuids(evaluate_node([creq()], 0, node, pod(annotations=annos),
        default_policy="binpack")) == [["GPU-3"]]


def test_request_terms_count_only_for_devices_typed_like_the_request() -> None:
    # Typed "NVIDIA": 10*(1/10 + 5000/10000) = 6 vs 10*(1/10 + 5000/20000) = 3.5 -> binpack GPU-0.
    devs = [gpu(0, type_=NVIDIA, devmem=10000), gpu(1, type_=NVIDIA, devmem=20000)]
    binpack = pod(annotations={"hami.io/gpu-scheduler-policy": "binpack"})
    assert uuids(evaluate_node([creq(mem=5000)], 0, make_node(devs), binpack)) == [["GPU-0"]]
    # Model-typed devices: both score 0, the tie takes the last device.
    devs = [gpu(0, devmem=10000), gpu(1, devmem=20000)]
    assert uuids(evaluate_node([creq(mem=5000)], 0, make_node(devs), binpack)) == [["GPU-1"]]


def test_scoring_weights_change_the_order() -> None:
    # default: GPU-0 10*0.3 = 3, GPU-1 10*(0.1 + 0.75) = 8.5; slots only: 3 vs 1.
    devs, usage = [gpu(0), gpu(1)], {0: use(3), 1: use(1, 12000)}
    annos = {"hami.io/gpu-scheduler-policy": "binpack"}
    assert uuids(evaluate_node([creq()], 0, make_node(devs, usage), pod(annotations=annos))) == [["GPU-1"]]
    annos["hami.io/device-scoring-weights"] = "slot=1,core=0,memory=0"
    assert uuids(evaluate_node([creq()], 0, make_node(devs, usage), pod(annotations=annos))) == [["GPU-0"]]
    assert uuids(evaluate_node([creq()], 0, make_node(devs, usage), pod(annotations=annos), weights=(1, 1,
        1))) == [
        ["GPU-1"]
    ]


def test_invalid_scoring_weights_raise() -> None:
    with pytest.raises(ScoringWeightsError):
        evaluate_node([creq()], 0, make_node([gpu(0)]),
            pod(annotations={"hami.io/device-scoring-weights": "slot=1"}))


# --------------------------------------------------------------------------------------------
# topology-aware


def quad_scores(
    i: int, n: int, good: set[frozenset[int]], good_score: int = 100, bad: int = 10
) -> dict[str, int]:
    return {f"GPU-{j}": good_score if frozenset((i, j)) in good else bad for j in range(n) if j != i}


def four_linked(pairs: set[frozenset[int]]) -> list[DeviceInfo]:
    return [gpu(i, pairs=quad_scores(i, 4, pairs)) for i in range(4)]


TOPO = {"hami.io/gpu-scheduler-policy": "topology-aware"}
PAIRS = {frozenset((0, 1)), frozenset((2, 3))}


@pytest.mark.parametrize(
    ("pairs", "usage", "nums", "policy", "expected"),
    [
        # all collected [3,2,1,0]; first best pair in collection order is (GPU-3, GPU-2)
        pytest.param(PAIRS, {}, 2, "topology-aware", ["GPU-3", "GPU-2"], id="best pair in collection order"),
        pytest.param(PAIRS, {}, 2, "spread,topology-aware", ["GPU-3", "GPU-2"],
                     id="spread,topology-aware as topology-aware"),
        # GPU-3 lacks memory: collected [2,1,0] -> (GPU-1, GPU-0) is the linked pair
        pytest.param(PAIRS, {3: use(1, 15500)}, 2, "topology-aware", ["GPU-1", "GPU-0"],
                     id="full device: the other linked pair"),
        # Nums 1: the worst-connected card; GPU-2 links only at 10 to everyone
        pytest.param(
            {frozenset((0, 1)), frozenset((0, 3)), frozenset((1, 3))}, {}, 1, "topology-aware", ["GPU-2"],
            id="one gpu: the worst-connected",
        ),
        # all equal: the first collected (GPU-3) wins
        pytest.param(PAIRS, {}, 1, "topology-aware", ["GPU-3"], id="one gpu, all equal: first collected"),
        # exactly Nums collected: taken as collected
        pytest.param(PAIRS, {0: use(1, 15500), 1: use(1, 15500)}, 2, "topology-aware", ["GPU-3", "GPU-2"],
                     id="exactly nums collected: as collected"),
    ],
)
def test_topology_aware_four_gpus(
    pairs: set[frozenset[int]], usage: dict[int, DeviceUsage], nums: int, policy: str, expected: list[str]
) -> None:
    node = make_node(four_linked(pairs), usage)
    result = evaluate_node([creq(nums)], 0, node, pod(annotations={"hami.io/gpu-scheduler-policy": policy}))
    assert uuids(result) == [expected]


def test_topology_aware_not_enough() -> None:
    node = make_node(four_linked(PAIRS)[:2], {1: use(1, 15500)})
    assert evaluate_node([creq(2)], 0, node, pod(annotations=TOPO)) == NodeFailure(
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory"
    )


def eight_gpus() -> list[DeviceInfo]:
    quads = [set(range(4)), set(range(4, 8))]
    good = {frozenset((a, b)) for q in quads for a in q for b in q if a != b}
    return [gpu(i, pairs=quad_scores(i, 8, good, 100, 20)) for i in range(8)]


@pytest.mark.parametrize(
    ("nums", "expected"),
    [
        # GPU-5 is full, so only the first quad is complete: 6 links x 100 beats any mix (360).
        pytest.param(4, ["GPU-3", "GPU-2", "GPU-1", "GPU-0"], id="4 gpus: the complete quad"),
        pytest.param(2, ["GPU-7", "GPU-6"], id="2 gpus: a pair of the free quad"),
        pytest.param(
            1, ["GPU-7"],
            id="1 gpu: ties take the first collected",
        ),  # totals: GPU-7/6/4 = 2*100 + 4*20 = 280 ties; GPU-0..3 = 300 + 3*20 = 360
    ],
)
def test_topology_aware_eight_gpus_with_usage(nums: int, expected: list[str]) -> None:
    node = make_node(eight_gpus(), {5: use(3, 15900, 50)})
    assert uuids(evaluate_node([creq(nums)], 0, node, pod(annotations=TOPO))) == [expected]


# --------------------------------------------------------------------------------------------
# §5.4 per-node evaluation


def test_init_containers_each_on_a_fresh_copy() -> None:
    node = make_node([gpu(0)])
    result = evaluate_node([creq(mem=10000), creq(mem=10000), creq(mem=10000)], 2, node, pod())
    assert isinstance(result, NodeFit)
    assert result.devices == {NVIDIA: [[ContainerDevice("GPU-0", NVIDIA, 10000, 0, 0)]] * 3}


def test_app_containers_share_one_copy() -> None:
    node = make_node([gpu(0)])
    assert evaluate_node([creq(mem=10000), creq(mem=10000)], 0, node, pod()) == NodeFailure(
        "1/1 CardInsufficientMemory"
    )
    assert node.usage[0] == DeviceUsage()  # never mutated


def test_init_container_failure_reason() -> None:
    node = make_node([gpu(0)])
    assert evaluate_node([creq(mem=20000), creq()], 1, node, pod()) == NodeFailure(
        "1/1 CardInsufficientMemory"
    )


def test_allocation_list_init_first_padded_per_vendor() -> None:
    node = make_node([gpu(0), gpu(1)])
    reqs: list[ContainerRequests] = [creq(), {}, {}, creq(), {}]
    assert uuids(evaluate_node(reqs, 2, node, pod())) == [["GPU-1"], [], [], ["GPU-1"], []]


def test_pod_without_requests() -> None:
    assert evaluate_node([{}, {}], 0, make_node([gpu(0)]), pod()) == NodeFit({}, [])


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param("spread", [["GPU-1"], ["GPU-0"]], id="spread: second container on the other device"),
        pytest.param("binpack", [["GPU-1"], ["GPU-1"]], id="binpack: both on one device"),
    ],
)
def test_usage_updated_between_app_containers(policy: str, expected: list[list[str]]) -> None:
    node = make_node([gpu(0), gpu(1)])
    result = evaluate_node([creq(), creq()], 0, node,
        pod(annotations={"hami.io/gpu-scheduler-policy": policy}))
    assert uuids(result) == expected


def test_cores_used_by_earlier_app_container() -> None:
    node = make_node([gpu(0), gpu(1)])
    result = evaluate_node(
        [creq(cores=60),
            creq(cores=60)], 0, node, pod(annotations={"hami.io/gpu-scheduler-policy": "binpack"})
    )
    assert uuids(result) == [["GPU-1"], ["GPU-0"]]


def test_init_usage_does_not_reach_app_containers() -> None:
    node = make_node([gpu(0), gpu(1)])
    result = evaluate_node([creq(mem=15000), creq(mem=15000)], 1, node, pod())
    assert uuids(result) == [["GPU-1"], ["GPU-1"]]


def test_sorted_order_carries_over_between_containers() -> None:
    # HAMi sorts the node copy in place, so ties keep the previous container's order:
    # c3 sorts [GPU-2, GPU-0, GPU-1] into [GPU-2, GPU-1, GPU-0] and takes GPU-0 then GPU-1
    # (from inventory order it would take GPU-0 then GPU-2).
    node = make_node([gpu(0), gpu(1), gpu(2)])
    result = evaluate_node([creq(), creq(), creq(2)], 0, node, pod())
    assert uuids(result) == [["GPU-2"], ["GPU-1"], ["GPU-0", "GPU-1"]]


def test_context_reuse_across_nodes() -> None:
    ctx = pod_fit_context(pod(annotations={"hami.io/gpu-scheduler-policy": "binpack"}), n_init=0)
    assert ctx.policy == "binpack" and ctx.namespace == "team-a"
    busy = make_node(four(), BUSY)
    idle = make_node(four())
    assert uuids(evaluate_node([creq()], 0, busy, ctx=ctx)) == [["GPU-2"]]
    assert uuids(evaluate_node([creq()], 0, idle, ctx=ctx)) == [["GPU-3"]]


def test_fit_container_updates_the_given_copy() -> None:
    node = make_node([gpu(0), gpu(1)], {0: use(1, 1000, 10)})
    ctx = pod_fit_context(pod(annotations={"hami.io/gpu-scheduler-policy": "binpack"}))
    result, migs = fit_container(device_request(mem=2000, cores=20), node, ctx)
    assert result.ok and result.positions == [0] and migs == []
    assert result.devices == [ContainerDevice("GPU-0", NVIDIA, 2000, 20, 0)]
    assert node.usage[0] == DeviceUsage(2, 3000, 30)
    failed, _ = fit_container(device_request(3, mem=2000, cores=20), node, ctx)
    assert (failed.ok, failed.reason) == (False, "NodeInsufficientDevice")


# --------------------------------------------------------------------------------------------
# The order-independent fast path must agree with HAMi's ordered Fit.


@st.composite
def random_node(draw: st.DrawFn) -> NodeView:
    n = draw(st.integers(1, 6))
    devs: list[DeviceInfo] = []
    usage: dict[int, DeviceUsage] = {}
    for i in range(n):
        devmem = draw(st.sampled_from([1000, 4000, 10001]))
        devcore = draw(st.sampled_from([0, 100, 100, 200]))
        d = gpu(
            i,
            numa=draw(st.integers(0, 1)),
            type_=draw(st.sampled_from(["NVIDIA-A100", "NVIDIA-V100", NVIDIA, "MLU370"])),
            count=draw(st.integers(1, 4)),
            devmem=devmem,
            devcore=devcore,
            health=draw(st.booleans() | st.just(True)),
        )
        devs.append(d)
        usage[i] = use(
            draw(st.integers(0, 4)), draw(st.integers(0, devmem)), draw(st.integers(0, max(devcore, 1)))
        )
    cordoned = tuple(d.id for d in devs if draw(st.integers(0, 5)) == 0)
    return make_node(devs, usage, cordoned)


requests_st = st.builds(
    creq,
    nums=st.integers(1, 4),
    mem=st.sampled_from([0, 500, 3000]),
    pct=st.sampled_from([PERCENTAGE_UNSET, 0, 30, 100]),
    cores=st.sampled_from([0, 30, 100, 150]),
)

annotations_st = st.fixed_dictionaries(
    {
        "hami.io/gpu-scheduler-policy": st.sampled_from(
            ["spread", "binpack", "mutex", "binpack,numa", "binpack,mutex"]
        )
    },
    optional={
        "nvidia.com/use-gputype": st.sampled_from(["V100", "a100,", " "]),
        "nvidia.com/nouse-gpuuuid": st.sampled_from(["GPU-0", "GPU-1, GPU-2"]),
    },
)


@settings(max_examples=300, deadline=None)
@given(random_node(), requests_st, annotations_st)
def test_fast_path_matches_ordered_fit(
    node: NodeView, creqs: ContainerRequests, annotations: dict[str, str]
) -> None:
    ctx = pod_fit_context(pod(annotations=annotations))
    req = creqs[NVIDIA]
    positions = vendor_positions(node.devices, NVIDIA)
    sub = [node.devices[p] for p in positions]
    us = [node.usage[p] for p in positions]
    values = device_scores(
        sub, [u.used for u in us], [u.usedcores for u in us], [u.usedmem for u in us],
        requests=creqs, weights=ctx.weights,
    )
    scores = [0.0] * len(node.devices)
    for p, v in zip(positions, values, strict=True):
        scores[p] = v
    order = sort_devices(positions, scores, node.devices, node.usage, policy=ctx.policy,
        numa_bind=ctx.numa_bind)
    ordered = NVIDIA_VENDOR.fit(req, node.devices, node.usage, order, ctx=ctx, cordoned=node.cordoned,
        allocated=())

    result = evaluate_node([creqs], 0, node, ctx=ctx)
    if req.nums > len(positions):
        assert result == NodeFailure("NodeInsufficientDevice")
    elif ordered.ok:
        assert isinstance(result, NodeFit)
        assert result.devices[NVIDIA] == [ordered.devices]
    else:
        assert result == NodeFailure(ordered.reason)
    assert node_verdict([creqs], 0, node, ctx) == (result if isinstance(result, NodeFailure) else None)


@settings(max_examples=100, deadline=None)
@given(
    random_node(),
    st.lists(requests_st | st.just({}), min_size=1, max_size=3),
    st.integers(0, 2),
    annotations_st,
)
def test_node_verdict_matches_evaluate_node(
    node: NodeView, reqs: list[ContainerRequests], n_init: int, annotations: dict[str, str]
) -> None:
    ctx = pod_fit_context(pod(annotations=annotations), n_init=n_init, quota=FakeQuota(memory=5000))
    result = evaluate_node(reqs, n_init, node, ctx=ctx)
    assert node_verdict(reqs, n_init, node, ctx) == (result if isinstance(result, NodeFailure) else None)


def test_fit_container_other_request_type_is_a_type_mismatch() -> None:
    node = make_node([gpu(0), gpu(1)])
    other = device_request(mem=100, type="OtherType")
    result = NVIDIA_VENDOR.fit(
        other, node.devices, node.usage, [0, 1], ctx=PodFitContext(), cordoned=frozenset(), allocated=()
    )
    assert (result.ok, result.reason) == (False, "2/2 CardTypeMismatch")
    # A request of a vendor that is not registered fails the node as HAMi's fitInDevices does.
    failed, _ = fit_container(other, node, pod_fit_context(pod()))
    assert (failed.ok, failed.reason) == (False, DEVICE_TYPE_NOT_FOUND)
