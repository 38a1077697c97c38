"""§5.1: per-container NVIDIA requests, one row per rule."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import container, device_request, pod
from vgpu_scheduler.config import NvidiaConfig
from vgpu_scheduler.devices.nvidia.requests import nvidia_request
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.requests import (
    init_container_count,
    pod_has_device_requests,
    pod_requests,
)
from vgpu_scheduler.model import NVIDIA, ContainerDeviceRequest

CFG = NvidiaConfig()
VENDORS = build()


def ctr(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> dict[str, Any]:
    return container("c", limits=limits, requests=requests)


def req(nums: int, mem: int, pct: int, cores: int) -> ContainerDeviceRequest:
    return device_request(nums, mem=mem, pct=pct, cores=cores)


GPU = "nvidia.com/gpu"
MEM = "nvidia.com/gpumem"
PCT = "nvidia.com/gpumem-percentage"
CORES = "nvidia.com/gpucores"


@pytest.mark.parametrize(
    ("container", "cfg", "expected"),
    [
        pytest.param(ctr({GPU: "1"}), CFG, req(1, 0, 100, 0), id="gpu-only-whole-card-percentage"),
        pytest.param(ctr({GPU: "2", MEM: "4096"}), CFG, req(2, 4096, 101, 0), id="explicit-memory"),
        pytest.param(ctr({GPU: "1", PCT: "50"}), CFG, req(1, 0, 50, 0), id="percentage"),
        pytest.param(ctr({GPU: "1", PCT: "150"}), CFG, req(1, 0, 100, 0), id="percentage-over-100-clamped"),
        pytest.param(ctr({GPU: "1", PCT: "101"}), CFG, req(1, 0, 100, 0), id="percentage-101-clamped"),
        pytest.param(ctr({GPU: "1", PCT: "0"}), CFG, req(1, 0, 100, 0), id="percentage-0-is-unset"),
        pytest.param(ctr({GPU: "1", PCT: "-1"}), CFG, req(1, 0, 100, 0), id="percentage-negative-is-unset"),
        pytest.param(
            ctr({GPU: "1", PCT: "0", MEM: "2000"}), CFG, req(1, 2000, 101, 0), id="pct0-plus-memory"
        ),
        pytest.param(ctr({GPU: "1", PCT: "0.5"}), CFG, req(1, 0, 100, 0), id="percentage-not-int-ignored"),
        pytest.param(
            ctr({GPU: "1", PCT: "30", MEM: "2000"}), CFG, req(1, 2000, 30, 0), id="pct-and-memory-kept"
        ),
        pytest.param(
            ctr({GPU: "1"}), NvidiaConfig(default_memory=512), req(1, 512, 101, 0), id="default-memory"
        ),
        pytest.param(
            ctr({GPU: "1", PCT: "0"}),
            NvidiaConfig(default_memory=512),
            req(1, 512, 101, 0),
            id="default-memory-when-pct-0",
        ),
        pytest.param(
            ctr({GPU: "1", MEM: "0"}),
            NvidiaConfig(default_memory=512),
            req(1, 512, 101, 0),
            id="mem-0-default",
        ),
        pytest.param(ctr({GPU: "1", CORES: "30"}), CFG, req(1, 0, 100, 30), id="cores"),
        pytest.param(ctr({GPU: "1", CORES: "150"}), CFG, req(1, 0, 100, 150), id="cores-over-100-kept"),
        pytest.param(ctr({GPU: "1"}), NvidiaConfig(default_cores=20), req(1, 0, 100, 20), id="default-cores"),
        pytest.param(
            ctr({GPU: "1", CORES: "0.5"}),
            NvidiaConfig(default_cores=20),
            req(1, 0, 100, 20),
            id="cores-invalid",
        ),
        pytest.param(
            ctr({GPU: "1", MEM: "1024"}), NvidiaConfig(memory_factor=2), req(1, 2048, 101, 0), id="factor"
        ),
        pytest.param(
            ctr({GPU: "1", MEM: "1024"}), NvidiaConfig(memory_factor=0), req(1, 1024, 101, 0), id="factor-0"
        ),
        pytest.param(
            ctr({GPU: "1", MEM: "1073741823"}),
            NvidiaConfig(memory_factor=2),
            req(1, 2147483646, 101, 0),
            id="memory-at-int32-limit-with-factor",
        ),
        pytest.param(
            ctr({GPU: "1", MEM: "2147483647"}), CFG, req(1, 2147483647, 101, 0), id="memory-int32-max"
        ),
        pytest.param(
            ctr(requests={GPU: "1", MEM: "3000"}), CFG, req(1, 3000, 101, 0), id="requests-fallback"
        ),
        pytest.param(
            ctr({GPU: "1"}, requests={MEM: "3000"}), CFG, req(1, 3000, 101, 0), id="per-resource-fallback"
        ),
        pytest.param(
            ctr({GPU: "1", MEM: "1000"}, requests={GPU: "3", MEM: "3000"}),
            CFG,
            req(1, 1000, 101, 0),
            id="limits-win",
        ),
        pytest.param(ctr({GPU: "2000m"}), CFG, req(2, 0, 100, 0), id="count-milli-integer"),
        pytest.param(ctr({GPU: 2}), CFG, req(2, 0, 100, 0), id="count-json-number"),
        pytest.param(ctr({GPU: "0"}), CFG, req(0, 0, 100, 0), id="count-zero-returned-not-kept"),
        pytest.param(
            ctr({"hami.io/gpu": "1", "hami.io/gpumem": "100"}),
            NvidiaConfig(resource_count_name="hami.io/gpu", resource_memory_name="hami.io/gpumem"),
            req(1, 100, 101, 0),
            id="custom-names",
        ),
    ],
)
def test_container_requests(
    container: dict[str, Any], cfg: NvidiaConfig, expected: ContainerDeviceRequest
) -> None:
    assert nvidia_request(container, cfg) == expected


@pytest.mark.parametrize(
    ("container", "cfg"),
    [
        pytest.param(ctr({}), CFG, id="nothing"),
        pytest.param({"name": "c"}, CFG, id="no-resources"),
        pytest.param(ctr({MEM: "1000"}), CFG, id="memory-without-count"),
        pytest.param(ctr({GPU: "0.5"}), CFG, id="count-not-integer"),
        pytest.param(ctr({GPU: "1500m"}), CFG, id="count-milli-fraction"),
        pytest.param(ctr({GPU: "abc"}), CFG, id="count-garbage"),
        pytest.param(ctr({GPU: "0.5"}, requests={GPU: "1"}), CFG, id="invalid-limit-not-rescued-by-request"),
        pytest.param(ctr({GPU: "1", MEM: "16Gi"}), CFG, id="memory-16Gi-over-int32"),
        pytest.param(ctr({GPU: "1", MEM: "0.5"}), CFG, id="memory-not-integer"),
        pytest.param(ctr({GPU: "1", MEM: "-1"}), CFG, id="memory-negative"),
        pytest.param(ctr({GPU: "1", MEM: "2147483648"}), CFG, id="memory-over-int32"),
        pytest.param(
            ctr({GPU: "1", MEM: "1073741824"}), NvidiaConfig(memory_factor=2), id="memory-over-with-factor"
        ),
        pytest.param(ctr({GPU: "1", MEM: "1Gi"}), NvidiaConfig(memory_factor=2), id="memory-1Gi-factor-2"),
    ],
)
def test_container_requests_nothing(container: dict[str, Any], cfg: NvidiaConfig) -> None:
    assert nvidia_request(container, cfg) is None


def test_pod_requests_init_first_and_empty_entries() -> None:
    p = pod(
        namespace="ns",
        init_containers=[ctr({GPU: "1", MEM: "100"}), ctr({})],
        containers=[ctr({}), ctr({GPU: "2", PCT: "25"}), ctr({GPU: "0"}), ctr({GPU: "1", MEM: "16Gi"})],
    )
    assert pod_requests(p, VENDORS) == [
        {NVIDIA: req(1, 100, 101, 0)},
        {},
        {},
        {NVIDIA: req(2, 0, 25, 0)},
        {},  # Nums 0 is not kept
        {},  # whole request dropped
    ]
    assert init_container_count(p) == 2


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        pytest.param(pod(init_containers=[], containers=[ctr({})], namespace="ns"), False, id="no limits"),
        pytest.param(pod(init_containers=[], containers=[ctr({GPU: "0"})], namespace="ns"), False,
                     id="zero gpus"),
        pytest.param(pod(init_containers=[], containers=[ctr({GPU: "1"})], namespace="ns"), True,
                     id="one gpu"),
        pytest.param(pod(init_containers=[ctr({GPU: "1"})], containers=[ctr({})], namespace="ns"), True,
                     id="gpu in an init container"),
        pytest.param({"metadata": {}}, False, id="no spec"),
    ],
)
def test_pod_has_device_requests(p: dict[str, Any], expected: bool) -> None:
    assert pod_has_device_requests(pod_requests(p, VENDORS)) is expected
