"""NVIDIA `MutateAdmission` on one container (§7 step 3)."""

from __future__ import annotations

from typing import Any

from vgpu_scheduler.config import NvidiaConfig
from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.devices.protocol import MutationError

TASK_PRIORITY_ENV = "CUDA_TASK_PRIORITY"
CORE_POLICY_ENV = "GPU_CORE_UTILIZATION_POLICY"


def mutate_container(ctr: dict[str, Any], pod: dict[str, Any], cfg: NvidiaConfig) -> bool:
    """Mutate `ctr` in place; True if it asks for NVIDIA GPUs. Raises MutationError."""
    pct_name = cfg.resource_memory_percentage_name
    pct = res.value(ctr, pct_name)
    if pct is not None and not 0 <= pct <= 100:
        name = ctr.get("name") or ""
        raise MutationError(
            f"invalid {pct_name} value {pct} in container {name}: must be an integer between 0 and 100"
        )
    if res.present(ctr, "limits", cfg.resource_priority_name):
        res.append_env(ctr, TASK_PRIORITY_ENV, str(res.value(ctr, cfg.resource_priority_name)))
    if cfg.gpu_core_policy not in ("", "default"):
        res.append_env(ctr, CORE_POLICY_ENV, cfg.gpu_core_policy)

    count, cores = cfg.resource_count_name, cfg.resource_core_name
    has_gpu = res.present(ctr, "limits", count)
    # Only memory/cores/percentage given: the pod still means one (or defaultGPUNum) GPU.
    implied = any(res.present(ctr, "limits", n) for n in (cores, cfg.resource_memory_name, pct_name))
    if not has_gpu and implied and cfg.default_gpu_num > 0:
        res.set_limit(ctr, count, res.binary_si(cfg.default_gpu_num))
        has_gpu = True
    # Whole-card request (no cores, and 100 % or no memory): reserve all cores so no one shares it.
    # This is also how a count given only in `requests` makes the pod a GPU pod.
    if (
        count
        and cores
        and (res.present(ctr, "limits", count) or res.present(ctr, "requests", count))
        and not (res.present(ctr, "limits", cores) or res.present(ctr, "requests", cores))
    ):
        if pct is not None:
            exclusive = pct == 100
        else:
            exclusive = not cfg.resource_memory_name or res.value(ctr, cfg.resource_memory_name) is None
        if exclusive:
            res.set_limit(ctr, cores, "100")
            has_gpu = True

    spec = pod["spec"]
    if has_gpu and spec.get("runtimeClassName") is None and cfg.runtime_class_name:
        spec["runtimeClassName"] = cfg.runtime_class_name
    if not has_gpu and cfg.overwrite_env:
        res.append_env(ctr, "NVIDIA_VISIBLE_DEVICES", "none")
    return has_gpu
