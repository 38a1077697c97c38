"""A bound pod's annotations are the ledger's truth; a reservation confirms only with its own
annotations (issue "Safe under a burst", item 1)."""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

import pytest

from tests.builders import container, device, grant, pod, pod_devices
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, filter_annotations
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import PodDevices
from vgpu_scheduler.wire import keys

VENDORS = build()
_gpu = partial(device, devmem=8000)


def _state() -> SchedulerState:
    s = SchedulerState(VENDORS)
    s.set_node_devices("n1", [_gpu("GPU-A0"), _gpu("GPU-A1")])
    s.set_node_devices("n2", [_gpu("GPU-B0"), _gpu("GPU-B1")])
    return s


def _devices(uuid: str, mem: int) -> PodDevices:
    return pod_devices([grant(uuid, usedmem=mem, usedcores=0)])


def _chosen(node: str, uuid: str, mem: int, now: int = 200) -> Chosen:
    devices = _devices(uuid, mem)
    annotations = filter_annotations(node, devices, (), now, vendors=VENDORS)
    return Chosen(node, devices, (), annotations, {keys.VGPU_NODE: node}, 0.0)


def _pod(annotations: dict[str, str] | None = None, node_name: str = "") -> dict[str, Any]:
    """Pending pod `team/p` (uid `uid-p`), bound to `node_name` when one is given."""
    return pod("p", namespace="team", uid="uid-p", annotations=dict(annotations or {}),
               containers=[container("app")], node_name=node_name or None, phase="Pending")


def _used(s: SchedulerState) -> dict[str, int]:
    out: dict[str, int] = {}
    for node in ("n1", "n2"):
        view = s.ledger.view(node)
        assert view is not None
        for dev, usage in zip(view.devices, view.usage, strict=True):
            if usage.usedmem:
                out[dev.id] = usage.usedmem
    return out


def test_a_bound_pod_wins_over_a_newer_reservation_elsewhere() -> None:
    s = _state()
    older = _chosen("n1", "GPU-A0", 1000, now=100)
    s.reserve(_pod(), older)
    s.reserve(_pod(), _chosen("n2", "GPU-B0", 2000, now=200))  # re-filtered: reservation on n2
    assert _used(s) == {"GPU-B0": 2000}
    # The old bind had already won the race: the pod is bound to n1 with n1's allocation.
    s.on_pod(_pod(older.annotations, node_name="n1"))
    assert _used(s) == {"GPU-A0": 1000}
    assert not s.is_reserved("uid-p")


def test_an_unbound_pod_with_a_superseded_patch_keeps_the_reservation() -> None:
    s = _state()
    superseded = _chosen("n1", "GPU-A0", 1000, now=200)
    s.reserve(_pod(), _chosen("n2", "GPU-B0", 2000, now=200))  # same second, other node
    s.on_pod(_pod(superseded.annotations))
    assert _used(s) == {"GPU-B0": 2000}
    assert s.is_reserved("uid-p")


@pytest.mark.parametrize("bound", [False, True], ids=["unbound", "bound"])
def test_annotations_equal_to_the_reservation_confirm_it(bound: bool) -> None:
    s = _state()
    decision = _chosen("n2", "GPU-B1", 500)
    s.reserve(_pod(), decision)
    s.on_pod(_pod(copy.deepcopy(decision.annotations), node_name="n2" if bound else ""))
    assert _used(s) == {"GPU-B1": 500}
    assert not s.is_reserved("uid-p")


def test_a_pod_bound_without_our_annotations_drops_the_reservation() -> None:
    s = _state()
    s.reserve(_pod(), _chosen("n1", "GPU-A0", 1000))
    s.on_pod(_pod(node_name="n2"))  # bound by someone else, no allocation of ours
    assert _used(s) == {}
