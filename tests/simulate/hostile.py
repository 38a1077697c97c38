"""Hypothesis strategies for small, messy clusters as real snapshots have them (issue 27, item 2).

A scenario is 1-6 nodes (NVIDIA always somewhere, Hygon DCU, Cambricon, Metax GPU and Mthreads
mixed in) with hostile inputs: malformed, empty and legacy inventories, a device field of the wrong
type, both lock kinds recent / expired / in the future / malformed, pods already bound (to devices
that exist or not, in every bind phase, to nodes that exist or not), and pods to schedule with
invalid scoring weights, unknown policy names, type and uuid filters, numa-bind values, unparsable
quantities, init containers, several containers and several vendors each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from tests.builders import container, device, node, pod
from vgpu_scheduler.cluster.nodelock import format_lock, format_rfc3339
from vgpu_scheduler.devices.cambricon import DSMLU_LOCK
from vgpu_scheduler.simulate.options import ARRIVAL_ANNOTATION
from vgpu_scheduler.standin.embedded.runtime import DEFAULT_EPOCH, DURATION_ANNOTATION
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import encode_node_devices_json, encode_node_devices_legacy

Obj = dict[str, Any]
T0 = datetime.fromtimestamp(DEFAULT_EPOCH, tz=UTC)
GIB = 1024
DCU_REGISTER = "hami.io/node-dcu-register"
GPU_TYPES = ("NVIDIA-A100", "NVIDIA-A10", "NVIDIA-T4")

# --- nodes ---------------------------------------------------------------------------------------

nvidia_device = st.tuples(
    st.sampled_from([1, 2, 10]), st.sampled_from([8, 16, 40]), st.sampled_from([100, 50]),
    st.sampled_from(GPU_TYPES), st.integers(0, 1),
)  # (count, GiB, cores, type, numa)
wrong_types = st.sampled_from([
    ("count", "ten"), ("devmem", None), ("health", "yes"), ("numa", "zero"), ("index", -1),
    ("devcore", 1.5), ("type", 7), ("id", None), ("count", -3),
])
inventory_kind = st.sampled_from(["json", "json", "legacy", "empty", "garbage", "wrong-type", "absent"])
lock_kind = st.sampled_from(["none", "none", "recent", "expired", "future", "malformed"])
MALFORMED_LOCKS = ("", ",,", "garbage", "2026-01-01T00:00:00Z", "x,default,p")

node_spec = st.fixed_dictionaries({
    "nvidia": st.lists(nvidia_device, min_size=1, max_size=3),
    "nvidia_kind": inventory_kind,
    "wrong": wrong_types,
    "dcu": st.lists(st.tuples(st.sampled_from([1, 4]), st.sampled_from([16, 32])), max_size=2),
    "dcu_kind": st.sampled_from(["legacy", "json", "garbage"]),
    "mlus": st.integers(0, 2),
    "metax": st.integers(0, 2),
    "mthreads": st.integers(0, 1),
    "mutex": lock_kind,
    "mutex_holder": st.sampled_from(["bound-0", "ghost", "bound-1"]),
    "dsmlu": lock_kind,
    "malformed": st.sampled_from(MALFORMED_LOCKS),
    "unschedulable": st.sampled_from([False, False, False, True]),
})


def _lock_time(kind: str) -> datetime:
    return {"recent": T0 - timedelta(seconds=30), "expired": T0 - timedelta(hours=2),
            "future": T0 + timedelta(days=400)}[kind]


def _nvidia_inventory(name: str, spec: dict[str, Any]) -> str | None:
    devices = [
        device(f"GPU-{name}-{i}", index=i, count=c, devmem=g * GIB, devcore=cores, type=t, numa=numa)
        for i, (c, g, cores, t, numa) in enumerate(spec["nvidia"])
    ]
    kind = spec["nvidia_kind"]
    if kind == "legacy":
        return encode_node_devices_legacy(devices)
    if kind == "empty":
        return ""
    if kind == "garbage":
        return '[{"id": "GPU-x", "count": '
    if kind == "wrong-type":
        raw = json.loads(encode_node_devices_json(devices))
        field_name, value = spec["wrong"]
        raw[-1][field_name] = value
        return json.dumps(raw)
    if kind == "absent":
        return None
    return encode_node_devices_json(devices)


def _dcu_inventory(name: str, spec: dict[str, Any]) -> str:
    devices = [
        device(f"DCU-{name}-{i}", index=i, count=c, devmem=g * GIB, type="DCU-Z100")
        for i, (c, g) in enumerate(spec["dcu"])
    ]
    kind = spec["dcu_kind"]
    if kind == "garbage":
        return "DCU-1,4,nope:"
    return encode_node_devices_json(devices) if kind == "json" else encode_node_devices_legacy(devices)


def _lock_value(kind: str, spec: dict[str, Any], *, holder: str | None) -> str | None:
    if kind == "none":
        return None
    if kind == "malformed":
        return str(spec["malformed"])
    at = _lock_time(kind)
    return format_lock(at, "default", holder) if holder is not None else format_rfc3339(at)


def node_object(index: int, spec: dict[str, Any]) -> Obj:
    name = f"node-{index}"
    annotations = {keys.NODE_HANDSHAKE: "Requesting_2026-01-01 00:00:00"}
    capacity = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    inventory = _nvidia_inventory(name, spec)
    if inventory is not None:
        annotations[keys.NODE_NVIDIA_REGISTER] = inventory
        capacity["nvidia.com/gpu"] = str(sum(c for c, *_ in spec["nvidia"]))
    if spec["dcu"]:
        annotations[DCU_REGISTER] = _dcu_inventory(name, spec)
    if spec["mlus"]:
        capacity["cambricon.com/mlu.smlu.vcore"] = str(100 * spec["mlus"])
        capacity["cambricon.com/mlu.smlu.vmemory"] = str(64 * spec["mlus"])
    if spec["metax"]:
        capacity["metax-tech.com/gpu"] = str(spec["metax"])
    if spec["mthreads"]:
        capacity["mthreads.com/sgpu-core"] = "16"
        capacity["mthreads.com/sgpu-memory"] = "96"
    holder = spec["mutex_holder"] if spec["mutex_holder"] == "ghost" else f"{spec['mutex_holder']}-{index}"
    mutex = _lock_value(spec["mutex"], spec, holder=holder)
    if mutex is not None:
        annotations[keys.NODE_LOCK] = mutex
    dsmlu = _lock_value(spec["dsmlu"], spec, holder=None)
    if dsmlu is not None:
        annotations[DSMLU_LOCK.key] = dsmlu
    ready = [{"type": "Ready", "status": "True"}]
    out = node(
        name, typed=True, annotations=annotations, labels={"kubernetes.io/hostname": name},
        spec={"unschedulable": True} if spec["unschedulable"] else {},
        capacity=capacity, allocatable=capacity,
    )
    out["status"]["conditions"] = ready
    return out


# --- pods already bound ---------------------------------------------------------------------------

bound_spec = st.fixed_dictionaries({
    "node": st.integers(0, 6),  # past the last node: a node that does not exist
    "device": st.sampled_from(["real", "real", "unknown", "garbage"]),
    "phase": st.sampled_from([keys.BIND_PHASE_ALLOCATING, keys.BIND_PHASE_SUCCESS, keys.BIND_PHASE_FAILED,
                              "weird", None]),
    "pod_phase": st.sampled_from(["Running", "Pending", "Succeeded"]),
    "mem": st.sampled_from([1024, 4096, 100 * GIB]),
})


def bound_pod(index: int, spec: dict[str, Any], nodes: int) -> Obj:
    node_name = f"node-{spec['node']}"
    uuid = {"real": f"GPU-{node_name}-0", "unknown": "GPU-gone"}.get(spec["device"])
    allocation = f"{uuid},NVIDIA,{spec['mem']},10:;" if uuid else "not,an;allocation"
    annotations = {keys.VGPU_NODE: node_name, keys.VGPU_ALLOCATED: allocation,
                   keys.VGPU_TO_ALLOCATE: allocation}
    if spec["phase"] is not None:
        annotations[keys.BIND_PHASE] = spec["phase"]
        annotations[keys.BIND_TIME] = str(DEFAULT_EPOCH - 60)
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(spec["mem"])}
    # Lock holders are named bound-<k>-<node>: one bound pod per node may hold its node's lock.
    name = f"bound-{index % 2}-{spec['node']}" if spec["node"] < nodes else f"bound-{index}-x"
    return pod(name, typed=True, annotations=annotations, node_name=node_name, phase=spec["pod_phase"],
               containers=[container("c", image="x", limits=limits)])


# --- pods to schedule -----------------------------------------------------------------------------

VENDOR_ASKS = {
    "nvidia": ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"),
    "dcu": ("hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"),
    "mlu": ("cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore"),
    "metax": ("metax-tech.com/gpu", "", ""),
    "mthreads": ("mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"),
}
ask = st.fixed_dictionaries({  # mostly sound, some unparsable or out of range
    "vendor": st.sampled_from(["nvidia", *sorted(VENDOR_ASKS)]),
    "count": st.sampled_from(["1"] * 8 + ["2", "2", "0", "12Gx", "-1"]),
    "mem": st.sampled_from([None] * 4 + ["1024", "1024", "8", "4Gi", "lots"]),
    "cores": st.sampled_from([None] * 4 + ["30", "30", "100", "x"]),
})
container_asks = st.lists(ask, max_size=2, unique_by=lambda a: a["vendor"])
annotation_choices: dict[str, Any] = {
    keys.GPU_SCHEDULER_POLICY: st.sampled_from(["binpack", "spread", "pack", "topology-aware"]),
    keys.NODE_SCHEDULER_POLICY: st.sampled_from(["binpack", "spread", "nope"]),
    keys.USE_GPUTYPE: st.sampled_from(["A100", "T4,A10", "H100", ""]),
    keys.NOUSE_GPUTYPE: st.sampled_from(["A10", "garbage"]),
    keys.USE_GPUUUID: st.sampled_from(["GPU-node-0-0", "GPU-gone", "GPU-node-1-0,GPU-node-0-1"]),
    keys.NOUSE_GPUUUID: st.sampled_from(["GPU-node-0-0", ","]),
    keys.NUMA_BIND: st.sampled_from(["true", "false", "maybe"]),
    ARRIVAL_ANNOTATION: st.sampled_from(["0", "5", "400"]),
    DURATION_ANNOTATION: st.sampled_from(["30", "600", "30", "600", "30", "10m"]),  # 10m: refused
}
weights = st.sampled_from([None, None, None, "slot=1,core=1,memory=1", "garbage", "slot=0,core=0,memory=0"])
pod_spec = st.fixed_dictionaries({
    "weights": weights,
    "init": st.lists(container_asks, max_size=2),
    "app": st.lists(container_asks, min_size=1, max_size=3),
    "annotations": st.lists(st.sampled_from(sorted(annotation_choices)), max_size=3, unique=True).flatmap(
        lambda chosen: st.fixed_dictionaries({k: annotation_choices[k] for k in chosen})
    ),
})


def _limits(asks: list[dict[str, Any]]) -> dict[str, str]:
    limits: dict[str, str] = {}
    for a in asks:
        count, memory, cores = VENDOR_ASKS[a["vendor"]]
        limits[count] = a["count"]
        if memory and a["mem"] is not None:
            limits[memory] = a["mem"]
        if cores and a["cores"] is not None:
            limits[cores] = a["cores"]
    return limits


def pending_pod(index: int, spec: dict[str, Any]) -> Obj:
    def containers(prefix: str, asks: list[list[dict[str, Any]]]) -> list[Obj]:
        return [container(f"{prefix}{i}", image="x", limits=_limits(a)) for i, a in enumerate(asks)]

    annotations = dict(spec["annotations"])
    if spec["weights"] is not None:
        annotations[keys.DEVICE_SCORING_WEIGHTS] = spec["weights"]
    return pod(
        f"p{index}", typed=True, annotations=annotations,
        containers=containers("c", spec["app"]), init_containers=containers("i", spec["init"]) or None,
    )


@dataclass(slots=True)
class Scenario:
    nodes: list[Obj]
    bound: list[Obj]
    pods: list[Obj]
    flags: list[str] = field(default_factory=list)


scenario_parts = st.tuples(
    st.lists(node_spec, min_size=1, max_size=6),
    st.lists(bound_spec, max_size=4),
    st.lists(pod_spec, min_size=1, max_size=6),
    st.sampled_from([[]] * 10 + [  # CLI flags, now and then a policy the command refuses
        ["--gpu-scheduler-policy", "binpack"], ["--node-scheduler-policy", "spread"],
        ["--gpu-scheduler-policy", "binpack,numa"], ["--gpu-scheduler-policy", "pack"],
        ["--node-scheduler-policy", "pack"],
    ]),
)


def build_scenario(parts: tuple[Any, ...]) -> Scenario:
    node_specs, bound_specs, pod_specs, flags = parts
    bound: dict[str, Obj] = {}
    for i, spec in enumerate(bound_specs):
        p = bound_pod(i, spec, len(node_specs))
        bound.setdefault(p["metadata"]["name"], p)  # one pod per name
    return Scenario(
        nodes=[node_object(i, spec) for i, spec in enumerate(node_specs)],
        bound=list(bound.values()),
        pods=[pending_pod(i, spec) for i, spec in enumerate(pod_specs)],
        flags=list(flags),
    )


scenarios = scenario_parts.map(build_scenario)
