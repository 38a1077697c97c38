"""A failed bind in the simulator is retried with kube-scheduler's backoff, as on the live path: a
contended lock is retried until it expires, without waiting for a cluster event (issue "Safe under
a burst", item 5). A lock that cannot be parsed never expires: HAMi fails the bind and its failure
path clears such a legacy (comma-free) value, so the retry binds; ours takes it over in the first
bind (issue 27)."""

from datetime import UTC, datetime
from typing import Any

from tests.builders import container, pod
from vgpu_scheduler.cluster.nodelock import format_lock
from vgpu_scheduler.simulate.loop import simulate
from vgpu_scheduler.simulate.retries import PARK_AFTER_ERRORS
from vgpu_scheduler.standin.embedded.fleet import fleet
from vgpu_scheduler.standin.embedded.runtime import DEFAULT_EPOCH
from vgpu_scheduler.wire import keys


def _pod(name: str, node: str = "") -> dict[str, Any]:
    """A one-GPU pod, bound to `node` when one is given."""
    limits = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}
    ctr = container("c", image="x", limits=limits)
    return pod(name, typed=True, containers=[ctr], node_name=node or None)


def _locked_fleet(value: str) -> list[dict[str, Any]]:
    nodes = fleet(1, 1)
    nodes[0]["metadata"]["annotations"][keys.NODE_LOCK] = value
    return nodes


async def test_a_lock_that_cannot_be_parsed_is_taken_over_by_the_first_bind() -> None:
    result = await simulate(_locked_fleet("lock"), [_pod("p")])
    (entry,) = result.report["pods"]
    assert entry["node"] == "gpu-node-00"
    assert result.cycles == 1
    assert int(entry["annotations"][keys.BIND_TIME]) == DEFAULT_EPOCH


async def test_a_contended_lock_is_retried_with_backoff_until_it_expires() -> None:
    taken = datetime.fromtimestamp(DEFAULT_EPOCH, tz=UTC)
    nodes = _locked_fleet(format_lock(taken, "default", "holder"))
    result = await simulate(nodes, [_pod("p")], existing=[_pod("holder", node="gpu-node-00")])
    got = {p["name"]: p for p in result.report["pods"]}
    assert got["p"]["node"] == "gpu-node-00"
    # kube-scheduler retries at 1, 3, 7, 15, 25, ... 295 s (backoff 1, 2, 4, 8, then 10 s) and binds at
    # 305 s, the first retry after the 5-minute timeout. The simulation tries PARK_AFTER_ERRORS
    # times, parks the pod until the lock's deadline, then resumes that schedule where it would be.
    assert int(got["p"]["annotations"][keys.BIND_TIME]) == DEFAULT_EPOCH + 305
    assert result.cycles == PARK_AFTER_ERRORS + 1
    assert result.report["summary"]["end"] == "done"
