"""Node inventory codecs: §3.1, §3.2 table by table, plus round-trip properties."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import device
from vgpu_scheduler.model import DeviceInfo, MigPlacement, MigProfile
from vgpu_scheduler.wire.inventory import (
    InventoryError,
    attach_pair_scores,
    decode_cordon,
    decode_node_devices,
    decode_pair_scores,
    encode_node_devices_json,
    encode_node_devices_legacy,
    encode_pair_scores,
)

HAMI_EXAMPLE = (
    '[{"id":"GPU-0","count":10,"devmem":8192,"devcore":100,"type":"NVIDIA-A100","numa":0,'
    '"health":true,"index":0,"mode":"hami-core"}]'
)
GPU0 = device("GPU-0", devmem=8192)

# ---------------------------------------------------------------------------------------------
# JSON dialect


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(HAMI_EXAMPLE, [GPU0], id="hami-test-example"),
        pytest.param("  " + HAMI_EXAMPLE, [GPU0], id="leading-blank"),
        pytest.param(
            '[{"id":"GPU-1"}]',
            [DeviceInfo(id="GPU-1", health=False, index=0, numa=0, mode="hami-core")],
            id="absent-fields-take-go-zero-and-health-false",
        ),
        pytest.param(
            '[{"ID":"GPU-0","Count":10,"DEVMEM":8192,"DevCore":100,"Type":"NVIDIA-A100","Health":true}]',
            [GPU0],
            id="case-insensitive-names",
        ),
        pytest.param(
            '[{"id":"GPU-0","count":10,"devmem":8192,"devcore":100,"type":"NVIDIA-A100","health":true,'
            '"custominfo":{"a":1},"migtemplate":[[{"name":"1g"}]],"future":[1,2]}]',
            [GPU0],
            id="unknown-fields-ignored",
        ),
        pytest.param(
            '[{"id":"GPU-0","count":null,"health":null,"mode":null}]',
            [DeviceInfo(id="GPU-0")],
            id="null-leaves-default",
        ),
        pytest.param(
            '[{"id":"GPU-0","index":3,"numa":1,"mode":"mig","health":true,"devicevendor":"NVIDIA"}]',
            [DeviceInfo(id="GPU-0", index=3, numa=1, mode="mig", health=True, device_vendor="NVIDIA")],
            id="index-numa-mode-vendor",
        ),
        pytest.param(
            '[{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB",'
            '"mode":"mig","health":true,"migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":15,'
            '"sliceCount":1,"placements":[{"start":6,"size":1}]}]}]',
            [
                DeviceInfo(
                    id="GPU-0",
                    count=7,
                    devmem=40960,
                    devcore=100,
                    type="NVIDIA A100-SXM4-40GB",
                    mode="mig",
                    health=True,
                    mig_profiles=(MigProfile("1g.5gb", 4864, 15, 1, (MigPlacement(6, 1),)),),
                )
            ],
            id="mig-profiles",
        ),
        pytest.param(
            '[{"id":"GPU-0","MIGPROFILES":[{"NAME":"2g.10gb","MemoryMb":9728,"PLACEMENTS":[{"START":0,"Size":2}]}]}]',
            [
                DeviceInfo(
                    id="GPU-0", mig_profiles=(MigProfile("2g.10gb", 9728, 0, 0, (MigPlacement(0, 2),)),)
                )
            ],
            id="mig-profiles-case-insensitive",
        ),
        pytest.param(
            '[{"id":"GPU-0","index":18446744073709551615}]',
            [DeviceInfo(id="GPU-0", index=2**64 - 1)],
            id="index-is-uint64",
        ),
        pytest.param(
            '[{"id":"GPU-0","id":"GPU-9"}]',
            [DeviceInfo(id="GPU-9")],
            id="duplicate-key-last-wins",
        ),
    ],
)
def test_decode_json(value: str, expected: list[DeviceInfo]) -> None:
    assert decode_node_devices(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('[{"id":"GPU-0"}', "invalid node annotation JSON"),
        ('[{"id":"GPU-0","count":"10"}]', "device 0: field 'count' must be an int32, got string '10'"),
        ('[{"id":"GPU-0","count":10.0}]', "device 0: field 'count' must be an int32, got number 10.0"),
        ('[{"id":"GPU-0","count":2147483648}]', "field 'count' must be an int32"),
        ('[{"id":"GPU-0","devmem":true}]', "field 'devmem' must be an int32, got bool True"),
        ('[{"id":"GPU-0","devcore":[1]}]', "field 'devcore' must be an int32, got array"),
        ('[{"id":"GPU-0","health":"true"}]', "field 'health' must be a bool, got string 'true'"),
        ('[{"id":"GPU-0","health":1}]', "field 'health' must be a bool"),
        ('[{"id":"GPU-0","index":-1}]', "field 'index' must be a non-negative integer"),
        ('[{"id":7}]', "field 'id' must be a string, got number 7"),
        ('[{"id":"GPU-0","type":{}}]', "field 'type' must be a string, got object"),
        ('[{"id":"GPU-0","mode":false}]', "field 'mode' must be a string"),
        ('[{"id":"GPU-0","numa":"0"}]', "field 'numa' must be an integer"),
        ('[{"id":"GPU-0","migProfiles":{}}]', "field 'migProfiles' must be an array"),
        ('[{"id":"GPU-0","migProfiles":[3]}]', "MIG profile must be an object"),
        ('[{"id":"GPU-0","migProfiles":[{"core":"x"}]}]', "field 'core' must be an int32"),
        (
            '[{"id":"GPU-0","migProfiles":[{"placements":[{"start":-1}]}]}]',
            "field 'start' must be a non-negative int32",
        ),
        ('[{"id":"GPU-0","migProfiles":[{"placements":{}}]}]', "field 'placements' must be an array"),
        ('[{"id":"GPU-0","migProfiles":[{"placements":[7]}]}]', "placement must be an object"),
        ('[{"id":"GPU-0"},"GPU-1"]', "device 1 must be a JSON object, got string"),
        ('[{"id":"GPU-0"},null]', "device 1 must be a JSON object, got null"),
    ],
)
def test_decode_json_errors(value: str, message: str) -> None:
    with pytest.raises(InventoryError) as info:
        decode_node_devices(value)
    assert message in str(info.value)


@pytest.mark.parametrize(("value"), ["[]", "[ ]", ":", "::"])
def test_empty_inventory_decodes_to_no_devices(value: str) -> None:
    # Either dialect may carry zero devices; "no gpu found on node" is NVIDIA's verdict on top.
    assert decode_node_devices(value) == []


def test_json_null_document_is_no_gpu() -> None:
    # `null` does not start with "[" so it is read as the legacy form, which has no separator.
    with pytest.raises(InventoryError, match="missing device separator"):
        decode_node_devices("null")


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        pytest.param(
            [GPU0],
            '[{"id":"GPU-0","count":10,"devmem":8192,"devcore":100,"type":"NVIDIA-A100","mode":"hami-core","health":true}]',
            id="zero-index-numa-omitted",
        ),
        pytest.param(
            [DeviceInfo(id="GPU-1", index=1, numa=1, mode="", health=False)],
            '[{"id":"GPU-1","index":1,"numa":1}]',
            id="false-health-and-empty-mode-omitted",
        ),
        pytest.param(
            [
                DeviceInfo(
                    id="GPU-0",
                    mode="mig",
                    mig_profiles=(MigProfile("1g.5gb", 4864, 15, 1, (MigPlacement(6, 1),)),),
                )
            ],
            '[{"id":"GPU-0","mode":"mig","migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":15,'
            '"sliceCount":1,"placements":[{"start":6,"size":1}]}]}]',
            id="mig-profiles",
        ),
        pytest.param(
            [DeviceInfo(id="GPU-0", type="NVIDIA <x>&y", mode="")],
            '[{"id":"GPU-0","type":"NVIDIA \\u003cx\\u003e\\u0026y"}]',
            id="go-html-escaping",
        ),
        pytest.param([], "[]", id="empty"),
    ],
)
def test_encode_json(devices: list[DeviceInfo], expected: str) -> None:
    assert encode_node_devices_json(devices) == expected


def test_encode_does_not_write_vendor_or_pair_scores() -> None:
    d = DeviceInfo(id="GPU-0", mode="", device_vendor="NVIDIA", pair_scores={"GPU-1": 5})
    assert encode_node_devices_json([d]) == '[{"id":"GPU-0"}]'


# ---------------------------------------------------------------------------------------------
# Legacy dialect


def _legacy(
    id_: str,
    count: int,
    mem: int,
    core: int,
    type_: str,
    numa: int,
    health: bool,
    index: int = 0,
    mode: str = "hami-core",
) -> DeviceInfo:
    return DeviceInfo(
        id=id_,
        count=count,
        devmem=mem,
        devcore=core,
        type=type_,
        numa=numa,
        health=health,
        index=index,
        mode=mode,
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(
            "GPU-ebe7,10,7680,100,NVIDIA-Tesla P4,0,true,0,hami-core:",
            [_legacy("GPU-ebe7", 10, 7680, 100, "NVIDIA-Tesla P4", 0, True)],
            id="nine-fields",
        ),
        pytest.param(
            "GPU-a,10,7680,100,NVIDIA-Tesla P4,1,false:",
            [_legacy("GPU-a", 10, 7680, 100, "NVIDIA-Tesla P4", 1, False)],
            id="seven-fields-index-0-mode-hami-core",
        ),
        pytest.param(
            "GPU-a,10,1,100,T,0,true,0,hami-core:GPU-b,10,2,100,T,1,false,1,mig:",
            [
                _legacy("GPU-a", 10, 1, 100, "T", 0, True),
                _legacy("GPU-b", 10, 2, 100, "T", 1, False, 1, "mig"),
            ],
            id="two-devices",
        ),
        pytest.param(":", [], id="colon-only-zero-devices"),
        pytest.param("::", [], id="double-colon-zero-devices"),
        pytest.param(
            "::GPU-a,1,2,3,T,0,1::",
            [_legacy("GPU-a", 1, 2, 3, "T", 0, True)],
            id="empty-segments-skipped",
        ),
        pytest.param(
            "GPU-a,+1,-2,0,T,-1,T,+2,x:",
            [_legacy("GPU-a", 1, -2, 0, "T", -1, True, 2, "x")],
            id="go-signs-accepted",
        ),
        pytest.param(
            "GPU-a,2147483647,-2147483648,0,T,0,F,0,:",
            [_legacy("GPU-a", 2**31 - 1, -(2**31), 0, "T", 0, False, 0, "")],
            id="int32-bounds-and-empty-mode",
        ),
    ],
)
def test_decode_legacy(value: str, expected: list[DeviceInfo]) -> None:
    assert decode_node_devices(value) == expected


@pytest.mark.parametrize("word", ["1", "t", "T", "TRUE", "true", "True"])
def test_legacy_go_bool_true(word: str) -> None:
    assert decode_node_devices(f"G,1,1,1,T,0,{word}:")[0].health is True


@pytest.mark.parametrize("word", ["0", "f", "F", "FALSE", "false", "False"])
def test_legacy_go_bool_false(word: str) -> None:
    assert decode_node_devices(f"G,1,1,1,T,0,{word}:")[0].health is False


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "node annotation missing device separator"),
        ("GPU-a,10,1,100,T,0,true", "node annotation missing device separator"),
        ("GPU-a:", 'malformed node annotation segment: "GPU-a"'),
        ("ok,1,1,1,T,0,true:oops:", 'malformed node annotation segment: "oops"'),
        ("a,b,c:", "unexpected field count 3 in node annotation"),
        ("a,1,1,1,T,0,true,0:", "unexpected field count 8 in node annotation"),
        ("a,1,1,1,T,0,true,0,m,x:", "unexpected field count 10 in node annotation"),
        ("a,x,1,1,T,0,true:", 'invalid count field: strconv.ParseInt: parsing "x": invalid syntax'),
        ("a, 1,1,1,T,0,true:", 'invalid count field: strconv.ParseInt: parsing " 1": invalid syntax'),
        ("a,1_0,1,1,T,0,true:", 'invalid count field: strconv.ParseInt: parsing "1_0": invalid syntax'),
        ("a,,1,1,T,0,true:", 'invalid count field: strconv.ParseInt: parsing "": invalid syntax'),
        (
            "a,2147483648,1,1,T,0,true:",
            'invalid count field: strconv.ParseInt: parsing "2147483648": value out of range',
        ),
        ("a,1,1.5,1,T,0,true:", 'invalid memory field: strconv.ParseInt: parsing "1.5": invalid syntax'),
        (
            "a,1,-2147483649,1,T,0,true:",
            'invalid memory field: strconv.ParseInt: parsing "-2147483649": value out of range',
        ),
        ("a,1,1,abc,T,0,true:", 'invalid core field: strconv.ParseInt: parsing "abc": invalid syntax'),
        ("a,1,1,1,T,n0,true:", 'invalid numa field: strconv.Atoi: parsing "n0": invalid syntax'),
        ("a,1,1,1,T,0,yes:", 'invalid health field: strconv.ParseBool: parsing "yes": invalid syntax'),
        ("a,1,1,1,T,0,true,i,m:", 'invalid index field: strconv.Atoi: parsing "i": invalid syntax'),
        ("a,1,1,1,T,0,true,-1,m:", "index field must not be negative: -1"),
        (" ,1,1,1,T,0,true:", "device ID must not be empty"),
        ("a,1,1,1,T,0,true:a,1,1,1,T,0,true:", 'duplicate device ID "a"'),
    ],
)
def test_decode_legacy_errors(value: str, message: str) -> None:
    with pytest.raises(InventoryError) as info:
        decode_node_devices(value)
    assert str(info.value) == message


def test_encode_legacy_always_nine_fields() -> None:
    devices = [
        _legacy("GPU-ebe7", 10, 7680, 100, "NVIDIA-Tesla P4", 0, True),
        _legacy("GPU-b", 4, 1, 2, "T", 1, False, 3, "mig"),
    ]
    assert encode_node_devices_legacy(devices) == (
        "GPU-ebe7,10,7680,100,NVIDIA-Tesla P4,0,true,0,hami-core:GPU-b,4,1,2,T,1,false,3,mig:"
    )
    assert encode_node_devices_legacy([]) == ""


# ---------------------------------------------------------------------------------------------
# Pair scores and cordon


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(
            '[{"uuid":"GPU-0","score":{"GPU-1":50,"GPU-2":20}}]', {"GPU-0": {"GPU-1": 50, "GPU-2": 20}},
            id="two peers",
        ),
        pytest.param(
            '[{"uuid":"GPU-0","score":{"GPU-1":0,"GPU-2":-5}}]', {"GPU-0": {"GPU-1": 0, "GPU-2": -5}},
            id="zero and negative scores",
        ),
        pytest.param('[{"UUID":"GPU-0","Score":{"GPU-1":1}}]', {"GPU-0": {"GPU-1": 1}},
                     id="capitalised keys"),
        pytest.param(
            '[{"uuid":"GPU-0","score":{"a":1}},{"uuid":"GPU-0","score":{"b":2}}]', {"GPU-0": {"a": 1}},
            id="first entry of a uuid wins",
        ),
        pytest.param('[{"uuid":"GPU-0"}]', {"GPU-0": {}}, id="no score"),
        pytest.param('[{"uuid":"GPU-0","score":null},null]', {"GPU-0": {}}, id="null score and null entry"),
        # Go decodes a null map value as the zero value: the peer is present with score 0.
        pytest.param(
            '[{"uuid":"GPU-0","score":{"GPU-1":null,"GPU-2":3}}]', {"GPU-0": {"GPU-1": 0, "GPU-2": 3}},
            id="null peer score is 0",
        ),
        pytest.param("[]", {}, id="empty list"),
        pytest.param("null", {}, id="null"),
    ],
)
def test_decode_pair_scores(value: str, expected: dict[str, dict[str, int]]) -> None:
    assert decode_pair_scores(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "invalid pair score JSON"),
        ("not json", "invalid pair score JSON"),
        ('{"uuid":"GPU-0"}', "pair score JSON must be an array, got object"),
        ('["GPU-0"]', "pair score 0 must be an object, got string"),
        ('[{"uuid":1}]', "field 'uuid' must be a string"),
        ('[{"uuid":"GPU-0","score":[1]}]', "field 'score' must be an object"),
        ('[{"uuid":"GPU-0","score":{"GPU-1":1.5}}]', "field \"score['GPU-1']\" must be an integer"),
        ('[{"uuid":"GPU-0","score":{"GPU-1":"5"}}]', "must be an integer"),
    ],
)
def test_decode_pair_scores_errors(value: str, message: str) -> None:
    with pytest.raises(InventoryError) as info:
        decode_pair_scores(value)
    assert message in str(info.value)


def test_encode_pair_scores_sorts_peer_keys_like_go_maps() -> None:
    assert encode_pair_scores({"GPU-0": {"GPU-2": 20, "GPU-1": 50}, "GPU-1": {}}) == (
        '[{"uuid":"GPU-0","score":{"GPU-1":50,"GPU-2":20}},{"uuid":"GPU-1"}]'
    )


def test_attach_pair_scores() -> None:
    devices = [DeviceInfo(id="GPU-0"), DeviceInfo(id="GPU-1")]
    attach_pair_scores(devices, decode_pair_scores('[{"uuid":"GPU-0","score":{"GPU-1":50}}]'))
    assert devices[0].pair_scores == {"GPU-1": 50}
    assert devices[1].pair_scores == {}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(None, frozenset(), id="no annotation"),
        pytest.param("", frozenset(), id="empty"),
        pytest.param("GPU-0", frozenset({"GPU-0"}), id="one uuid"),
        pytest.param(" GPU-0 , GPU-1,,  ,GPU-0", frozenset({"GPU-0", "GPU-1"}),
                     id="spaces, blanks and duplicates"),
        pytest.param(",", frozenset(), id="only a comma"),
    ],
)
def test_decode_cordon(value: str | None, expected: frozenset[str]) -> None:
    assert decode_cordon(value) == expected


# ---------------------------------------------------------------------------------------------
# Properties

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=20)
_int32 = st.integers(-(2**31), 2**31 - 1)
_uint32 = st.integers(0, 2**31 - 1)
_placements = st.builds(MigPlacement, start=_uint32, size=_uint32)
_profiles = st.builds(
    MigProfile,
    name=_text,
    memory_mb=_int32,
    core=_int32,
    slice_count=_int32,
    placements=st.lists(_placements, max_size=3).map(tuple),
)
_json_devices = st.builds(
    DeviceInfo,
    id=_text,
    index=st.integers(0, 2**64 - 1),
    count=_int32,
    devmem=_int32,
    devcore=_int32,
    type=_text,
    numa=st.integers(-(2**63), 2**63 - 1),
    mode=_text.filter(bool),  # an empty mode is not written and reads back as "hami-core"
    health=st.booleans(),
    mig_profiles=st.lists(_profiles, max_size=2).map(tuple),
)


@given(st.lists(_json_devices, min_size=1, max_size=8))
def test_json_round_trip(devices: list[DeviceInfo]) -> None:
    assert decode_node_devices(encode_node_devices_json(devices)) == devices


_field = st.text(alphabet=st.characters(codec="utf-8", exclude_characters=",:"), max_size=12)
_legacy_devices = st.builds(
    DeviceInfo,
    # An id starting with "[" would make the value look like JSON (the dialect switch).
    id=_field.filter(lambda s: s.strip() != "" and not s.lstrip().startswith("[")),
    index=st.integers(0, 2**63 - 1),
    count=_int32,
    devmem=_int32,
    devcore=_int32,
    type=_field,
    numa=st.integers(-(2**63), 2**63 - 1),
    mode=_field,
    health=st.booleans(),
)


@given(st.lists(_legacy_devices, max_size=8, unique_by=lambda d: d.id))
def test_legacy_round_trip(devices: list[DeviceInfo]) -> None:
    assert decode_node_devices(encode_node_devices_legacy(devices) or ":") == devices


@given(
    st.dictionaries(
        _text.filter(bool),
        st.dictionaries(_text, st.integers(-(2**63), 2**63 - 1), max_size=4),
        max_size=8,
    )
)
def test_pair_scores_round_trip(scores: dict[str, dict[str, int]]) -> None:
    assert decode_pair_scores(encode_pair_scores(scores)) == scores


@given(st.text(max_size=60))
def test_decode_never_raises_anything_but_inventory_error(value: str) -> None:
    with contextlib.suppress(InventoryError):
        decode_node_devices(value)


@given(st.text(alphabet='[]{}",:0123456789truefalsnidcoutm ', max_size=60))
def test_decode_json_like_noise_only_raises_inventory_error(value: str) -> None:
    with contextlib.suppress(InventoryError):
        decode_node_devices("[" + value)
