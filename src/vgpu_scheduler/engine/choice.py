"""Shared by every decision path: the node policy, the filter patch annotations, and turning the
chosen node's fit into a `Chosen`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.engine.fit import NodeFit
from vgpu_scheduler.engine.ledger import DeviceLedger
from vgpu_scheduler.engine.nodeview import NodeView
from vgpu_scheduler.engine.outcome import Chosen, Decision, Error
from vgpu_scheduler.model import MigAllocation, PodDevices
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.allocation import AllocationError

NODE_UNREGISTERED = "node unregistered"
SPREAD = "spread"
BINPACK = "binpack"


def node_policy(annotations: Mapping[str, str], default: str) -> str:
    """`hami.io/node-scheduler-policy` else the default; anything but spread acts as binpack."""
    policy = annotations.get(keys.NODE_SCHEDULER_POLICY, default)
    return SPREAD if policy == SPREAD else BINPACK


def filter_annotations(
    node: str,
    devices: PodDevices,
    mig: Sequence[MigAllocation],
    now: int,
    *,
    vendors: Vendors,
    pod: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The §4.1 filter patch annotations (the caller adds label hami.io/vgpu-node = node): node
    and time, then each vendor's PatchAnnotations of its part of the allocation (of `pod`)."""
    out = {keys.VGPU_NODE: node, keys.VGPU_TIME: str(now)}
    for key, per_container in devices.items():
        vendor = vendors.get(key)
        if vendor is None:
            raise AllocationError(f"no allocation annotation keys for vendor {key!r}")
        out.update(vendor.patch_annotations(per_container, mig, node=node, now=now, pod=pod))
    return out


def _vendor_score(fit: NodeFit, view: NodeView, vendors: Vendors, policy: str) -> float:
    """Σ ScoreNode of the vendors in the allocation (HAMi `OverrideScore`), on the usage before the pod."""
    total = 0.0
    for key, per_container in fit.devices.items():
        vendor = vendors.get(key)
        if vendor is not None and vendor.scores_nodes:
            total += vendor.score_node(
                per_container, annotations=view.annotations, devices=view.devices, previous=view.usage,
                policy=policy,
            )
    return total


def _best(scores: Mapping[str, float], descending: bool) -> str:
    if descending:
        return min(scores, key=lambda n: (-scores[n], n))
    return min(scores, key=lambda n: (scores[n], n))


def _chosen(
    node: str,
    fit: NodeFit,
    score: float,
    scores: dict[str, float],
    *,
    failed: dict[str, str],
    now: int,
    vendors: Vendors,
    pod: Mapping[str, Any] | None = None,
    ledger: DeviceLedger | None = None,
) -> Decision:
    try:
        annotations = filter_annotations(node, fit.devices, fit.mig, now, vendors=vendors, pod=pod)
    except AllocationError as exc:
        return Error(str(exc))
    finally:
        if ledger is not None:
            # A vendor's PatchAnnotations may note state a later fit on this node reads (e.g. the
            # QoS a device is switching to): cached outcomes of the node must not outlive it.
            ledger.touch(node)
    return Chosen(
        node=node,
        devices=fit.devices,
        mig=tuple(fit.mig),
        annotations=annotations,
        labels={keys.VGPU_NODE: node},
        score=score,
        scores=scores,
        failed=failed,
    )
