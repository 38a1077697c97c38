"""ResourceQuota accounting (§5.8)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import container_requests, gpu_quota, grant, pod_devices, quota
from vgpu_scheduler.config import DeviceConfig, NvidiaConfig
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.quota import QuotaEntry, QuotaManager
from vgpu_scheduler.model import (
    NVIDIA,
    ContainerRequests,
    PodDevices,
)

MEM = "nvidia.com/gpumem"
CORES = "nvidia.com/gpucores"


def devices(*mem_cores: tuple[int, int]) -> PodDevices:
    """One container's grants, (mem, cores) on GPU-0, GPU-1, ..."""
    return pod_devices([grant(f"GPU-{i}", usedmem=m, usedcores=c) for i, (m, c) in enumerate(mem_cores)])


def manager(memory_factor: int = 1) -> QuotaManager:
    return QuotaManager.for_vendors(build(DeviceConfig(NvidiaConfig(memory_factor=memory_factor))))


@pytest.mark.parametrize(
    ("hard", "limits"),
    [
        ({f"limits.{MEM}": "4096", f"limits.{CORES}": "100"}, {MEM: 4096, CORES: 100}),
        ({f"limits.{MEM}": "2k"}, {MEM: 2000}),
        ({f"limits.{MEM}": "1Ki"}, {MEM: 1024}),
        ({f"limits.{MEM}": "0"}, {MEM: 0}),
        ({f"limits.{MEM}": "0.5"}, {}),  # not an integer
        ({f"limits.{MEM}": "1500m"}, {}),
        ({f"requests.{MEM}": "100", MEM: "100"}, {}),  # only limits.* count
        ({"limits.nvidia.com/gpu": "2", "limits.cpu": "4"}, {}),  # not a memory/core name
        ({f"limits.{MEM}": None, f"limits.{CORES}": ["x"]}, {}),
        ({f"requests.{MEM}": "1", f"limits.{MEM}": "100"}, {MEM: 100}),
        ({"limits.cpu": "4", f"limits.{CORES}": None, f"limits.{MEM}": "100"}, {MEM: 100}),
        ({f"counts.{MEM}": "100"}, {}),
    ],
    ids=["mem and cores", "decimal suffix", "binary suffix", "explicit zero", "fraction", "milli",
         "requests and bare names ignored", "unmanaged names", "garbage values",
         "a request before the limit", "unmanaged and garbage before the limit",
         "another prefix of the same length"],
)
def test_parse_limits(hard: dict[str, Any], limits: dict[str, int]) -> None:
    q = manager()
    assert q.parse_limits(quota(hard)) == limits
    q.upsert_quota(quota(hard))
    assert {r: q.limit("team", r) for r in (MEM, CORES) if q.limit("team", r) is not None} == limits


FITS_CASES = [
    # (id, hard, used (mem, cores), request (ns, vendor, mem, cores), memory factor, fits)
    ("no quota", {}, (0, 0), ("team", NVIDIA, 10**9, 100), 1, True),
    ("other namespace", {f"limits.{MEM}": "100"}, (0, 0), ("other", NVIDIA, 1000, 0), 1, True),
    ("unknown vendor", {f"limits.{MEM}": "100"}, (0, 0), ("team", "MLU", 1000, 0), 1, True),
    ("within memory", {f"limits.{MEM}": "4096"}, (1000, 0), ("team", NVIDIA, 3096, 0), 1, True),
    ("over memory", {f"limits.{MEM}": "4096"}, (1000, 0), ("team", NVIDIA, 3097, 0), 1, False),
    ("memory limit scaled by factor", {f"limits.{MEM}": "100"}, (0, 0), ("team", NVIDIA, 300, 0), 3, True),
    ("memory limit scaled by a factor of 2", {f"limits.{MEM}": "100"}, (0, 0), ("team", NVIDIA, 200, 0), 2,
     True),
    ("memory limit scaled by factor, over", {f"limits.{MEM}": "100"}, (0, 0), ("team", NVIDIA, 301, 0), 3,
     False),
    ("cores only limit ignores memory", {f"limits.{CORES}": "50"}, (0, 40), ("team", NVIDIA, 10**6, 10), 1,
     True),
    ("over cores", {f"limits.{CORES}": "50"}, (0, 40), ("team", NVIDIA, 0, 11), 1, False),
    ("explicit zero blocks any memory", {f"limits.{MEM}": "0"}, (0, 0), ("team", NVIDIA, 1, 0), 1, False),
    ("explicit zero cores", {f"limits.{CORES}": "0"}, (0, 0), ("team", NVIDIA, 10, 1), 1, False),
]


@pytest.mark.parametrize(("hard", "used", "asked", "factor", "fits"), [c[1:] for c in FITS_CASES],
                         ids=[c[0] for c in FITS_CASES])
def test_fits(hard: dict[str, Any], used: tuple[int, int], asked: tuple[str, str, int, int], factor: int,
              fits: bool) -> None:
    q = manager(factor)
    q.upsert_quota(quota(hard))
    q.add_usage("team", devices(used))
    assert q.fits(*asked) is fits


def test_usage_add_remove_never_negative() -> None:
    q = manager()
    q.add_usage("team", devices((1000, 10), (500, 5)))
    q.add_usage("team", devices((100, 1)))
    assert (q.used("team", MEM), q.used("team", CORES)) == (1600, 16)
    q.remove_usage("team", devices((1000, 10), (500, 5)))
    q.remove_usage("team", devices((100, 1)))
    q.remove_usage("team", devices((100, 1)))
    q.remove_usage("nobody", devices((100, 1)))
    assert (q.used("team", MEM), q.used("team", CORES)) == (0, 0)
    q.add_usage("team", devices((-50, -5)))
    assert (q.used("team", MEM), q.used("team", CORES)) == (0, 0)


def test_usage_counts_before_the_quota_exists() -> None:
    q = manager()
    q.add_usage("team", devices((3000, 0)))
    q.upsert_quota(quota({f"limits.{MEM}": "4000"}))
    assert not q.fits("team", NVIDIA, 1001, 0)
    assert q.fits("team", NVIDIA, 1000, 0)


def test_update_replaces_old_limits() -> None:
    q = manager()
    q.upsert_quota(quota({f"limits.{MEM}": "100", f"limits.{CORES}": "10"}))
    q.upsert_quota(quota({f"limits.{MEM}": "200"}))
    assert (q.limit("team", MEM), q.limit("team", CORES)) == (200, None)
    q.delete_quota(quota({f"limits.{MEM}": "200"}))
    assert q.limit("team", MEM) is None
    assert q.fits("team", NVIDIA, 10**6, 10**6)


def test_delete_of_unseen_quota_clears_what_it_names() -> None:
    q = manager()
    q.upsert_quota(quota({f"limits.{MEM}": "100"}, name="a"))
    q.delete_quota(quota({f"limits.{MEM}": "100"}, name="b"))
    assert q.limit("team", MEM) is None


def test_last_writer_wins_across_objects() -> None:
    q = manager()
    q.upsert_quota(quota({f"limits.{MEM}": "100"}, name="a"))
    q.upsert_quota(quota({f"limits.{MEM}": "300"}, name="b"))
    assert q.limit("team", MEM) == 300
    q.delete_quota(quota({f"limits.{MEM}": "300"}, name="b"))
    assert q.limit("team", MEM) is None  # as in HAMi: one limit per (namespace, resource)


def test_entries_for_metrics() -> None:
    q = manager()
    q.upsert_quota(quota({f"limits.{MEM}": "100"}))
    q.add_usage("team", devices((40, 5)))
    assert list(q.entries()) == [QuotaEntry("team", CORES, 5, None), QuotaEntry("team", MEM, 40, 100)]


def test_deleting_an_object_keeps_the_limits_of_the_others() -> None:
    q = manager()
    q.upsert_quota(quota({f"limits.{MEM}": "100"}, name="memory"))
    q.upsert_quota(quota({f"limits.{CORES}": "10"}, name="cores"))
    q.delete_quota(quota({f"limits.{MEM}": "100"}, name="memory"))
    assert (q.limit("team", MEM), q.limit("team", CORES)) == (None, 10)


def test_deleting_the_second_object_naming_a_cleared_limit_is_fine() -> None:
    q = manager()
    q.upsert_quota(quota({f"limits.{CORES}": "10"}, name="cores"))
    q.upsert_quota(quota({f"limits.{MEM}": "100"}, name="a"))
    q.upsert_quota(quota({f"limits.{MEM}": "300"}, name="b"))
    q.delete_quota(quota({f"limits.{MEM}": "100"}, name="a"))
    q.delete_quota(quota({f"limits.{MEM}": "300"}, name="b"))
    assert (q.limit("team", MEM), q.limit("team", CORES)) == (None, 10)


def test_usage_of_an_unknown_vendor_does_not_hide_the_next_vendor() -> None:
    q = manager()
    q.add_usage("team", {"NoSuch": [[grant("X-0", usedmem=7, usedcores=7)]], **devices((40, 5))})
    assert (q.used("team", MEM), q.used("team", CORES)) == (40, 5)


def test_a_namespace_never_changed_is_at_generation_zero() -> None:
    assert manager().generation("new") == 0


def test_every_change_moves_the_generation_up() -> None:
    q = manager()
    seen = [q.generation("team")]
    q.add_usage("team", devices((40, 5)))
    seen.append(q.generation("team"))
    q.upsert_quota(quota({f"limits.{MEM}": "100"}))
    seen.append(q.generation("team"))
    q.remove_usage("team", devices((40, 5)))
    seen.append(q.generation("team"))
    assert seen == sorted(set(seen))


def test_entries_list_a_namespace_with_usage_only_and_one_with_limits_only() -> None:
    q = manager()
    q.add_usage("busy", devices((40, 5)))
    q.upsert_quota(quota({f"limits.{MEM}": "100"}, namespace="limited"))
    assert list(q.entries()) == [
        QuotaEntry("busy", CORES, 5, None),
        QuotaEntry("busy", MEM, 40, None),
        QuotaEntry("limited", MEM, 0, 100),
    ]


req = container_requests


ADMISSION_CASES = [
    # (id, per-container requests, n_init, mem limit, cores limit, fits)
    ("app containers sum with nums", [req(2, mem=1000), req(1, mem=1000)], 0, 3000, None, True),
    ("app sum over", [req(2, mem=1000), req(1, mem=1001)], 0, 3000, None, False),
    ("init peak counts when larger", [req(1, mem=5000), req(1, mem=1000)], 1, 4000, None, False),
    ("init max not sum", [req(1, mem=3000), req(1, mem=3000), req(1, mem=1000)], 2, 3000, None, True),
    ("cores", [req(1, cores=60, pct=100), req(1, cores=50, pct=100)], 0, None, 100, False),
    ("percentage memory counts as 0", [req(1, pct=50)], 0, 0, None, True),
    ("no device request", [{}, {}], 0, 0, 0, True),
    ("a container without the vendor does not end the count", [{}, req(1, mem=5000)], 0, 4000, None, False),
    ("cores count nums times", [req(2, cores=30, pct=100)], 0, None, 50, False),
]


@pytest.mark.parametrize(("requests", "n_init", "mem_limit", "cores_limit", "fits"),
                         [c[1:] for c in ADMISSION_CASES], ids=[c[0] for c in ADMISSION_CASES])
def test_admission_fits(requests: list[ContainerRequests], n_init: int, mem_limit: int | None,
                        cores_limit: int | None, fits: bool) -> None:
    q = manager()
    q.upsert_quota(gpu_quota(mem=mem_limit, cores=cores_limit))
    assert q.admission_fits("team", requests, n_init) is fits
