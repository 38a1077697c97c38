"""DELETE and pods/binding: the writes that move an object through its life rather than replace
its content.

Both have rules of their own that the scheduler's correctness depends on: graceful deletion of
bound pods (deletionTimestamp first, removal later) and finalizers, UID/resourceVersion
preconditions, and a binding that fails on a pod already bound or being deleted (the errors of
fixtures pods-binding.{pod-not-found,wrong-uid,already-bound}.response.json).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.api import Obj, ResourceType
from vgpu_scheduler.cluster.errors import ApiError, details
from vgpu_scheduler.standin.memory import statuses
from vgpu_scheduler.standin.memory.codec import Stored, copy, rfc3339
from vgpu_scheduler.standin.memory.store import ObjectStore
from vgpu_scheduler.wire import objects


def delete(
    store: ObjectStore,
    rt: ResourceType,
    *,
    namespace: str | None,
    name: str,
    grace: Any,
    preconditions: Mapping[str, Any],
) -> Stored:
    """Delete, or start a graceful delete; returns the object's last state. Pods bound to a node
    get a deletionTimestamp and stay (no kubelet will confirm) unless the grace period is 0."""
    st = store.storage(rt)
    current = store.get(rt, namespace, name)
    cur = current.decoded()
    meta = cur["metadata"]
    key = api.key_of(cur)
    for field_name, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        want = preconditions.get(field_name)
        if want and want != meta.get(field_name):
            raise statuses.conflict(
                rt,
                name,
                statuses.storage_error(
                    rt,
                    key,
                    f"Precondition failed: {label} in precondition: {want}, {label} in object meta: "
                    f"{meta.get(field_name)}",
                ),
            )
    if grace is not None and (not isinstance(grace, int) or isinstance(grace, bool)):
        raise ApiError.make(400, "gracePeriodSeconds must be an integer")
    finalizers = bool(meta.get("finalizers"))
    if rt is not api.PODS:
        if not finalizers:
            return store.commit(st, key, None, "DELETED")
        if meta.get("deletionTimestamp"):
            return current
        new = copy(cur)
        new["metadata"]["deletionTimestamp"] = rfc3339(store.clock())
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        return store.commit(st, key, api.order_object(new), "MODIFIED")
    # Pods: graceful deletion (registry/generic BeforeDelete + pod CheckGracefulDelete).
    default_grace = objects.spec(cur).get("terminationGracePeriodSeconds", 30)
    period = grace if grace is not None else default_grace
    if not objects.node_name(cur) or objects.phase(cur) in ("Succeeded", "Failed"):
        period = 0
    period = max(int(period), 0)
    new = copy(cur)
    nmeta = new["metadata"]
    if meta.get("deletionTimestamp"):
        old_period = meta.get("deletionGracePeriodSeconds")
        if not old_period:
            return store.commit(st, key, None, "DELETED") if not finalizers else current
        if period > 0 and period >= old_period:
            return current  # only a shorter grace period may be asked for
    elif isinstance(nmeta.get("generation"), int):
        nmeta["generation"] += 1
    nmeta["deletionTimestamp"] = rfc3339(store.clock() + timedelta(seconds=period))
    nmeta["deletionGracePeriodSeconds"] = period
    stored = store.commit(st, key, api.order_object(new), "MODIFIED")
    if period == 0 and not finalizers:
        return store.commit(st, key, None, "DELETED")
    return stored


def bind(store: ObjectStore, namespace: str, name: str, binding: Obj) -> None:
    """pods/binding: sets spec.nodeName and the PodScheduled condition."""
    rt = api.PODS
    bmeta, node = _binding_target(name, binding)
    new = store.get(rt, namespace, name).decoded()  # private: read first, then edited into the bound pod
    key = api.key_of(new)
    _check_binding_preconditions(name, key, bmeta, new["metadata"])
    _check_bindable(name, new)
    _bind_pod(new, node, bmeta, rfc3339(store.clock()))
    store.commit(store.storage(rt), key, api.order_object(new), "MODIFIED")


def _binding_target(name: str, binding: Obj) -> tuple[Obj, str]:
    """The Binding's metadata and target node, or the apiserver's 400/422 for a malformed one."""
    bmeta = binding.get("metadata") or {}
    if not isinstance(bmeta, dict):
        raise ApiError.make(400, "Binding metadata must be an object")
    if bmeta.get("name") and bmeta["name"] != name:
        raise ApiError.make(400, "name in URL does not match name in body")
    target = binding.get("target") or {}
    node = target.get("name") if isinstance(target, dict) else None
    if not isinstance(node, str) or not node:
        raise ApiError.make(
            422,
            f'Binding "{name}" is invalid: target.name: Required value',
            reason="Invalid",
            details={
                "name": name,
                "kind": "Binding",
                "causes": [
                    {"reason": "FieldValueRequired", "message": "Required value", "field": "target.name"}
                ],
            },
        )
    return bmeta, node


def _check_binding_preconditions(name: str, key: str, bmeta: Obj, meta: Obj) -> None:
    """A Binding's uid and resourceVersion are preconditions on the pod, as in the API server."""
    rt = api.PODS
    want_uid = bmeta.get("uid")
    if want_uid and want_uid != meta.get("uid"):
        raise statuses.conflict(
            rt,
            name,
            statuses.storage_error(
                rt,
                key,
                f"Precondition failed: UID in precondition: {want_uid}, UID in object meta: "
                f"{meta.get('uid')}",
            ),
        )
    want_rv = bmeta.get("resourceVersion")
    if want_rv and want_rv != meta.get("resourceVersion"):
        raise statuses.conflict(
            rt,
            name,
            statuses.storage_error(
                rt,
                key,
                f"Precondition failed: ResourceVersion in precondition: {want_rv}, "
                f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
            ),
        )


def _check_bindable(name: str, pod: Obj) -> None:
    """409 for a pod being deleted or already assigned."""
    if pod["metadata"].get("deletionTimestamp"):
        raise ApiError.make(
            409,
            f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is being '
            "deleted, cannot be assigned to a host",
            details=details(name, "pods/binding"),
        )
    bound_to = objects.node_name(pod)
    if bound_to:
        raise ApiError.make(
            409,
            f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
            f'already assigned to node "{bound_to}"',
            details=details(name, "pods/binding"),
        )


def _bind_pod(pod: Obj, node: str, bmeta: Obj, now: str) -> None:
    """spec.nodeName, the Binding's annotations, and a PodScheduled=True condition stamped `now`."""
    pod.setdefault("spec", {})["nodeName"] = node
    if isinstance(bmeta.get("annotations"), dict) and bmeta["annotations"]:
        pod["metadata"]["annotations"] = {
            **(pod["metadata"].get("annotations") or {}),
            **bmeta["annotations"],
        }
    status = pod.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    conditions.append(
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
    )
    status["conditions"] = conditions
    # Keep phase first in status, where the API server's Go struct order puts it.
    if "phase" in status and next(iter(status)) != "phase":
        pod["status"] = {"phase": status.pop("phase"), **status}
