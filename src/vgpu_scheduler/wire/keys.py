"""Annotation and label keys of the HAMi wire contract (§3, §4, §6)."""

# Node annotations (device plugin -> scheduler, and the scheduler's own).
NODE_NVIDIA_REGISTER = "hami.io/node-nvidia-register"
NODE_NVIDIA_SCORE = "hami.io/node-nvidia-score"
NODE_HANDSHAKE = "hami.io/node-handshake"
NODE_LOCK = "hami.io/mutex.lock"
DEVICE_CORDON = "hami.io/device-cordon"

# Pod annotations written by the scheduler.
VGPU_NODE = "hami.io/vgpu-node"
VGPU_TIME = "hami.io/vgpu-time"
VGPU_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
VGPU_ALLOCATED = "hami.io/vgpu-devices-allocated"
VGPU_MIG_ALLOCATIONS = "hami.io/vgpu-mig-allocations"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"

BIND_PHASE_ALLOCATING = "allocating"
BIND_PHASE_SUCCESS = "success"
BIND_PHASE_FAILED = "failed"

# User-facing pod annotations (§4.7).
USE_GPUTYPE = "nvidia.com/use-gputype"
NOUSE_GPUTYPE = "nvidia.com/nouse-gputype"
USE_GPUUUID = "nvidia.com/use-gpuuuid"
NOUSE_GPUUUID = "nvidia.com/nouse-gpuuuid"
NUMA_BIND = "nvidia.com/numa-bind"
VGPU_MODE = "nvidia.com/vgpu-mode"
GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
NODE_SCHEDULER_POLICY = "hami.io/node-scheduler-policy"
DEVICE_SCORING_WEIGHTS = "hami.io/device-scoring-weights"

# Ours.
REQUEUE = "vgpu-scheduler.io/requeue"
"""Unix time of the last requeue nudge of a pending pod (scheduler/requeue.py)."""

# Labels.
WEBHOOK_IGNORE_LABEL = "hami.io/webhook"
SCHEDULER_ROLE_LABEL = "hami.io/scheduler-role"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"

# Per-vendor allocation keys (§4.4): vendor key -> (to-allocate, allocated).
ALLOCATION_KEYS: dict[str, tuple[str, str]] = {
    "NVIDIA": (VGPU_TO_ALLOCATE, VGPU_ALLOCATED),
}
