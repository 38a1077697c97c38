"""A deterministic demo workload: pod manifests as users submit them to HAMi.

Everything comes from `random.Random(seed)`; the same (n, seed) gives the same pods byte for byte. The
mix covers what the scheduler has to handle (§4.7, §5.1): whole GPUs, memory+core slices,
memory percentages, multi-GPU pods (some NUMA-bound), an init container with its own GPU request, GPU
type and UUID filters, per-pod GPU/node policies, plain cpu pods, priorities, and finite run times.
"""

from __future__ import annotations

import datetime as _dt
import random
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_scheduler.standin.embedded.fleet import demo_gpu_uuids
from vgpu_scheduler.standin.embedded.runtime import DEFAULT_EPOCH, DURATION_ANNOTATION
from vgpu_scheduler.wire.keys import (
    GPU_SCHEDULER_POLICY,
    NODE_SCHEDULER_POLICY,
    NOUSE_GPUUUID,
    NUMA_BIND,
    USE_GPUTYPE,
    USE_GPUUUID,
)

KIND_LABEL = "simulate.vgpu-scheduler.io/kind"
SCHEDULER_NAME = "hami-scheduler"
HIGH_PRIORITY_CLASS = "sim-high"
HIGH_PRIORITY = 1000

GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUCORES = "nvidia.com/gpucores"
GPUMEM_PERCENTAGE = "nvidia.com/gpumem-percentage"

IMAGE = "nvidia/cuda:12.4.1-base-ubuntu22.04"
NAMESPACES = ("default", "team-a", "team-b", "research")

# kind -> relative weight in the mix
KIND_WEIGHTS: Mapping[str, int] = {
    "whole": 18,
    "slice": 28,
    "percent": 10,
    "multi": 10,
    "init": 8,
    "typed": 8,
    "uuid": 6,
    "cpu": 12,
}

_UUID_NAMESPACE = uuid.UUID("0c6f1d2a-9b3e-5f47-8a61-2d4c6e8f0a1b")


def _gpu_limits(rng: random.Random, kind: str, pool: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """(extra container limits, extra annotations) for one GPU pod kind."""
    if kind == "whole":
        return {GPU: 1, GPUCORES: 100}, {}
    if kind == "slice":
        return {GPU: 1, GPUMEM: rng.choice((2048, 4096, 8192, 12288, 16384)),
                GPUCORES: rng.choice((10, 20, 25, 30, 50))}, {}
    if kind == "percent":
        return {GPU: 1, GPUMEM_PERCENTAGE: rng.choice((10, 25, 50)), GPUCORES: rng.choice((20, 30, 50))}, {}
    if kind == "multi":
        annotations: dict[str, str] = {}
        if rng.random() < 0.3:
            annotations[NUMA_BIND] = "true"
        return {GPU: rng.choice((2, 4)), GPUMEM: rng.choice((16384, 24576)),
                GPUCORES: rng.choice((50, 100))}, annotations
    if kind == "typed":
        return {GPU: 1, GPUMEM: 40960, GPUCORES: 50}, {USE_GPUTYPE: "A100"}
    if kind == "uuid":
        picked = rng.sample(list(pool), k=min(2, len(pool)))
        key = USE_GPUUUID if rng.random() < 0.5 else NOUSE_GPUUUID
        return {GPU: 1, GPUMEM: 4096, GPUCORES: 20}, {key: ",".join(picked)}
    return {}, {}


def _policies(rng: random.Random, kind: str) -> dict[str, str]:
    annotations: dict[str, str] = {}
    if kind == "cpu":
        return annotations
    if rng.random() < 0.3:
        gpu_policies = ("binpack", "spread", "topology-aware") if kind == "multi" else ("binpack", "spread")
        annotations[GPU_SCHEDULER_POLICY] = rng.choice(gpu_policies)
    if rng.random() < 0.2:
        annotations[NODE_SCHEDULER_POLICY] = rng.choice(("binpack", "spread"))
    return annotations


def _container(
    name: str, cpu: str, memory: str, *, cpu_limit: str, extra: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "command": ["sleep", "infinity"],
        "image": IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "name": name,
        "resources": {
            "limits": {"cpu": cpu_limit, "memory": memory, **extra},
            "requests": {"cpu": cpu, "memory": memory},
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }


def _pod(rng: random.Random, i: int, *, seed: int, pool: Sequence[str], created: str) -> dict[str, Any]:
    kind = rng.choices(list(KIND_WEIGHTS), weights=list(KIND_WEIGHTS.values()))[0]
    name = f"sim-{kind}-{i:05d}"
    namespace = rng.choice(NAMESPACES)
    cpu, cpu_doubled = rng.choice((("500m", "1"), ("1", "2"), ("2", "4"), ("4", "8")))
    memory = rng.choice(("1Gi", "2Gi", "4Gi", "8Gi", "16Gi"))
    # Half the pods may burst to twice their cpu request (qosClass Burstable), the rest are Guaranteed.
    cpu_limit = cpu_doubled if rng.random() < 0.5 else cpu
    limits, annotations = _gpu_limits(rng, kind, pool)
    annotations.update(_policies(rng, kind))
    duration = rng.randint(30, 3600) if rng.random() < 0.7 else None
    if duration is not None:
        annotations[DURATION_ANNOTATION] = str(duration)
    high = rng.random() < 0.1
    containers = [_container("main", cpu, memory, cpu_limit=cpu_limit, extra=limits)]
    spec: dict[str, Any] = {
        "containers": containers,
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": HIGH_PRIORITY if high else 0,
        "restartPolicy": "Never" if duration is not None else "Always",
        "schedulerName": SCHEDULER_NAME,
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists",
             "tolerationSeconds": 300},
            {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists",
             "tolerationSeconds": 300},
        ],
    }
    if kind == "init":
        spec["initContainers"] = [
            _container("warmup", "500m", "1Gi", cpu_limit="500m", extra={GPU: 1, GPUMEM: 2048, GPUCORES: 10})
        ]
        containers[0]["resources"]["limits"].update({GPU: 1, GPUMEM: 8192, GPUCORES: 30})
    if high:
        spec["priorityClassName"] = HIGH_PRIORITY_CLASS
    if kind != "cpu" and rng.random() < 0.3:
        spec["nodeSelector"] = {"gpu": "on"}
    metadata: dict[str, Any] = {
        "creationTimestamp": created,
        "labels": {"app.kubernetes.io/name": f"sim-{kind}", KIND_LABEL: kind},
        "name": name,
        "namespace": namespace,
        "uid": str(uuid.uuid5(_UUID_NAMESPACE, f"pod/{seed}/{i}")),
    }
    if annotations:
        metadata["annotations"] = dict(sorted(annotations.items()))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "Burstable" if cpu_limit != cpu else "Guaranteed"},
    }


def demo_workload(
    n: int, seed: int, *, uuid_pool: Sequence[str] | None = None, epoch: int = DEFAULT_EPOCH
) -> list[dict[str, Any]]:
    """`n` pods named `sim-<kind>-<i>`; `uuid_pool` feeds the UUID filters (default: the demo fleet's
    GPUs, so those pods can land there; on another fleet a `use-gpuuuid` pod stays pending)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    pool = list(uuid_pool) if uuid_pool is not None else demo_gpu_uuids()
    if not pool:
        raise ValueError("uuid_pool must not be empty")
    rng = random.Random(seed)
    created = _dt.datetime.fromtimestamp(epoch, tz=_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [_pod(rng, i, seed=seed, pool=pool, created=created) for i in range(n)]
