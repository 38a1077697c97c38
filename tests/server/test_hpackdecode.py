"""Our HPACK decoder (server/hpackdecode.py) against hpack's: what its encoder writes reads back,
and on any bytes both decoders agree (the same header list, or both refuse)."""

from __future__ import annotations

import hpack
import pytest
from hpack.table import HeaderTable
from hypothesis import given, settings
from hypothesis import strategies as st

from vgpu_scheduler.server.hpackdecode import STATIC_TABLE, HeaderListTooLarge, HpackDecoder, HpackError

LIMIT = 4096

COMMON_NAMES = [b":method", b":path", b":authority", b"content-type", b"content-length", b"x-a"]
names = st.sampled_from(COMMON_NAMES) | st.binary(min_size=1, max_size=20)
values = st.binary(max_size=300)
header_lists = st.lists(st.tuples(names, values), max_size=12)


def test_the_static_table_is_rfc_7541s() -> None:
    assert tuple(HeaderTable.STATIC_TABLE) == STATIC_TABLE


@given(st.lists(st.tuples(header_lists, st.booleans(), st.sampled_from([None, 0, 100, 4096]))), st.booleans())
@settings(max_examples=300)
def test_what_hpacks_encoder_writes_reads_back(
    blocks: list[tuple[list[tuple[bytes, bytes]], bool, int | None]], sensitive: bool
) -> None:
    encoder, ours = hpack.Encoder(), HpackDecoder(max_header_list_size=1 << 20)
    for headers, huffman, table_size in blocks:
        if table_size is not None:
            encoder.header_table_size = table_size  # a size update opens the next block
        if sensitive:
            fields = [hpack.NeverIndexedHeaderTuple(n, v) for n, v in headers]
        else:
            fields = [hpack.HeaderTuple(n, v) for n, v in headers]
        assert ours.decode(encoder.encode(fields, huffman=huffman)) == headers


def _theirs(decoder: hpack.Decoder, block: bytes) -> list[tuple[bytes, bytes]] | str:
    try:
        return [(bytes(n), bytes(v)) for n, v in decoder.decode(block, raw=True)]
    except hpack.OversizedHeaderListError:
        return "too large"
    except hpack.HPACKError:
        return "refused"


def _ours(decoder: HpackDecoder, block: bytes) -> list[tuple[bytes, bytes]] | str:
    try:
        return decoder.decode(block)
    except HeaderListTooLarge:
        return "too large"
    except HpackError:
        return "refused"


# Bytes that look like HPACK: field representations with small indexes, lengths and strings.
hpack_ish = st.lists(
    st.one_of(
        st.integers(0x80, 0xFF).map(lambda b: bytes((b,))),  # indexed
        st.tuples(st.integers(0x40, 0x7F), st.binary(max_size=12)).map(lambda t: bytes((t[0],)) + t[1]),
        st.tuples(st.integers(0x00, 0x1F), st.binary(max_size=12)).map(lambda t: bytes((t[0],)) + t[1]),
        st.tuples(st.integers(0x20, 0x3F), st.binary(max_size=3)).map(lambda t: bytes((t[0],)) + t[1]),
        st.binary(max_size=8),
    ),
    max_size=10,
).map(b"".join)


@given(st.lists(hpack_ish | st.binary(max_size=60), min_size=1, max_size=4))
@settings(max_examples=2000)
def test_on_any_bytes_both_decoders_agree(blocks: list[bytes]) -> None:
    theirs, ours = hpack.Decoder(max_header_list_size=LIMIT), HpackDecoder(max_header_list_size=LIMIT)
    for block in blocks:
        expected = _theirs(theirs, block)
        assert _ours(ours, block) == expected
        if isinstance(expected, str):
            return  # the connection ends at an error: no later block is read


@pytest.mark.parametrize(
    ("block", "why"),
    [
        pytest.param(b"\x80", "no table entry 0", id="index-zero"),
        pytest.param(b"\xbf\x00", "no table entry 63", id="beyond-the-tables"),
        pytest.param(b"\x82\x3f\xe1\x1f", "a table size update after", id="update-after-a-field"),
        pytest.param(b"\x3f\xe2\x1f", "above 4096", id="update-above-what-we-allow"),
        pytest.param(b"\xff\xff\xff\xff\xff\xff\x01", "longer than any field", id="endless-integer"),
        pytest.param(b"\x04\x05/abc", "truncated", id="truncated-string"),
        pytest.param(b"\x04\x81\xff", "Huffman", id="bad-huffman-padding"),
    ],
)
def test_refusals(block: bytes, why: str) -> None:
    with pytest.raises(HpackError, match=why):
        HpackDecoder(max_header_list_size=LIMIT).decode(block)


def test_an_entry_larger_than_the_table_empties_it() -> None:
    decoder = HpackDecoder(max_header_list_size=1 << 20)
    decoder.decode(b"\x40\x01a\x01b")  # (a, b) added: index 62
    assert decoder.decode(b"\xbe") == [(b"a", b"b")]
    big = b"x" * 5000
    decoder.decode(b"\x40\x01c\x7f" + bytes((0x80 | ((len(big) - 127) & 0x7F), (len(big) - 127) >> 7)) + big)
    with pytest.raises(HpackError, match="no table entry 62"):
        decoder.decode(b"\xbe")
