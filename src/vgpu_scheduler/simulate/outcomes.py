"""What the report says of each input pod and each device at the end of a run, read from the
scheduler's caches (settled, they are the API's versions: no GET, no private copy of 50,000 pods)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.engine.ledger import DeviceLedger
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.simulate.report import DeviceDemand, DeviceState, PodOutcome
from vgpu_scheduler.wire import keys

Obj = dict[str, Any]


def pod_outcomes(
    inputs: Sequence[Obj],
    pod_keys: Sequence[str],
    *,
    cached_pod: Callable[[str], Obj | None],
    reasons_of: Callable[[str], dict[str, str]],
    errors: Mapping[str, str],
    explain: Callable[[str, str], dict[str, Any] | None] | None,
    vendors: Vendors,
) -> tuple[list[PodOutcome], list[DeviceDemand]]:
    """Each input pod's outcome (bound, or pending with its reasons, last error and, when `explain`
    is given, its explanation), and the device demands of the pending ones."""
    outcomes: list[PodOutcome] = []
    demands: list[DeviceDemand] = []
    for pod_in, key in zip(inputs, pod_keys, strict=True):
        namespace, _, name = key.partition("/")
        pod = cached_pod(key)
        error = errors.get(key)
        if pod is None:
            outcomes.append(PodOutcome(pod_in, None, reasons_of(key), error=error))
            continue
        node = (pod.get("spec") or {}).get("nodeName") or None
        explained = explain(namespace, name) if node is None and explain is not None else None
        outcomes.append(PodOutcome(pod, node, reasons_of(key) if node is None else {}, explained, error))
        if node is None:
            demands.extend(_demands(pod, vendors))
    return outcomes, demands


def device_states(ledger: DeviceLedger) -> list[DeviceState]:
    """Every registered device with its usage, by node name then device order."""
    devices: list[DeviceState] = []
    for node_name in sorted(ledger.node_names()):
        view = ledger.view(node_name)
        if view is None:
            continue
        for dev, use in zip(view.devices, view.usage, strict=True):
            devices.append(
                DeviceState(
                    node=node_name, index=dev.index, uuid=dev.id, type=dev.type, count=dev.count,
                    devmem=dev.devmem, devcore=dev.devcore, used=use.used, usedmem=use.usedmem,
                    usedcores=use.usedcores, health=dev.health,
                )
            )
    return devices


def _demands(pod: Mapping[str, Any], vendors: Vendors) -> list[DeviceDemand]:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    use = str(annotations.get(keys.USE_GPUTYPE, "")).split(",")
    nouse = str(annotations.get(keys.NOUSE_GPUTYPE, "")).split(",")
    out = []
    for container in pod_requests(pod, vendors):
        for request in container.values():
            out.append(DeviceDemand.from_request(request, use_types=use, nouse_types=nouse))
    return out
