"""ResourceQuota accounting for device memory and cores (§5.8).

Limits come from `spec.hard["limits.<X>"]` of ResourceQuota objects, where X is a vendor's memory
or core resource name and the quantity is an exact integer. Usage is the sum, over counted pods of a
namespace, of the collapsed devices' memory (for the memory name) and cores (for the core name); it
is kept whether or not a quota exists, so a quota created later sees the current usage.

HAMi keeps one limit per (namespace, X): the last quota object written wins and deleting any object
naming X clears it. That is kept as is (several quotas on the same resource in one namespace are
rare, and the API server enforces the real quotas anyway).

Each namespace has a *generation* that changes whenever its usage or limits change: a fit verdict
that consulted `fits` for a namespace stays valid while that namespace's generation is the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.model import ContainerRequests, PodDevices
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire.quantity import quantity_as_int64

LIMITS_PREFIX = "limits."


@dataclass(slots=True, frozen=True)
class VendorQuotaNames:
    memory: str
    cores: str
    memory_factor: int = 1


@dataclass(slots=True, frozen=True)
class QuotaEntry:
    """One (namespace, resource) line, for metrics: `limit` is None when no limit is set."""

    namespace: str
    resource: str
    used: int
    limit: int | None


def vendor_quota_names(vendors: Vendors) -> dict[str, VendorQuotaNames]:
    """Per vendor key, the memory and core resource names a ResourceQuota may limit."""
    return {
        v.key: VendorQuotaNames(v.names.memory, v.names.cores, v.names.memory_factor) for v in vendors
    }


def _meta(obj: Mapping[str, Any]) -> tuple[str, str]:
    return objects.namespace(obj), objects.name(obj)


class QuotaManager:
    """Implements `QuotaCheck` (the `fits` used inside a fit) plus the webhook's admission check."""

    def __init__(self, vendors: Mapping[str, VendorQuotaNames]) -> None:
        self._vendors = dict(vendors)
        self._managed = frozenset(
            name for v in self._vendors.values() for name in (v.memory, v.cores) if name
        )
        self._limits: dict[str, dict[str, int]] = {}
        self._used: dict[str, dict[str, int]] = {}
        # (namespace, name) -> limits the object contributed, so an update can take them back first.
        self._objects: dict[tuple[str, str], dict[str, int]] = {}
        # namespace -> generation (absent = 0); only ever increases.
        self._gens: dict[str, int] = {}

    @classmethod
    def for_vendors(cls, vendors: Vendors) -> QuotaManager:
        return cls(vendor_quota_names(vendors))

    # -- quota objects ---------------------------------------------------------------------------

    def parse_limits(self, obj: Mapping[str, Any]) -> dict[str, int]:
        """The managed, integer `limits.<X>` entries of a ResourceQuota dict."""
        hard = objects.spec(obj).get("hard")
        out: dict[str, int] = {}
        if not isinstance(hard, Mapping):
            return out
        for key, quantity in hard.items():
            if not isinstance(key, str) or not key.startswith(LIMITS_PREFIX):
                continue  # requests.* and plain names are not ours
            resource = key[len(LIMITS_PREFIX):]
            if resource not in self._managed or not isinstance(quantity, str | int | float):
                continue
            value = quantity_as_int64(quantity)
            if value is not None:
                out[resource] = value
        return out

    def upsert_quota(self, obj: Mapping[str, Any]) -> None:
        """Add or update: the object's previous limits are removed, then its new ones set."""
        namespace, name = _meta(obj)
        self._bump(namespace)
        self._drop_object(namespace, name)
        limits = self.parse_limits(obj)
        self._objects[(namespace, name)] = limits
        if limits:
            self._limits.setdefault(namespace, {}).update(limits)

    def delete_quota(self, obj: Mapping[str, Any]) -> None:
        namespace, name = _meta(obj)
        if (namespace, name) not in self._objects:
            # Never seen (e.g. deleted before we synced): clear what the object names.
            self._objects[(namespace, name)] = self.parse_limits(obj)
        self._bump(namespace)
        self._drop_object(namespace, name)

    def _drop_object(self, namespace: str, name: str) -> None:
        old = self._objects.pop((namespace, name), None)
        ns_limits = self._limits.get(namespace)
        if not old or ns_limits is None:
            return
        for resource in old:
            ns_limits.pop(resource, None)
        if not ns_limits:
            del self._limits[namespace]

    # -- usage -----------------------------------------------------------------------------------

    def _pod_usage(self, devices: PodDevices) -> dict[str, int]:
        usage: dict[str, int] = {}
        for vendor, containers in devices.items():
            names = self._vendors.get(vendor)
            if names is None:
                continue
            for container in containers:
                for dev in container:
                    # Clamped like the ledger so add and remove stay exact inverses.
                    if names.memory:
                        usage[names.memory] = usage.get(names.memory, 0) + max(dev.usedmem, 0)
                    if names.cores:
                        usage[names.cores] = usage.get(names.cores, 0) + max(dev.usedcores, 0)
        return usage

    def add_usage(self, namespace: str, devices: PodDevices) -> None:
        usage = self._pod_usage(devices)
        if not usage:
            return
        self._bump(namespace)
        used = self._used.setdefault(namespace, {})
        for resource, amount in usage.items():
            used[resource] = max(used.get(resource, 0) + amount, 0)

    def remove_usage(self, namespace: str, devices: PodDevices) -> None:
        used = self._used.get(namespace)
        if used is None:
            return
        self._bump(namespace)
        for resource, amount in self._pod_usage(devices).items():
            if resource in used:
                used[resource] = max(used[resource] - amount, 0)

    def _bump(self, namespace: str) -> None:
        self._gens[namespace] = self._gens.get(namespace, 0) + 1

    # -- checks ----------------------------------------------------------------------------------

    def generation(self, namespace: str) -> int:
        """Changes whenever the namespace's usage or limits change (see module doc)."""
        return self._gens.get(namespace, 0)

    def has_limits(self, namespace: str) -> bool:
        """False when `fits` holds for any amount in `namespace` (no managed limit is set)."""
        return bool(self._limits.get(namespace))

    def used(self, namespace: str, resource: str) -> int:
        return self._used.get(namespace, {}).get(resource, 0)

    def limit(self, namespace: str, resource: str) -> int | None:
        return self._limits.get(namespace, {}).get(resource)

    def fits(self, namespace: str, vendor: str, memory: int, cores: int) -> bool:
        """FitQuota: would `memory`/`cores` more of `vendor` stay within the namespace's limits?

        Unknown vendor, no limit for the namespace, or no limit on a resource ⇒ no constraint. The
        memory limit is in request units and is scaled by memoryFactor when that is > 1; an explicit
        limit of 0 therefore rejects any positive request.
        """
        names = self._vendors.get(vendor)
        ns_limits = self._limits.get(namespace)
        if names is None or not ns_limits:
            return True
        mem_limit = ns_limits.get(names.memory) if names.memory else None
        if mem_limit is not None:
            if names.memory_factor > 1:
                mem_limit *= names.memory_factor
            if self.used(namespace, names.memory) + memory > mem_limit:
                return False
        core_limit = ns_limits.get(names.cores) if names.cores else None
        return core_limit is None or self.used(namespace, names.cores) + cores <= core_limit

    def admission_fits(self, namespace: str, requests: Sequence[ContainerRequests], n_init: int) -> bool:
        """The webhook's check (§5.8, last bullet): the pod's peak need per vendor.

        Per vendor: mem = max(Σ app memreq×nums, max init memreq×nums), cores alike; vendors asking
        for neither are skipped. Memory given as a percentage has memreq 0 and so counts 0 here.
        """
        for vendor in self._vendors:
            app_mem = app_cores = init_mem = init_cores = 0
            for i, container in enumerate(requests):
                req = container.get(vendor)
                if req is None:
                    continue
                mem, cores = req.memreq * req.nums, req.coresreq * req.nums
                if i < n_init:
                    init_mem, init_cores = max(init_mem, mem), max(init_cores, cores)
                else:
                    app_mem, app_cores = app_mem + mem, app_cores + cores
            mem, cores = max(app_mem, init_mem), max(app_cores, init_cores)
            if (mem or cores) and not self.fits(namespace, vendor, mem, cores):
                return False
        return True

    def entries(self) -> Iterator[QuotaEntry]:
        """Every (namespace, resource) with usage or a limit, for metrics."""
        for namespace in sorted(self._used.keys() | self._limits.keys()):
            used = self._used.get(namespace, {})
            limits = self._limits.get(namespace, {})
            for resource in sorted(used.keys() | limits.keys()):
                yield QuotaEntry(namespace, resource, used.get(resource, 0), limits.get(resource))
