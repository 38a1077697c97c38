"""§5.5: device scores (float32), node default score, scoring-weights parsing."""

from __future__ import annotations

from functools import partial

import pytest

from tests.builders import container_requests, device
from vgpu_scheduler.engine.nodeview import DeviceUsage
from vgpu_scheduler.engine.scores import (
    DEFAULT_WEIGHTS,
    ScoringWeightsError,
    device_score,
    device_scores,
    f32,
    node_default_score,
    parse_scoring_weights,
    pod_scoring_weights,
)
from vgpu_scheduler.model import NVIDIA, ContainerDeviceRequest, DeviceInfo

KEY = "hami.io/device-scoring-weights"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("slot=1,core=1,memory=3", (1, 1, 3), id="all three in order"),
        pytest.param(" memory = 2 , slot=0,core= 5 ", (0, 5, 2), id="spaces and any order"),
        pytest.param("core=0,memory=0,slot=+7", (7, 0, 0), id="plus sign, two zeros"),
        pytest.param("slot=0,core=0,memory=1", (0, 0, 1), id="memory only"),
        pytest.param("slot=9223372036854775807,core=0,memory=0", (2**63 - 1, 0, 0), id="int64 max"),
    ],
)
def test_parse_scoring_weights_valid(value: str, expected: tuple[int, int, int]) -> None:
    assert parse_scoring_weights(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("slot=1,core=1", 'annotation "slot=1,core=1": expected slot, core, and memory weights'),
        ("", 'annotation "": expected slot, core, and memory weights'),
        (
            "slot=1,core=1,memory=1,",
            'annotation "slot=1,core=1,memory=1,": expected slot, core, and memory weights',
        ),
        ("slot=1,core,memory=1", 'annotation "slot=1,core,memory=1": expected key=value entries'),
        ("slot=1,slot=2,memory=1", 'annotation "slot=1,slot=2,memory=1": duplicate "slot" weight'),
        ("slot=a,core=1,memory=1", 'annotation "slot=a,core=1,memory=1": "slot" weight must be an integer'),
        (
            "slot=1.5,core=1,memory=1",
            'annotation "slot=1.5,core=1,memory=1": "slot" weight must be an integer',
        ),
        (
            "slot=1_0,core=1,memory=1",
            'annotation "slot=1_0,core=1,memory=1": "slot" weight must be an integer',
        ),
        ("slot=,core=1,memory=1", 'annotation "slot=,core=1,memory=1": "slot" weight must be an integer'),
        (
            "slot=9223372036854775808,core=1,memory=1",
            'annotation "slot=9223372036854775808,core=1,memory=1": "slot" weight must be an integer',
        ),
        (
            "slot=1,core=-1,memory=1",
            'annotation "slot=1,core=-1,memory=1": "core" weight must not be negative',
        ),
        ("gpu=1,core=1,memory=1", 'annotation "gpu=1,core=1,memory=1": unknown weight "gpu"'),
        ("Slot=1,core=1,memory=1", 'annotation "Slot=1,core=1,memory=1": unknown weight "Slot"'),
        (
            "slot=0,core=0,memory=0",
            'annotation "slot=0,core=0,memory=0": at least one weight must be positive',
        ),
    ],
)
def test_parse_scoring_weights_invalid(value: str, message: str) -> None:
    with pytest.raises(ScoringWeightsError) as err:
        parse_scoring_weights(value)
    assert str(err.value) == f"invalid {KEY} {message}"
    assert isinstance(err.value, ValueError)


def test_pod_scoring_weights() -> None:
    assert pod_scoring_weights({}) == DEFAULT_WEIGHTS == (1, 1, 1)
    assert pod_scoring_weights({KEY: "slot=0,core=2,memory=1"}) == (0, 2, 1)
    with pytest.raises(ScoringWeightsError):
        pod_scoring_weights({KEY: "bogus"})


# A 16 GiB model-named device ("NVIDIA-A100"): request terms apply only to type NVIDIA.
dev = partial(device, "GPU-0", devmem=16384)
r = container_requests


# Expected values worked out by hand in float32 (see comments); float64 would differ.
@pytest.mark.parametrize(
    ("device", "usage", "requests", "weights", "expected"),
    [
        # Request terms apply only when the device type equals the request type ("NVIDIA"):
        # 10*((1+3)/10 + (20+40)/100 + (4096+6144)/16384) = 10*(0.4+0.6+0.625); 0.4f+0.6f rounds to 1.0.
        pytest.param(dev(type=NVIDIA), (3, 40, 6144), r(1, mem=4096, cores=20), (1, 1, 1), 16.25,
                     id="with-request-terms"),
        # Model-named device: usage only. 0.3f+0.4f is a float32 tie rounded to even (0.70000005),
        # +0.375 = 1.07500005, *10 is again a tie rounded to even: exactly 10.75.
        pytest.param(dev(), (3, 40, 6144), r(1, mem=4096, cores=20), (1, 1, 1), 10.75,
                     id="usage-only-float32"),
        # Nums does not matter: one request entry counts one slot.
        pytest.param(dev(type=NVIDIA), (0, 0, 0), r(4), (1, 1, 1), 1.0, id="entry-counts-one-slot"),
        # Percentage term uses this device's memory: 16384*25/100 = 4096 -> 10*(0.1f + 0.25).
        pytest.param(
            dev(type=NVIDIA), (0, 0, 0), r(1, pct=25), (1, 1, 1), f32(10 * f32(0.1 + 0.25)), id="percentage"
        ),
        # pct 0 is treated like "use Memreq".
        pytest.param(dev(type=NVIDIA), (0, 0, 0), r(1, mem=8192, pct=0), (1, 1, 1), 6.0,
                     id="pct0-uses-memreq"),
        pytest.param(dev(), (3, 40, 6144), {}, (0, 0, 1), 3.75, id="memory-weight-only"),
        # 2*0.3f + 0.4f = 1.00000003 -> 1.0 in float32.
        pytest.param(dev(), (3, 40, 6144), {}, (2, 1, 0), 10.0, id="weighted"),
        pytest.param(dev(count=0), (3, 40, 6144), {}, (1, 1, 1), 0.0, id="count-0"),
        pytest.param(dev(devcore=0), (3, 40, 6144), {}, (1, 1, 1), 0.0, id="devcore-0"),
        pytest.param(dev(devmem=0), (3, 40, 6144), {}, (1, 1, 1), 0.0, id="devmem-0"),
    ],
)
def test_device_score(
    device: DeviceInfo,
    usage: tuple[int, int, int],
    requests: dict[str, ContainerDeviceRequest],
    weights: tuple[int, int, int],
    expected: float,
) -> None:
    assert device_score(device, *usage, requests=requests, weights=weights) == expected


def test_device_score_is_float32_not_float64() -> None:
    # 0.1f + 0.2f rounds to 0.30000001; *10 = 3.00000012 is a float32 tie rounded to even: 3.0.
    assert device_score(dev(), 1, 20, 0) == 3.0
    assert 10 * (1 / 10 + 20 / 100 + 0 / 16384) != 3.0  # float64 gives 3.0000000000000004


def test_device_scores_batch_matches_single() -> None:
    devices = [dev(), dev(type=NVIDIA), dev(count=0), dev(devmem=40000)]
    used, cores, mem = [1, 2, 3, 4], [10, 20, 30, 40], [100, 2000, 300, 4000]
    batch = device_scores(devices, used, cores, mem, requests=r(1, mem=1000, cores=10), weights=(2, 3, 5))
    singles = [
        device_score(d, u, c, m, requests=r(1, mem=1000, cores=10), weights=(2, 3, 5))
        for d, u, c, m in zip(devices, used, cores, mem, strict=True)
    ]
    assert batch == singles


def node_devices(*specs: tuple[int, int, int]) -> list[DeviceInfo]:
    """(count, devcore, devmem) per device."""
    return [device(f"GPU-{i}", count=c, devcore=k, devmem=m) for i, (c, k, m) in enumerate(specs)]


@pytest.mark.parametrize(
    ("specs", "usage", "expected"),
    [
        # 5/20 + 50/200 + 500/2000 = 0.75
        pytest.param(((10, 100, 1000), (10, 100, 1000)), ((5, 50, 250), (0, 0, 250)), 7.5,
                     id="sums over two devices"),
        pytest.param(((10, 100, 1000),), ((0, 0, 0),), 0.0, id="idle device"),
        pytest.param(((0, 100, 1000),), ((1, 1, 1),), 0.0, id="count 0 gives 0"),
        pytest.param(((10, 0, 1000),), ((1, 1, 1),), 0.0, id="devcore 0 gives 0"),
        pytest.param(((10, 100, 0),), ((1, 1, 1),), 0.0, id="devmem 0 gives 0"),
        pytest.param((), (), 0.0, id="no devices"),
        # 3/10 + 40/100 + 6144/16384 in float32 = 10.75 (see test_device_score).
        pytest.param(((10, 100, 16384),), ((3, 40, 6144),), 10.75, id="float32 rounding"),
    ],
)
def test_node_default_score(
    specs: tuple[tuple[int, int, int], ...], usage: tuple[tuple[int, int, int], ...], expected: float
) -> None:
    devices = node_devices(*specs)
    usages = [DeviceUsage(u, m, c) for u, c, m in usage]
    assert node_default_score(devices, usages) == expected
