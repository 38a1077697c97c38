import json
import math
from typing import Any

import pytest

from tests.builders import pod
from vgpu_scheduler.model import PERCENTAGE_UNSET, ContainerDeviceRequest
from vgpu_scheduler.simulate.report import (
    DeviceDemand,
    DeviceState,
    PodOutcome,
    TimelinePoint,
    build_report,
    dumps_report,
    fragmentation,
)

A100 = "NVIDIA A100-SXM4-80GB"
V100 = "NVIDIA-Tesla V100-PCIE-32GB"


def dev(
    node: str = "n1",
    index: int = 0,
    *,
    type: str = V100,
    devmem: int = 32768,
    used: int = 0,
    usedmem: int = 0,
    usedcores: int = 0,
    count: int = 10,
    health: bool = True,
) -> DeviceState:
    return DeviceState(
        node=node,
        index=index,
        uuid=f"GPU-{node}-{index}",
        type=type,
        count=count,
        devmem=devmem,
        devcore=100,
        used=used,
        usedmem=usedmem,
        usedcores=usedcores,
        health=health,
    )


# -- DeviceDemand ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("demand", "device", "fits"),
    [
        pytest.param(DeviceDemand(memreq=8000), dev(usedmem=20000), True, id="memory fits"),
        # 12768 free
        pytest.param(DeviceDemand(memreq=13000), dev(usedmem=20000), False, id="memory over what is free"),
        # needs 16384, 16268 free
        pytest.param(DeviceDemand(mem_percentage=50), dev(usedmem=16500), False,
                     id="percentage over what is free"),
        pytest.param(DeviceDemand(mem_percentage=50), dev(usedmem=16384), True, id="percentage exactly free"),
        pytest.param(DeviceDemand(memreq=1), dev(used=10), False, id="split count exhausted"),
        pytest.param(DeviceDemand(memreq=1, coresreq=30), dev(usedcores=80), False,
                     id="cores over what is free"),
        pytest.param(
            DeviceDemand(memreq=1, coresreq=100),
            dev(used=1, usedcores=0),
            False,
            id="exclusive wants an idle GPU",
        ),
        pytest.param(DeviceDemand(memreq=1, coresreq=0), dev(used=1, usedcores=100), False,
                     id="compute units exhausted"),
        # clamped to 100
        pytest.param(DeviceDemand(memreq=1, coresreq=150), dev(), True, id="cores over 100 clamped"),
        pytest.param(DeviceDemand(memreq=1), dev(health=False), False, id="unhealthy"),
        pytest.param(DeviceDemand(memreq=1, use_types=("a100",)), dev(), False, id="use type mismatch"),
        pytest.param(DeviceDemand(memreq=1, use_types=("a100",)), dev(type=A100, devmem=81920), True,
                     id="use type matches"),
        pytest.param(DeviceDemand(memreq=1, nouse_types=("v100",)), dev(), False, id="nouse type matches"),
    ],
)
def test_device_demand_fits(demand: DeviceDemand, device: DeviceState, fits: bool) -> None:
    assert demand.fits(device) is fits


def test_device_demand_from_engine_request() -> None:
    req = ContainerDeviceRequest(nums=2, type="NVIDIA", memreq=0, mem_percentage_req=25, coresreq=30)
    demand = DeviceDemand.from_request(req, use_types=[" A100 ", ""], nouse_types=["T4"])
    assert demand == DeviceDemand(0, 25, 30, ("a100",), ("t4",))
    assert demand.memory_on(dev(devmem=32768)) == 8192
    assert DeviceDemand(memreq=0).memory_on(dev()) == 0
    assert DeviceDemand(memreq=0, mem_percentage=PERCENTAGE_UNSET).memory_on(dev()) == 0


# -- fragmentation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("devices", "demands", "expected"),
    [
        # nothing pending: nothing is blocked
        pytest.param([dev(usedmem=10000)], [], (0, 22768), id="nothing pending: nothing blocked"),
        pytest.param([dev(usedmem=10000)], [DeviceDemand(memreq=30000)], (22768, 22768),
                     id="too large for the device"),
        pytest.param(
            [dev(usedmem=10000), dev(index=1, usedmem=30000)], [DeviceDemand(memreq=20000)], (2768, 25536),
            id="blocked on one device of two",
        ),
        pytest.param([dev(used=10, usedmem=1000)], [DeviceDemand(memreq=1)], (31768, 31768),
                     id="no free slot"),
        pytest.param([dev(usedmem=32768)], [DeviceDemand(memreq=1)], (0, 0), id="nothing free"),
        pytest.param([dev(usedmem=40000)], [DeviceDemand(memreq=1)], (0, 0),
                     id="over-committed counts as 0 free"),
        pytest.param([dev(health=False)], [DeviceDemand(memreq=1)], (0, 0),
                     id="unhealthy memory is not free"),
        pytest.param([dev()], [DeviceDemand(memreq=40000), DeviceDemand(memreq=100)], (0, 32768),
                     id="any one demand fitting is enough"),
        # type filters: an A100-only demand cannot use a V100
        pytest.param(
            [dev(), dev("n2", type=A100, devmem=81920, usedmem=70000)],
            [DeviceDemand(memreq=4096, use_types=("a100",))],
            (32768, 32768 + 11920),
            id="type filter: a V100 for an A100 demand",
        ),
    ],
)
def test_fragmentation(
    devices: list[DeviceState], demands: list[DeviceDemand], expected: tuple[int, int]
) -> None:
    assert fragmentation(devices, demands) == expected


# -- report ----------------------------------------------------------------------------------------


def sample_report(**overrides: Any) -> dict[str, Any]:
    outcomes = [
        PodOutcome(pod("b", annotations={"hami.io/vgpu-node": "n1", "a": "1"}), "n1",
            {"n2": "ignored for bound pods"}),
        PodOutcome(pod("a", namespace="team"), None, {"n2": "1/8 CardInsufficientMemory",
            "n1": "Insufficient cpu"}),
        PodOutcome(pod("c", annotations={}), "n2"),
    ]
    devices = [
        dev("n2", 0, type=A100, devmem=81920, used=1, usedmem=40960, usedcores=50),
        dev("n1", 1, used=2, usedmem=8192, usedcores=30),
        dev("n1", 0),
    ]
    timeline = [
        TimelinePoint(10.0, 2, 1, 3, 49152, 80),
        TimelinePoint(0.0, 0, 3, 0, 0, 0),
        TimelinePoint(5.0, 3, 0, 5, 100000, 280),
    ]
    kwargs: dict[str, Any] = {
        "demands": [DeviceDemand(memreq=50000)],
        "makespan": 1234.56789,
        "timeline": timeline,
    }
    kwargs.update(overrides)
    return build_report(outcomes, devices, **kwargs)


def test_report_schema_and_values() -> None:
    report = sample_report()
    assert set(report) == {"pods", "summary", "devices", "timeline"}
    assert report["pods"] == [
        {
            "namespace": "default",
            "name": "b",
            "node": "n1",
            "annotations": {"a": "1", "hami.io/vgpu-node": "n1"},
            "reasons": {},
        },
        {
            "namespace": "team",
            "name": "a",
            "node": None,
            "annotations": {},
            "reasons": {"n1": "Insufficient cpu", "n2": "1/8 CardInsufficientMemory"},
        },
        {"namespace": "default", "name": "c", "node": "n2", "annotations": {}, "reasons": {}},
    ]
    total_mem = 81920 + 2 * 32768
    assert report["summary"] == {
        "end": "done",
        "pods": {"total": 3, "scheduled": 2, "pending": 1, "pending_error": 0},
        "gpu_nodes": 2,
        "gpus": 3,
        "allocation": {
            "memory": {
                "allocated_mib": 49152,
                "capacity_mib": total_mem,
                "ratio": round(49152 / total_mem, 6),
            },
            "cores": {"allocated": 80, "capacity": 300, "ratio": round(80 / 300, 6)},
            "slots": {"allocated": 3, "capacity": 30, "ratio": 0.1},
        },
        "peak_allocation": {
            "memory_ratio": round(100000 / total_mem, 6),
            "core_ratio": round(280 / 300, 6),
            "slot_ratio": round(5 / 30, 6),
        },
        # free: n2 40960 (fits 50000? no), n1/1 24576 (no), n1/0 32768 (no) -> all fragmented
        "fragmentation": {
            "free_memory_mib": 40960 + 24576 + 32768,
            "fragmented_memory_mib": 98304,
            "fraction": 1.0,
        },
        "makespan_seconds": 1234.568,
    }
    assert [(d["node"], d["index"]) for d in report["devices"]] == [("n1", 0), ("n1", 1), ("n2", 0)]
    assert [p["time"] for p in report["timeline"]] == [0.0, 5.0, 10.0]
    assert report["timeline"][1] == {
        "time": 5.0,
        "running": 3,
        "pending": 0,
        "memory_ratio": round(100000 / total_mem, 6),
        "core_ratio": round(280 / 300, 6),
        "slot_ratio": round(5 / 30, 6),
    }


def test_peak_defaults_to_final_without_timeline_and_empty_fleet_gives_zero_ratios() -> None:
    report = sample_report(timeline=())
    assert report["summary"]["peak_allocation"]["slot_ratio"] == 0.1
    empty = build_report([], [])
    assert empty["summary"]["allocation"]["memory"]["ratio"] == 0.0
    assert empty["summary"]["fragmentation"] == {
        "free_memory_mib": 0,
        "fragmented_memory_mib": 0,
        "fraction": 0.0,
    }
    assert empty["pods"] == [] and empty["devices"] == [] and empty["timeline"] == []


def test_serialisation_is_byte_identical_and_canonical() -> None:
    first = dumps_report(sample_report())
    second = dumps_report(sample_report())
    assert first == second
    assert first.endswith("}\n")
    parsed = json.loads(first)
    assert dumps_report(parsed) == first  # canonical: re-serialising changes nothing
    assert list(parsed["summary"]) == sorted(parsed["summary"])
    assert [p["name"] for p in parsed["pods"]] == ["b", "a", "c"]  # lists keep input order


def test_serialisation_is_the_indenting_encoders() -> None:
    """What `json.dumps` with indent 2 writes, whatever the values: exponent floats, escapes,
    non-ASCII text, empty containers, integer keys, big integers."""
    report = {
        "floats": [1e-05, 1e16, 1.5e300, 0.1, -0.0, 123456789012345678.0, 2.0],
        "text": "tab\t\u2028\x7f\x00\b\f\x01\x1f/\\\"é",
        "empty": [[], {}, [1, []], {"x": {}}],
        "ints": {2: 1, 10: 2},
        "big": 10**30,
        "nested": {"z": [{"b": True, "a": None}], "a": "ü"},
    }
    want = json.dumps(report, sort_keys=True, indent=2, ensure_ascii=False, separators=(",", ": ")) + "\n"
    assert dumps_report(report) == want
    assert dumps_report(sample_report()) == json.dumps(
        sample_report(), sort_keys=True, indent=2, ensure_ascii=False, separators=(",", ": ")
    ) + "\n"


def test_serialisation_rejects_non_finite_numbers() -> None:
    with pytest.raises(ValueError, match="Out of range float"):
        dumps_report(sample_report(makespan=math.inf))


def test_pod_without_usable_metadata_still_reports() -> None:
    report = build_report([PodOutcome({"metadata": "bogus"}, None)], [])
    assert report["pods"] == [
        {"namespace": "default", "name": "", "node": None, "annotations": {}, "reasons": {}}
    ]
