"""§5.8: the quota check inside Fit counts init containers at their peak, not their sum.

Init containers run one after another, so on one device they never hold more than the largest of
them. Fit asks the quota for the whole pod's hypothetical usage with init containers collapsed:
the third init container of three on one GPU must see max(a, b, c), never a + b + c. (With two
init containers the list handed to Fit holds one entry, where sum and max agree; three tell them
apart.)
"""

from __future__ import annotations

import pytest

from tests.builders import device, pod
from tests.builders import quota as quota_object
from vgpu_scheduler.devices.nvidia import NvidiaVendor
from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.engine.fit import NodeFailure, NodeFit, evaluate_node, pod_fit_context
from vgpu_scheduler.engine.nodeview import DeviceUsage, NodeView
from vgpu_scheduler.engine.quota import QuotaManager, VendorQuotaNames
from vgpu_scheduler.model import NVIDIA, PERCENTAGE_UNSET, ContainerDeviceRequest, ContainerRequests

VENDORS = Vendors([NvidiaVendor()])
NAMESPACE = "team"
MEM = "nvidia.com/gpumem"
CORES = "nvidia.com/gpucores"


def _manager(hard: dict[str, str]) -> QuotaManager:
    manager = QuotaManager({NVIDIA: VendorQuotaNames(MEM, CORES)})
    manager.upsert_quota(quota_object(hard, namespace=NAMESPACE))
    return manager


def _one_gpu() -> NodeView:
    return NodeView("node-1", [device("GPU-0", devmem=24576)], [DeviceUsage()])


def _ask(mem: int, cores: int = 0) -> ContainerRequests:
    return {NVIDIA: ContainerDeviceRequest(1, NVIDIA, mem, PERCENTAGE_UNSET, cores)}


@pytest.mark.parametrize(
    ("hard", "ask"),
    [
        pytest.param({f"limits.{MEM}": "5000"}, _ask(3000), id="memory: peak 3000 under 5000, sum 9000 over"),
        pytest.param(
            {f"limits.{CORES}": "50"}, _ask(100, cores=30), id="cores: peak 30 under 50, sum 90 over"
        ),
    ],
)
def test_three_init_containers_on_one_gpu_count_their_peak(
    hard: dict[str, str], ask: ContainerRequests
) -> None:
    quota = _manager(hard)
    ctx = pod_fit_context(pod(namespace=NAMESPACE), quota=quota, n_init=3, vendors=VENDORS)
    result = evaluate_node([ask, ask, ask, {}], 3, _one_gpu(), ctx=ctx)
    assert isinstance(result, NodeFit), result
    assert [[d.uuid for d in c] for c in result.devices[NVIDIA]] == [["GPU-0"], ["GPU-0"], ["GPU-0"], []]


def test_the_peak_itself_is_still_held_to_the_limit() -> None:
    # The same pod against a limit below the peak fails on the quota: the collapse is a max, not 0.
    quota = _manager({f"limits.{MEM}": "2999"})
    ctx = pod_fit_context(pod(namespace=NAMESPACE), quota=quota, n_init=3, vendors=VENDORS)
    result = evaluate_node([_ask(3000), _ask(3000), _ask(3000), {}], 3, _one_gpu(), ctx=ctx)
    assert result == NodeFailure("1/1 ResourceQuotaNotFit")
