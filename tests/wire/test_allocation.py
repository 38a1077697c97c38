"""Pod allocation annotations: every example of §4.5 plus round-trip properties."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import grant
from vgpu_scheduler.model import ContainerDevice, ContainerDevices, PodDevices, PodSingleDevice
from vgpu_scheduler.wire.allocation import (
    MISSING_FIELDS,
    AllocationError,
    decode_container_list,
    decode_pod_devices,
    encode_container_list,
    encode_pod_devices,
    pad_pod_devices,
)
from vgpu_scheduler.wire.keys import ALLOCATION_KEYS, VGPU_ALLOCATED, VGPU_TO_ALLOCATE


def dev(uuid: str, mem: int, cores: int, idx: int = 0, type_: str = "NVIDIA") -> ContainerDevice:
    return grant(uuid, usedmem=mem, usedcores=cores, idx=idx, type=type_)


# (encoded string, containers as encoded). Decoding yields one more, empty, entry: the text after
# the final ";".
SPEC_EXAMPLES = [
    pytest.param("GPU-0fc3,NVIDIA,3000,0:;", [[dev("GPU-0fc3", 3000, 0)]], id="one container one GPU"),
    pytest.param(
        "GPU-x,NVIDIA,3000,0:;GPU-x,NVIDIA,5000,0:;", [[dev("GPU-x", 3000, 0)], [dev("GPU-x", 5000, 0)]],
        id="two containers share a GPU",
    ),
    pytest.param(
        "UUID1,NVIDIA,1000,30:UUID2,NVIDIA,1000,30:;",
        [[dev("UUID1", 1000, 30), dev("UUID2", 1000, 30, idx=1)]],
        id="one container two GPUs",
    ),
    pytest.param(";uuid1,NVIDIA,1000,30:;", [[], [dev("uuid1", 1000, 30)]], id="first container without GPU"),
    pytest.param(";uuid1,NVIDIA,1000,30:;;", [[], [dev("uuid1", 1000, 30)], []],
                 id="trailing empty container"),
    pytest.param(";", [[]], id="no devices"),
]


@pytest.mark.parametrize(("encoded", "containers"), SPEC_EXAMPLES)
def test_encode_spec_examples(encoded: str, containers: PodSingleDevice) -> None:
    assert encode_container_list(containers) == encoded


@pytest.mark.parametrize(("encoded", "containers"), SPEC_EXAMPLES)
def test_decode_spec_examples_keeps_trailing_empty_entry(encoded: str, containers: PodSingleDevice) -> None:
    assert decode_container_list(encoded) == [*containers, []]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("", [[]], id="empty-annotation-one-empty-container"),
        pytest.param(";;", [[], [], []], id="empty-entries-kept"),
        pytest.param("GPU-0,NVIDIA,3000,0", [[dev("GPU-0", 3000, 0)]], id="no-terminators"),
        pytest.param(
            "GPU-0,NVIDIA,3000,0,extra,fields:;", [[dev("GPU-0", 3000, 0)], []], id="extra-fields-ignored"
        ),
        pytest.param(
            "junk:GPU-0,NVIDIA,1,2::;", [[dev("GPU-0", 1, 2, idx=1)], []], id="parts-without-comma-ignored"
        ),
        pytest.param("G,MLU,-5,+7:;", [[dev("G", -5, 7, type_="MLU")], []], id="go-signed-ints"),
        pytest.param(
            "G,NVIDIA,2147483647,-2147483648:;",
            [[dev("G", 2**31 - 1, -(2**31))], []],
            id="int32-bounds",
        ),
    ],
)
def test_decode_container_list(value: str, expected: PodSingleDevice) -> None:
    assert decode_container_list(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("GPU-0,NVIDIA,3000:;", MISSING_FIELDS),
        ("ok,NVIDIA,1,1:;a,b:;", MISSING_FIELDS),
        ("GPU-0,NVIDIA,3k,0:;", 'parse device memory "3k": strconv.ParseInt: parsing "3k": invalid syntax'),
        ("GPU-0,NVIDIA,,0:;", 'parse device memory "": strconv.ParseInt: parsing "": invalid syntax'),
        (
            "GPU-0,NVIDIA,2147483648,0:;",
            'parse device memory "2147483648": strconv.ParseInt: parsing "2147483648": value out of range',
        ),
        ("GPU-0,NVIDIA,1, 30:;", 'parse device cores " 30": strconv.ParseInt: parsing " 30": invalid syntax'),
    ],
)
def test_decode_container_list_errors(value: str, message: str) -> None:
    with pytest.raises(AllocationError) as info:
        decode_container_list(value)
    assert str(info.value) == message


def test_missing_fields_message_is_hamis() -> None:
    assert MISSING_FIELDS.startswith("pod annotation format error")


# ---------------------------------------------------------------------------------------------
# Padding contract


@pytest.mark.parametrize(
    ("per_container", "expected"),
    [
        pytest.param(
            [{}, {"NVIDIA": [dev("uuid1", 1000, 30)]}, {}],
            ";uuid1,NVIDIA,1000,30:;;",
            id="none-gpu-none",
        ),
        pytest.param(
            [{}, {"NVIDIA": [dev("uuid1", 1000, 30)]}],
            ";uuid1,NVIDIA,1000,30:;",
            id="sidecar-then-gpu",
        ),
        pytest.param(
            [{"NVIDIA": [dev("GPU-x", 3000, 0)]}, {"NVIDIA": [dev("GPU-x", 5000, 0)]}],
            "GPU-x,NVIDIA,3000,0:;GPU-x,NVIDIA,5000,0:;",
            id="init-then-app-same-gpu",
        ),
        pytest.param(
            [{"NVIDIA": []}, {"NVIDIA": [dev("a", 1, 1)]}],
            ";a,NVIDIA,1,1:;",
            id="explicit-empty-grant",
        ),
    ],
)
def test_padding_one_entry_per_processed_container(
    per_container: list[dict[str, ContainerDevices]], expected: str
) -> None:
    padded = pad_pod_devices(per_container)
    assert len(padded["NVIDIA"]) == len(per_container)
    assert encode_container_list(padded["NVIDIA"]) == expected


def test_padding_is_per_vendor_key() -> None:
    mlu = dev("mlu-0", 256, 100, type_="MLU")
    padded = pad_pod_devices([{"MLU": [mlu]}, {"NVIDIA": [dev("g", 1, 2)]}, {}])
    assert padded == {"MLU": [[mlu], [], []], "NVIDIA": [[], [dev("g", 1, 2)], []]}


def test_padding_without_any_grant_is_empty() -> None:
    assert pad_pod_devices([{}, {"NVIDIA": []}]) == {}


# ---------------------------------------------------------------------------------------------
# Pod-level annotations


def test_encode_pod_devices_writes_both_keys() -> None:
    devices: PodDevices = {"NVIDIA": [[], [dev("uuid1", 1000, 30)], []]}
    assert encode_pod_devices(devices) == {
        VGPU_TO_ALLOCATE: ";uuid1,NVIDIA,1000,30:;;",
        VGPU_ALLOCATED: ";uuid1,NVIDIA,1000,30:;;",
    }


def test_encode_pod_devices_skips_vendor_without_containers() -> None:
    assert encode_pod_devices({"NVIDIA": []}) == {}


def test_encode_pod_devices_writes_the_vendors_after_one_without_containers() -> None:
    keys = {"Empty": ("empty-to-allocate", "empty-allocated"), "NVIDIA": ALLOCATION_KEYS["NVIDIA"]}
    out = encode_pod_devices({"Empty": [], "NVIDIA": [[dev("uuid1", 1000, 30)]]}, keys)
    assert out == {VGPU_TO_ALLOCATE: "uuid1,NVIDIA,1000,30:;", VGPU_ALLOCATED: "uuid1,NVIDIA,1000,30:;"}


def test_encode_pod_devices_unknown_vendor() -> None:
    with pytest.raises(AllocationError, match="no allocation annotation keys for vendor 'NoSuch'"):
        encode_pod_devices({"NoSuch": [[]]})


def test_encode_pod_devices_vendor_with_only_allocated_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ALLOCATION_KEYS, "AWSNeuron", ("", "hami.io/aws-neuron-devices-allocated"))
    out = encode_pod_devices({"AWSNeuron": [[dev("n0", 0, 1, type_="AWSNeuron")]]})
    assert out == {"hami.io/aws-neuron-devices-allocated": "n0,AWSNeuron,0,1:;"}


def test_decode_pod_devices_reads_allocated_key_only() -> None:
    annotations = {
        VGPU_TO_ALLOCATE: ";",  # consumed by the device plugin: ignored
        VGPU_ALLOCATED: "GPU-0,NVIDIA,3000,0:;",
        "unrelated": "x",
    }
    assert decode_pod_devices(annotations) == {"NVIDIA": [[dev("GPU-0", 3000, 0)], []]}


def test_decode_pod_devices_without_keys() -> None:
    assert decode_pod_devices({VGPU_TO_ALLOCATE: "GPU-0,NVIDIA,3000,0:;"}) == {}


def test_decode_pod_devices_error_names_the_key() -> None:
    with pytest.raises(AllocationError) as info:
        decode_pod_devices({VGPU_ALLOCATED: "GPU-0,NVIDIA:;"})
    assert str(info.value) == f"annotation {VGPU_ALLOCATED}: {MISSING_FIELDS}"


# ---------------------------------------------------------------------------------------------
# Properties

_field = st.text(alphabet=st.characters(codec="utf-8", exclude_characters=",:;"), max_size=10)
_int32 = st.integers(-(2**31), 2**31 - 1)


@st.composite
def _containers(draw: st.DrawFn) -> PodSingleDevice:
    out: PodSingleDevice = []
    for n in draw(st.lists(st.integers(0, 3), max_size=5)):
        out.append(
            [
                ContainerDevice(
                    uuid=draw(_field), type=draw(_field), usedmem=draw(_int32), usedcores=draw(_int32), idx=i
                )
                for i in range(n)
            ]
        )
    return out


# Generating nested lists of text is slow on a loaded machine: the speed health check failed
# this test under load although the code was right.
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(_containers())
def test_container_list_round_trip(containers: PodSingleDevice) -> None:
    assert decode_container_list(encode_container_list(containers)) == [*containers, []]


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(sorted(ALLOCATION_KEYS)), _containers().filter(bool)))
def test_pod_devices_round_trip(devices: PodDevices) -> None:
    annotations = encode_pod_devices(devices)
    assert decode_pod_devices(annotations) == {v: [*c, []] for v, c in devices.items()}


@given(st.text(max_size=40))
def test_decode_only_raises_allocation_error(value: str) -> None:
    with contextlib.suppress(AllocationError):
        decode_container_list(value)
