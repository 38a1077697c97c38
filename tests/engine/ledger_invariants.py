"""The ledger invariants the state-machine tests check after every step (shared by them)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence

from vgpu_scheduler.engine.ledger import DeviceLedger
from vgpu_scheduler.engine.nodeview import NodeView
from vgpu_scheduler.engine.podinfo import PodAllocation
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import DeviceInfo

_NONE = NodeView("", [], [])


def assert_never_overcommitted(state: SchedulerState, nodes: Iterable[str]) -> None:
    """No device of any node has more shares, memory or cores taken than it has, nor fewer than 0."""
    for node in nodes:
        view = state.ledger.view(node)
        assert view is not None
        for dev, use in zip(view.devices, view.usage, strict=True):
            assert 0 <= use.used <= dev.count, (node, dev.id, use)
            assert 0 <= use.usedmem <= dev.devmem, (node, dev.id, use)
            assert 0 <= use.usedcores <= dev.devcore, (node, dev.id, use)


def assert_incremental_equals_rebuilt(
    state: SchedulerState,
    registered: Mapping[str, tuple[Sequence[DeviceInfo], frozenset[str]]],
    expected: Mapping[str, PodAllocation],
) -> None:
    """The counted pods are exactly `expected`, and a ledger rebuilt from scratch from the registered
    inventories and those pods equals the incrementally maintained one."""
    assert {a.uid: a for a in state.pods()} == expected
    fresh = DeviceLedger()
    for node, (devices, cordoned) in registered.items():
        fresh.set_node_devices(node, copy.deepcopy(list(devices)), cordoned)
    fresh.rebuild_from(expected.values())
    assert fresh.snapshot() == state.ledger.snapshot()
    assert_group_index(state.ledger)


def assert_group_index(ledger: DeviceLedger) -> None:
    """`by_score_with` lists the nodes of `nodes_with` in `by_score` order, for each device type
    (a type names itself: `has_vendor`) and each pair of types, both ways; `classes_with` their
    bound classes."""
    types = sorted({d.type for name in ledger.node_names() for d in (ledger.view(name) or _NONE).devices})
    for vendors in [(t,) for t in types] + [(a, b) for a in types for b in types if a < b]:
        among = ledger.nodes_with(vendors)
        for descending in (False, True):
            want = [pair for pair in ledger.by_score(descending) if pair[1] in among]
            assert list(ledger.by_score_with(vendors, descending)) == want, (vendors, descending)
        # `classes_with`: the bound classes of those nodes, each with one of them.
        classes = ledger.classes_with(vendors)
        want_classes = {k for k, members in ledger.bound_classes().items() if members & among}
        assert {k for k, _ in classes} == want_classes and len(classes) == len(want_classes)
        assert all(node in among and node in ledger.bound_classes()[k] for k, node in classes)
