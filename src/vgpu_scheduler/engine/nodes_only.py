"""The side-effect-free decision for `Nodes` requests (template nodes, §5.7 "Simulation path"):
inventory read from each node object, no usage, no ledger, nothing recorded."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from vgpu_scheduler.devices.protocol import QuotaCheck, Vendors
from vgpu_scheduler.engine.choice import (
    BINPACK,
    NODE_UNREGISTERED,
    _best,
    _chosen,
    _vendor_score,
    node_policy,
)
from vgpu_scheduler.engine.fit import NodeFit, evaluate_node, pod_fit_context
from vgpu_scheduler.engine.nodeview import DeviceUsage, NodeView
from vgpu_scheduler.engine.outcome import Decision, Error, NoFit, NoRequest
from vgpu_scheduler.engine.podinfo import init_container_count, pod_annotations, pod_key
from vgpu_scheduler.engine.requests import pod_has_device_requests, pod_requests
from vgpu_scheduler.engine.scores import ScoringWeightsError
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import InventoryError, decode_cordon

log = logging.getLogger("vgpu_scheduler.engine.decide")  # the logger name these warnings always had


def node_view_from_object(node: Mapping[str, Any], vendors: Vendors) -> NodeView | None:
    """Inventory read straight from a Node object (every vendor's GetNodeDevices, in registration
    order), with no usage; None when no vendor finds a device."""
    meta = node.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = str(meta.get("name") or "")
    raw = meta.get("annotations")
    annotations = {k: v for k, v in raw.items() if isinstance(v, str)} if isinstance(raw, Mapping) else {}
    devices = []
    for vendor in vendors:
        try:
            devices.extend(vendor.node_devices(node))
        except InventoryError as exc:
            if any(k in annotations for k in vendor.inventory_keys):  # else: no such devices, normal
                log.warning("node %s: unusable %s inventory: %s", name, vendor.key, exc)
    if not devices:
        return None
    cordoned = decode_cordon(annotations.get(keys.DEVICE_CORDON))
    return NodeView(name, devices, [DeviceUsage() for _ in devices], cordoned, annotations)


def decide_on_nodes(
    pod: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]],
    vendors: Vendors,
    *,
    default_node_policy: str,
    default_gpu_policy: str,
    now: int,
    quota: QuotaCheck | None = None,
) -> Decision:
    """The side-effect-free path for `Nodes` requests (template nodes, §5.7 "Simulation path").

    Inventory comes from each node object, usage is empty, nothing is recorded. Every node is
    evaluated (HAMi fits all candidates) so the answer lists every node that does not fit. With no
    usage every node's default score is 0, so without vendor node scores the first fitting node by
    name is chosen.
    """
    requests = pod_requests(pod, vendors)
    if not pod_has_device_requests(requests):
        return NoRequest()
    _, _, name = pod_key(pod)
    n_init = init_container_count(pod)
    try:
        ctx = pod_fit_context(
            pod, vendors=vendors, default_policy=default_gpu_policy, quota=quota, n_init=n_init
        )
    except ScoringWeightsError as exc:
        return Error(f"calcScore failed {exc} for pod {name}")
    failed: dict[str, str] = {}
    views: dict[str, NodeView] = {}
    for node in nodes:
        view = node_view_from_object(node, vendors)
        meta = node.get("metadata")
        node_name = str(meta.get("name") or "") if isinstance(meta, Mapping) else ""
        if view is None:
            failed[node_name] = NODE_UNREGISTERED
        elif node_name not in views:
            views[node_name] = view
    fits: dict[str, NodeFit] = {}
    scores: dict[str, float] = {}
    policy = node_policy(pod_annotations(pod), default_node_policy)
    for node_name in sorted(views):
        result = evaluate_node(requests, n_init, views[node_name], pod, ctx=ctx)
        if isinstance(result, NodeFit):
            fits[node_name] = result
            scores[node_name] = _vendor_score(result, views[node_name], vendors, policy)
        else:
            failed[node_name] = result.reason
    if not fits:
        return NoFit(failed)
    best = _best(scores, policy == BINPACK)  # equal scores: the first name wins the tie
    return _chosen(best, fits[best], scores[best], scores, failed=failed, now=now, vendors=vendors,
                   pod=pod)
