"""`hami.io/vgpu-mig-allocations` (§4.6)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vgpu_scheduler.model import MigAllocation, MigPlacement
from vgpu_scheduler.wire.mig import MigAllocationError, decode_mig_allocations, encode_mig_allocations

SCHEDULED = MigAllocation(0, 0, "GPU-a", "2g.10gb", MigPlacement(0, 2))
REALIZED = MigAllocation(1, 0, "GPU-a", "1g.5gb", MigPlacement(6, 1), "MIG-x", 0, 0)


@pytest.mark.parametrize(
    ("allocations", "expected"),
    [
        pytest.param(
            [SCHEDULED],
            '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.10gb","placement":{"start":0,"size":2}}]',
            id="as-scheduled",
        ),
        pytest.param(
            [REALIZED],
            '[{"containerIndex":1,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":6,"size":1},'
            '"migUUID":"MIG-x","gpuInstanceID":0,"computeInstanceID":0}]',
            id="runtime-identity-zero-ids-written",
        ),
        pytest.param([], "[]", id="empty"),
    ],
)
def test_encode(allocations: list[MigAllocation], expected: str) -> None:
    assert encode_mig_allocations(allocations) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("", [], id="empty-annotation"),
        pytest.param("null", [], id="null"),
        pytest.param("[]", [], id="empty-list"),
        pytest.param(
            '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.10gb","placement":{"start":0,"size":2}}]',
            [SCHEDULED],
            id="scheduled",
        ),
        pytest.param(
            '[{"containerindex":1,"DEVICEINDEX":0,"gpuuuid":"GPU-a","Profile":"1g.5gb","placement":{"Start":6,"SIZE":1},'
            '"miguuid":"MIG-x","gpuinstanceid":0,"ComputeInstanceId":0,"unknown":true}]',
            [REALIZED],
            id="case-insensitive-unknown-ignored",
        ),
        pytest.param(
            '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.10gb","placement":{"start":0,"size":2},'
            '"migUUID":"","gpuInstanceID":null,"computeInstanceID":null}]',
            [SCHEDULED],
            id="empty-runtime-identity-is-none",
        ),
        pytest.param(
            '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.10gb","placement":{"start":0,"size":2}},'
            '{"containerIndex":0,"deviceIndex":1,"gpuUUID":"GPU-a","profile":"2g.10gb","placement":{"start":2,"size":2}}]',
            [SCHEDULED, MigAllocation(0, 1, "GPU-a", "2g.10gb", MigPlacement(2, 2))],
            id="same-gpu-two-devices",
        ),
    ],
)
def test_decode(value: str, expected: list[MigAllocation]) -> None:
    assert decode_mig_allocations(value) == expected


_OK = (
    '"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.10gb",'
    '"placement":{"start":0,"size":2}'
)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(
            '[{"deviceIndex":0,"gpuUUID":"","profile":"p","placement":{"size":1}}]',
            "MIG allocation 0 is incomplete",
            id="incomplete: empty gpuUUID",
        ),
        pytest.param(
            '[{"gpuUUID":"G","profile":"","placement":{"size":1}}]', "MIG allocation 0 is incomplete",
            id="incomplete: empty profile",
        ),
        pytest.param(
            '[{"gpuUUID":"G","profile":"p","placement":{"start":3,"size":0}}]',
            "MIG allocation 0 is incomplete",
            id="incomplete: size 0",
        ),
        pytest.param('[{"gpuUUID":"G","profile":"p"}]', "MIG allocation 0 is incomplete",
                     id="incomplete: no placement"),
        pytest.param(
            '[{"containerIndex":-1,"gpuUUID":"G","profile":"p","placement":{"size":1}}]',
            "MIG allocation 0 is incomplete",
            id="incomplete: negative container index",
        ),
        pytest.param(
            '[{"deviceIndex":-2,"gpuUUID":"G","profile":"p","placement":{"size":1}}]',
            "MIG allocation 0 is incomplete",
            id="incomplete: negative device index",
        ),
        pytest.param("[{" + _OK + ',"migUUID":"MIG-x"}]', "MIG allocation 0 has partial runtime identity",
                     id="migUUID without instance ids"),
        pytest.param(
            "[{" + _OK + ',"gpuInstanceID":1,"computeInstanceID":2}]',
            "MIG allocation 0 has partial runtime identity",
            id="instance ids without migUUID",
        ),
        pytest.param(
            "[{" + _OK + ',"migUUID":"M","gpuInstanceID":1}]',
            "MIG allocation 0 has partial runtime identity",
            id="computeInstanceID missing",
        ),
        pytest.param("[{" + _OK + "},{" + _OK + "}]", "duplicate MIG allocation for container 0 device 0",
                     id="duplicate container and device"),
        pytest.param("[{" + _OK + "}", "invalid MIG allocation JSON", id="broken JSON"),
        pytest.param('{"containerIndex":0}', "MIG allocation annotation must be a JSON array",
                     id="not an array"),
        pytest.param('["x"]', "MIG allocation 0 must be a JSON object", id="element not an object"),
        pytest.param(
            '[{"containerIndex":"0"}]', "MIG allocation 0: field 'containerIndex' must be an integer",
            id="containerIndex a string",
        ),
        pytest.param('[{"containerIndex":0.5}]', "field 'containerIndex' must be an integer",
                     id="containerIndex a float"),
        pytest.param('[{"gpuUUID":5}]', "field 'gpuUUID' must be a string", id="gpuUUID a number"),
        pytest.param('[{"placement":[0,1]}]', "field 'placement' must be an object", id="placement a list"),
        pytest.param('[{"placement":{"start":-1,"size":1}}]', "field 'placement.start' must be an integer",
                     id="negative placement start"),
        pytest.param(
            "[{" + _OK + ',"migUUID":"M","gpuInstanceID":-1,"computeInstanceID":0}]',
            "'gpuInstanceID' must be an integer",
            id="negative gpuInstanceID",
        ),
        pytest.param(
            "[{" + _OK + ',"migUUID":"M","gpuInstanceID":true,"computeInstanceID":0}]',
            "'gpuInstanceID' must be",
            id="gpuInstanceID a bool",
        ),
    ],
)
def test_decode_errors(value: str, message: str) -> None:
    with pytest.raises(MigAllocationError) as info:
        decode_mig_allocations(value)
    assert message in str(info.value)


def test_second_element_error_is_numbered() -> None:
    with pytest.raises(MigAllocationError) as info:
        decode_mig_allocations("[{" + _OK + '},{"containerIndex":1}]')
    assert str(info.value) == "MIG allocation 1 is incomplete"


_ids = st.one_of(st.none(), st.integers(0, 2**32 - 1))


@st.composite
def _allocations(draw: st.DrawFn) -> list[MigAllocation]:
    slots = draw(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), unique=True, max_size=6))
    out = []
    for ci, di in slots:
        realized = draw(st.booleans())
        out.append(
            MigAllocation(
                container_index=ci,
                device_index=di,
                gpu_uuid=draw(st.text(min_size=1, max_size=12)),
                profile=draw(st.text(min_size=1, max_size=8)),
                placement=MigPlacement(draw(st.integers(0, 2**32 - 1)), draw(st.integers(1, 2**32 - 1))),
                mig_uuid=draw(st.text(min_size=1, max_size=8)) if realized else "",
                gpu_instance_id=draw(st.integers(0, 2**32 - 1)) if realized else None,
                compute_instance_id=draw(st.integers(0, 2**32 - 1)) if realized else None,
            )
        )
    return out


@given(_allocations())
def test_round_trip(allocations: list[MigAllocation]) -> None:
    assert decode_mig_allocations(encode_mig_allocations(allocations)) == allocations


@given(st.text(max_size=60))
def test_decode_only_raises_mig_allocation_error(value: str) -> None:
    with contextlib.suppress(MigAllocationError):
        decode_mig_allocations(value)
