"""`Vendor.quick_judge` (the engine's per-pod form of `quick_verdict`, specialised for a plain
request in `devices/quick.py`) answers exactly as the ladder's `quick_verdict` does."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import device, device_request, pod
from vgpu_scheduler.devices import quick
from vgpu_scheduler.devices.protocol import QuickJudge
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.fit import PodFitContext, pod_fit_context
from vgpu_scheduler.model import (
    PERCENTAGE_UNSET,
    ContainerDeviceRequest,
    DeviceInfo,
    DeviceUsage,
    MigPlacement,
    MigProfile,
)
from vgpu_scheduler.wire import keys

VENDORS = build()
NV = VENDORS.get("NVIDIA")
assert NV is not None

PROFILE = MigProfile("1g.10gb", 9856, 14, 1, (MigPlacement(0, 1), MigPlacement(1, 1)))


@st.composite
def devices(draw: st.DrawFn) -> tuple[list[DeviceInfo], list[DeviceUsage]]:
    devs: list[DeviceInfo] = []
    usage: list[DeviceUsage] = []
    for i in range(draw(st.integers(0, 6))):
        count = draw(st.integers(1, 4))
        devmem = draw(st.sampled_from([0, 8000, 24576]))
        devcore = draw(st.sampled_from([0, 50, 100]))
        mig = draw(st.integers(0, 5)) == 0
        devs.append(device(
            f"GPU-{i}", index=i, count=count, devmem=devmem, devcore=devcore,
            type=draw(st.sampled_from(["NVIDIA-A100", "NVIDIA-T4"])), health=draw(st.integers(0, 6)) > 0,
            mode="mig" if mig else "hami-core", mig_profiles=(PROFILE,) if mig else (),
        ))
        usage.append(DeviceUsage(
            used=draw(st.integers(0, count)), usedmem=draw(st.integers(0, devmem)),
            usedcores=draw(st.integers(0, devcore)), mig_conflict=draw(st.integers(0, 8)) == 0,
        ))
    return devs, usage


ANNOTATIONS = st.fixed_dictionaries({}, optional={
    keys.USE_GPUTYPE: st.sampled_from(["A100", "t4", "H100"]),
    keys.NOUSE_GPUTYPE: st.sampled_from(["A100", "T4"]),
    keys.USE_GPUUUID: st.sampled_from(["GPU-0", "GPU-1,GPU-3"]),
    keys.NOUSE_GPUUUID: st.sampled_from(["GPU-2", "GPU-0,GPU-4"]),
    keys.VGPU_MODE: st.sampled_from(["hami-core", "mig"]),
    keys.GPU_SCHEDULER_POLICY: st.sampled_from(["binpack", "spread", "mutex"]),
})


@settings(max_examples=400, deadline=None)
@given(
    node=devices(),
    annotations=ANNOTATIONS,
    nums=st.integers(-1, 4),
    mem=st.sampled_from([0, 1000, 8000, 30000]),
    pct=st.sampled_from([PERCENTAGE_UNSET, 0, 50, 100]),
    cores=st.sampled_from([0, 30, 100, 150]),
    cordon=st.sampled_from([frozenset(), frozenset({"GPU-1"})]),
    reversed_order=st.booleans(),
)
def test_judge_answers_as_the_ladder(
    node: tuple[list[DeviceInfo], list[DeviceUsage]],
    annotations: dict[str, str],
    nums: int,
    mem: int,
    pct: int,
    cores: int,
    cordon: frozenset[str],
    reversed_order: bool,
) -> None:
    devs, usage = node
    ctx = pod_fit_context(pod(annotations=annotations), vendors=VENDORS)
    request = device_request(nums, mem=mem, pct=pct, cores=cores)
    positions = list(range(len(devs)))[:: -1 if reversed_order else 1]
    expected = NV.quick_verdict(request, devs, usage, positions, ctx=ctx, cordoned=cordon)
    judge = NV.quick_judge(request, ctx)
    assert (None if judge is None else judge(devs, usage, positions, cordon)) == expected


def _pinned_judge(uuids: str) -> tuple[PodFitContext, ContainerDeviceRequest, QuickJudge]:
    ctx = pod_fit_context(pod(annotations={keys.USE_GPUUUID: uuids}), vendors=VENDORS)
    request = device_request(1, mem=1000)
    judge = NV.quick_judge(request, ctx)
    assert judge is not None
    return ctx, request, judge


def test_pinned_judge_reads_health_and_usage_on_every_call() -> None:
    """The pinned fast path remembers a node's device ids, never its health or usage."""
    ctx, request, judge = _pinned_judge("GPU-9")
    devs = [device(f"GPU-{i}", index=i, count=4, devmem=8000, devcore=100, health=True) for i in range(4)]
    usage = [DeviceUsage() for _ in devs]
    positions = [0, 1, 2, 3]
    for step in range(3):
        if step == 1:
            usage[2].mig_conflict = True
        if step == 2:
            devs[0].health = False
        expected = NV.quick_verdict(request, devs, usage, positions, ctx=ctx, cordoned=frozenset())
        assert judge(devs, usage, positions, frozenset()) == expected
    assert "2/4" in expected  # two unhealthy devices counted by the last call


def test_pinned_judge_follows_the_devices_object() -> None:
    """The same positions list over another inventory (one holding the pinned uuid) is judged
    on that inventory, not on the ids remembered for the first."""
    ctx, request, judge = _pinned_judge("GPU-1")
    positions = [0, 1]
    for ids in (("GPU-7", "GPU-8"), ("GPU-0", "GPU-1"), ("GPU-7", "GPU-8")):
        devs = [device(uuid, index=i, count=4, devmem=8000, devcore=100, health=True)
                for i, uuid in enumerate(ids)]
        usage = [DeviceUsage() for _ in devs]
        expected = NV.quick_verdict(request, devs, usage, positions, ctx=ctx, cordoned=frozenset())
        assert judge(devs, usage, positions, frozenset()) == expected


def test_remembered_inventories_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quick, "_MAX_INVENTORIES", 8)
    monkeypatch.setattr(quick, "_inventories", {})
    _, _, judge = _pinned_judge("GPU-9")
    devs = [device("GPU-0", count=4, devmem=8000, devcore=100, health=True)]
    usage = [DeviceUsage()]
    for _ in range(50):
        judge(devs, usage, [0], frozenset())
        assert len(quick._inventories) <= 8
