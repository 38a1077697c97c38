"""GPU scheduling policy: device ordering (§5.6) and the policy filters used by fit.

Devices are sorted ascending by HAMi's `Less` and fit consumes the sorted list from the END, so
"preferred" devices sort last. HAMi sorts with Go's `sort.Sort`, which is an insertion sort (and
therefore stable) for up to 12 elements; we always sort stably, so ties keep the incoming order —
inventory order for the first container, the previous container's sorted order afterwards
(HAMi sorts the node copy in place between containers).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

from vgpu_scheduler.model import PERCENTAGE_UNSET, ContainerDeviceRequest, DeviceInfo, DeviceUsage

BINPACK = "binpack"
SPREAD = "spread"
NUMA = "numa"
MUTEX = "mutex"
TOPOLOGY_AWARE = "topology-aware"
BEST_FIT = "best-fit"
"""Ours, opt-in: best fit on the dominant resource of what the pod leaves (`best_fit_key`)."""

DEFAULT_GPU_POLICY = SPREAD
"""`--gpu-scheduler-policy` default."""

NODE_POLICIES = (BINPACK, SPREAD)
"""`--node-scheduler-policy` values."""
GPU_POLICY_TOKENS = (BINPACK, SPREAD, TOPOLOGY_AWARE, MUTEX, NUMA, BEST_FIT)
"""The tokens of a `--gpu-scheduler-policy` value (one, or a comma chain such as `binpack,numa`)."""

_SORT_KEYS = (BINPACK, SPREAD, NUMA)

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})


def parse_go_bool(s: str) -> bool:
    """Go `strconv.ParseBool` where an invalid value counts as false (`nvidia.com/numa-bind`)."""
    return s in _TRUE


def unknown_node_policy(value: str) -> str:
    """Why `value` is no node policy, "" when it is one. HAMi takes any string and schedules an
    unknown one as binpack (`pack`, #1931); the command lines refuse it instead."""
    return "" if value in NODE_POLICIES else f'unknown policy "{value}" (known: {", ".join(NODE_POLICIES)})'


def unknown_gpu_policy(value: str) -> str:
    """Why `value` is no GPU policy (a known name or a comma chain of them), "" when it is one.
    HAMi schedules an unknown name as spread, silently; the command lines refuse it instead."""
    unknown = [token for token in (t.strip() for t in value.split(",")) if token not in GPU_POLICY_TOKENS]
    if not unknown:
        return ""
    names = ", ".join(f'"{token}"' for token in unknown)
    return f"unknown policy {names} (known: {', '.join(GPU_POLICY_TOKENS)})"


def policy_contains(policy: str, name: str) -> bool:
    """HAMi `PolicyContains`: `name` is one of the comma-separated, space-trimmed tokens."""
    return any(token.strip() == name for token in policy.split(","))


@lru_cache(maxsize=256)
def sort_chain(policy: str, numa_bind: bool) -> tuple[str, ...] | None:
    """The comparison keys of chain mode, or None when `policy` is a single value.

    Chain mode: the policy contains "," or is exactly "numa". Keys are the binpack/spread/numa
    tokens in written order without repeats (others, e.g. mutex, are filters only); none ⇒
    spread; with NumaBind, numa is moved (or added) to the front.
    """
    if "," not in policy and policy != NUMA:
        return None
    chain: list[str] = []
    for token in policy.split(","):
        name = token.strip()
        if name in _SORT_KEYS and name not in chain:
            chain.append(name)
    if not chain:
        chain = [SPREAD]
    if numa_bind and chain[0] != NUMA:
        chain = [NUMA, *(k for k in chain if k != NUMA)]
    return tuple(chain)


SortKey = Callable[[int], tuple[float, ...]]


def sort_key(
    policy: str,
    numa_bind: bool,
    *,
    devices: Sequence[DeviceInfo],
    usage: Sequence[DeviceUsage],
    scores: Sequence[float],
    request: ContainerDeviceRequest | None = None,
) -> SortKey:
    """Key function over device positions that orders them as HAMi's `Less` does.

    `scores` is indexed by position like `devices`/`usage`; `request` is the container's request
    being fitted (only `best-fit` reads it).
    """
    if policy == BEST_FIT and request is not None and not numa_bind:
        return best_fit_key(request, devices, usage)
    chain = sort_chain(policy, numa_bind)
    if chain is not None:
        getters: list[Callable[[int], float]] = []
        for key in chain:
            if key == BINPACK:
                getters.append(lambda p: scores[p])
            elif key == SPREAD:
                getters.append(lambda p: -scores[p])
            else:
                getters.append(lambda p: devices[p].numa)
        # All chained keys equal ⇒ lower device index first.
        return lambda p: (*(g(p) for g in getters), devices[p].index)
    if policy == MUTEX:
        # Busy devices first, idle ones at the tail so fit takes idle devices.
        return lambda p: (-usage[p].used, devices[p].numa)
    binpack = policy == BINPACK
    if numa_bind:
        # Keep NUMA groups contiguous for fit's same-NUMA accumulation.
        if binpack:
            return lambda p: (-devices[p].numa, scores[p])
        return lambda p: (devices[p].numa, -scores[p])
    if binpack:
        return lambda p: (scores[p], devices[p].numa)
    # spread, topology-aware and any unknown name.
    return lambda p: (-scores[p], devices[p].numa)


def asked_memory(dev: DeviceInfo, req: ContainerDeviceRequest) -> int:
    """MiB one instance of `req` takes of `dev` (a percentage is of the device's memory)."""
    if req.memreq == 0 and req.mem_percentage_req not in (PERCENTAGE_UNSET, 0):
        return dev.devmem * req.mem_percentage_req // 100
    return req.memreq


def leftover_after(
    dev: DeviceInfo, use: DeviceUsage, req: ContainerDeviceRequest
) -> tuple[float, float] | None:
    """(memory, cores) left free on `dev` once one instance of `req` is on it, as fractions of the
    device; None when it cannot hold the instance (shares, memory or cores, and fit's two core
    rules: no instance, not even one asking 0 cores, goes on a device whose cores are all used;
    one asking all 100 cores of a 100-core device wants it to itself)."""
    if dev.count <= 0 or dev.devmem <= 0 or dev.devcore <= 0:
        return None
    free_mem = dev.devmem - use.usedmem - asked_memory(dev, req)
    free_cores = dev.devcore - use.usedcores - req.coresreq
    if dev.count - use.used - 1 < 0 or free_mem < 0 or free_cores < 0:
        return None
    if use.usedcores == dev.devcore and req.coresreq == 0:
        return None
    if dev.devcore == 100 and req.coresreq == 100 and use.used > 0:
        return None
    return free_mem / dev.devmem, free_cores / dev.devcore


def best_fit_key(
    request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage]
) -> SortKey:
    """`best-fit`: best fit on the dominant resource. The device whose larger leftover fraction
    (memory or cores) after the pod is smallest sorts last, so fit takes it first; ties go to the
    device whose leftover memory and cores are the most even, since an uneven leftover is what
    strands memory beside used-up cores (or the reverse). HAMi's binpack orders by usage before
    the pod; this orders by what the pod leaves. A pod asking no cores shares them, so it is fitted
    on memory alone (the cores' leftover would always be whole and tie every device). Devices that
    cannot hold it sort first."""

    def key(p: int) -> tuple[float, ...]:
        left = leftover_after(devices[p], usage[p], request)
        if left is None:
            return (0.0, 0.0, 0.0)
        memory, cores = left
        if request.coresreq == 0:
            # A pod that asks no cores shares them: only its memory can be packed tightly.
            return (1.0, -round(memory, 9), 0.0)
        return (1.0, -round(max(memory, cores), 9), -round(abs(memory - cores), 9))

    return key


def sort_devices(
    order: Sequence[int],
    scores: Sequence[float],
    devices: Sequence[DeviceInfo],
    usage: Sequence[DeviceUsage],
    *,
    policy: str,
    numa_bind: bool,
) -> list[int]:
    """`order` (device positions) stably sorted ascending by the policy; fit takes from the end."""
    return sorted(order, key=sort_key(policy, numa_bind, devices=devices, usage=usage, scores=scores))
