"""The simulation report: a fixed JSON schema, serialised deterministically.

Schema (every key always present)::

    {
      "pods": [                                   # input order
        {"namespace": str, "name": str,
         "node": str | null,                      # null = still pending at the end
         "annotations": {str: str},               # every annotation the pod ends with
         "reasons": {node: reason},               # only for pending pods; {} otherwise
         "error": str,                            # only for a pending pod whose last attempt
                                                  # failed with an error (not "fits nowhere")
         "explain": {...}}                        # only with --explain, for pending pods: what
                                                  # `vgpu-scheduler explain -o json` prints
      ],
      "summary": {
        "end": "done" | "max_sim_time" | "no_progress",   # what ended the run
        "pods": {"total": int, "scheduled": int, "pending": int,
                 "pending_error": int},           # of the pending, those with an "error"
        "gpu_nodes": int, "gpus": int,
        "allocation": {                           # at the end of the run
          "memory": {"allocated_mib": int, "capacity_mib": int, "ratio": float},
          "cores":  {"allocated": int, "capacity": int, "ratio": float},
          "slots":  {"allocated": int, "capacity": int, "ratio": float}},
        "peak_allocation": {"memory_ratio": float, "core_ratio": float, "slot_ratio": float},
        "fragmentation": {"free_memory_mib": int, "fragmented_memory_mib": int, "fraction": float},
        "makespan_seconds": float
      },
      "devices": [                                # per GPU, sorted by (node, index, uuid)
        {"node", "index", "uuid", "type", "health", "count", "devmem", "devcore",
         "used", "usedmem", "usedcores"}
      ],
      "timeline": [                               # allocation over simulated time, in time order
        {"time": float, "running": int, "pending": int,
         "memory_ratio": float, "core_ratio": float, "slot_ratio": float}
      ]
    }

`devices` and `timeline` carry what `plot.py` draws (the per-GPU heatmap and allocation over time).
Ratios are allocated / capacity over every device of the fleet (0.0 when the capacity is 0), rounded
to 6 decimals; times to 3 decimals. `dumps_report` sorts keys and uses fixed separators, so the same
inputs give byte-identical output.

The inputs are plain data (pod dicts, DeviceState tuples, DeviceDemand values), so the report can be
built and tested without the engine.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec

from vgpu_scheduler.gctuning import gc_paused
from vgpu_scheduler.model import PERCENTAGE_UNSET, ContainerDeviceRequest
from vgpu_scheduler.wire import objects

RATIO_DIGITS = 6
TIME_DIGITS = 3


@dataclass(slots=True, frozen=True)
class DeviceState:
    """One GPU at the end of the run: capacity (from the inventory) and usage (from the ledger)."""

    node: str
    index: int
    uuid: str
    type: str
    count: int
    devmem: int
    devcore: int
    used: int = 0
    usedmem: int = 0
    usedcores: int = 0
    health: bool = True


class TimelinePoint(NamedTuple):
    """Fleet-wide usage right after an event (a bind or a pod finishing) at simulated `time`."""

    time: float
    running: int
    pending: int
    used: int
    usedmem: int
    usedcores: int


@dataclass(slots=True, frozen=True)
class DeviceDemand:
    """What one container of a pending pod asks of each of its devices (§5.1), plus the GPU
    type filters of its pod (§4.7) — enough to tell whether a device's free memory is usable."""

    memreq: int = 0
    mem_percentage: int = PERCENTAGE_UNSET
    coresreq: int = 0
    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()

    @classmethod
    def from_request(
        cls,
        request: ContainerDeviceRequest,
        *,
        use_types: Iterable[str] = (),
        nouse_types: Iterable[str] = (),
    ) -> DeviceDemand:
        return cls(
            memreq=request.memreq,
            mem_percentage=request.mem_percentage_req,
            coresreq=request.coresreq,
            use_types=tuple(t.strip().lower() for t in use_types if t.strip()),
            nouse_types=tuple(t.strip().lower() for t in nouse_types if t.strip()),
        )

    def memory_on(self, device: DeviceState) -> int:
        """MiB this demand takes on `device` (a percentage is of that device's memory)."""
        if self.memreq == 0 and self.mem_percentage != PERCENTAGE_UNSET:
            return device.devmem * self.mem_percentage // 100
        return self.memreq

    def fits(self, device: DeviceState) -> bool:
        """The per-device checks of §5.3 that depend on the device alone (health, type filter, split
        count, memory, cores, exclusivity); node-level filters (uuid, NUMA, quota) are left out."""
        if not device.health or device.used >= device.count:
            return False
        model = device.type.lower()
        if self.use_types and not any(t in model for t in self.use_types):
            return False
        if any(t in model for t in self.nouse_types):
            return False
        cores = min(self.coresreq, 100)
        if device.devmem - device.usedmem < self.memory_on(device):
            return False
        if device.devcore - device.usedcores < cores:
            return False
        if device.devcore == 100 and cores == 100 and device.used > 0:
            return False
        return not (device.devcore != 0 and device.usedcores == device.devcore and cores == 0)


@dataclass(slots=True, frozen=True)
class PodOutcome:
    """A pod as it ends the run: its final object, the node it is bound to, and for a pod left pending
    the per-node reasons of its last failed attempt."""

    pod: Mapping[str, Any]
    node: str | None
    reasons: Mapping[str, str] = field(default_factory=dict)
    explain: Mapping[str, Any] | None = None
    """The pod's explanation (engine.explain) when asked for, else None (no key in the report)."""
    error: str | None = None
    """The error the last attempt of a pod left pending failed with (a filter or bind error, not a
    "fits nowhere"), else None (no key in the report)."""


def _ratio(part: int, whole: int) -> float:
    return round(part / whole, RATIO_DIGITS) if whole > 0 else 0.0


def pod_entry(outcome: PodOutcome) -> dict[str, Any]:
    annotations = objects.annotations(outcome.pod)
    reasons = {} if outcome.node is not None else outcome.reasons
    return {
        "namespace": objects.namespace(outcome.pod) or "default",
        "name": objects.name(outcome.pod),
        "node": outcome.node,
        "annotations": {str(k): v for k, v in sorted(annotations.items())},
        "reasons": {str(k): v for k, v in sorted(reasons.items())},
        **({"error": outcome.error} if outcome.error is not None and outcome.node is None else {}),
        **({"explain": outcome.explain} if outcome.explain is not None else {}),
    }


def fragmentation(devices: Iterable[DeviceState], demands: Iterable[DeviceDemand]) -> tuple[int, int]:
    """(fragmented MiB, free MiB).

    Definition: the free memory of a device is `devmem - usedmem` (never below 0), counted only on
    healthy devices (an unhealthy device's memory is not free for anyone). A device's free memory is
    *fragmented* when none of the pending demands fits on that device by `DeviceDemand.fits` — every
    pending container is blocked there by memory, cores, split count, exclusivity or type. Fragmented
    memory is the sum of the free memory of such devices. With no pending demand nothing is blocked,
    so fragmentation is 0. The fraction reported is fragmented / free (0.0 when nothing is free).
    """
    unique = sorted(set(demands), key=lambda d: (d.memreq, d.mem_percentage, d.coresreq))
    free_total = fragmented = 0
    for device in devices:
        if not device.health:
            continue
        free = max(device.devmem - device.usedmem, 0)
        free_total += free
        if free and unique and not any(d.fits(device) for d in unique):
            fragmented += free
    return fragmented, free_total


def _timeline_row(point: TimelinePoint, slots: int, mem: int, cores: int) -> dict[str, Any]:
    return {
        "time": round(point.time, TIME_DIGITS),
        "running": point.running,
        "pending": point.pending,
        "memory_ratio": _ratio(point.usedmem, mem),
        "core_ratio": _ratio(point.usedcores, cores),
        "slot_ratio": _ratio(point.used, slots),
    }


def _device_row(d: DeviceState) -> dict[str, Any]:
    return {
        "node": d.node, "index": d.index, "uuid": d.uuid, "type": d.type, "health": d.health,
        "count": d.count, "devmem": d.devmem, "devcore": d.devcore,
        "used": d.used, "usedmem": d.usedmem, "usedcores": d.usedcores,
    }


def build_report(
    outcomes: Sequence[PodOutcome],
    devices: Sequence[DeviceState],
    *,
    demands: Iterable[DeviceDemand] = (),
    makespan: float = 0.0,
    timeline: Sequence[TimelinePoint] = (),
    end: str = "done",
) -> dict[str, Any]:
    """The report for a finished run. `demands` are the per-device requests of the pods still pending
    (for fragmentation); `makespan` is the simulated time from start until the last bind or finish;
    `end` what ended the run."""
    slots = sum(d.count for d in devices)
    mem = sum(d.devmem for d in devices)
    cores = sum(d.devcore for d in devices)
    used = sum(d.used for d in devices)
    usedmem = sum(d.usedmem for d in devices)
    usedcores = sum(d.usedcores for d in devices)
    rows = [_timeline_row(p, slots, mem, cores) for p in sorted(timeline, key=lambda p: p.time)]
    final = {"memory_ratio": _ratio(usedmem, mem), "core_ratio": _ratio(usedcores, cores),
             "slot_ratio": _ratio(used, slots)}
    peak = {k: max([v, *(r[k] for r in rows)]) for k, v in final.items()}
    fragmented, free = fragmentation(devices, demands)
    scheduled = sum(1 for o in outcomes if o.node is not None)
    erring = sum(1 for o in outcomes if o.node is None and o.error is not None)
    return {
        "pods": [pod_entry(o) for o in outcomes],
        "summary": {
            "end": end,
            "pods": {
                "total": len(outcomes), "scheduled": scheduled, "pending": len(outcomes) - scheduled,
                "pending_error": erring,
            },
            "gpu_nodes": len({d.node for d in devices}),
            "gpus": len(devices),
            "allocation": {
                "memory": {"allocated_mib": usedmem, "capacity_mib": mem, "ratio": final["memory_ratio"]},
                "cores": {"allocated": usedcores, "capacity": cores, "ratio": final["core_ratio"]},
                "slots": {"allocated": used, "capacity": slots, "ratio": final["slot_ratio"]},
            },
            "peak_allocation": peak,
            "fragmentation": {
                "free_memory_mib": free,
                "fragmented_memory_mib": fragmented,
                "fraction": _ratio(fragmented, free),
            },
            "makespan_seconds": round(makespan, TIME_DIGITS),
        },
        "devices": [_device_row(d) for d in sorted(devices, key=lambda d: (d.node, d.index, d.uuid))],
        "timeline": rows,
    }


def dumps_report(report: Mapping[str, Any]) -> str:
    """Canonical text: sorted keys, 2-space indent, UTF-8 kept, trailing newline; NaN/inf rejected.

    The standard library's C encoder writes it compact (its key order, float and string forms,
    the NaN check); msgspec then only re-indents those tokens, copying each as it is: byte for
    byte what `json.dumps(..., indent=2)` gives, without its pure-Python indenting encoder (seconds
    for a 50,000-pod report)."""
    # The encoder allocates a list per object; the collector paused, those allocations do not
    # make it walk the simulation's heap over and over (2.7 s of a 5,000-node report, not 0.1).
    with gc_paused():
        compact = json.dumps(
            report, sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":")
        )
    return msgspec.json.format(compact.encode(), indent=2).decode() + "\n"
