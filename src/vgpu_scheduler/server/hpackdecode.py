"""HPACK header block decoding (RFC 7541) for our HTTP/2 connection (server/h2conn.py).

Why not hpack's Decoder: ~28 µs of our CPU per header block of a Go client's request, most of it
per-field objects and table lookups (its blocks are a dozen bytes, nearly every field indexed);
this reads such a block in a few µs. Huffman-coded strings are still decoded by hpack's
table-driven `decode_huffman`. Accepts and refuses what hpack's Decoder does (tested against it).
"""

from __future__ import annotations

from collections import deque

from hpack import HPACKDecodingError
from hpack.huffman_table import decode_huffman

STATIC_TABLE: tuple[tuple[bytes, bytes], ...] = (
    (b":authority", b""), (b":method", b"GET"), (b":method", b"POST"), (b":path", b"/"),
    (b":path", b"/index.html"), (b":scheme", b"http"), (b":scheme", b"https"), (b":status", b"200"),
    (b":status", b"204"), (b":status", b"206"), (b":status", b"304"), (b":status", b"400"),
    (b":status", b"404"), (b":status", b"500"), (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"), (b"accept-language", b""), (b"accept-ranges", b""),
    (b"accept", b""), (b"access-control-allow-origin", b""), (b"age", b""), (b"allow", b""),
    (b"authorization", b""), (b"cache-control", b""), (b"content-disposition", b""),
    (b"content-encoding", b""), (b"content-language", b""), (b"content-length", b""),
    (b"content-location", b""), (b"content-range", b""), (b"content-type", b""), (b"cookie", b""),
    (b"date", b""), (b"etag", b""), (b"expect", b""), (b"expires", b""), (b"from", b""),
    (b"host", b""), (b"if-match", b""), (b"if-modified-since", b""), (b"if-none-match", b""),
    (b"if-range", b""), (b"if-unmodified-since", b""), (b"last-modified", b""), (b"link", b""),
    (b"location", b""), (b"max-forwards", b""), (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""), (b"range", b""), (b"referer", b""), (b"refresh", b""),
    (b"retry-after", b""), (b"server", b""), (b"set-cookie", b""),
    (b"strict-transport-security", b""), (b"transfer-encoding", b""), (b"user-agent", b""),
    (b"vary", b""), (b"via", b""), (b"www-authenticate", b""),
)
"""RFC 7541 Appendix A, index 1 first."""

ENTRY_OVERHEAD = 32
"""What an entry costs beyond its name and value, in the table's size and the header list's."""
MAX_INTEGER_GROUPS = 5
"""Continuation bytes an integer may take (hpack's limit: beyond, a decoding error)."""


class HpackError(Exception):
    """The block is not valid HPACK (a COMPRESSION_ERROR for the connection)."""


class HeaderListTooLarge(HpackError):
    """The decoded header list is larger than allowed."""


class HpackDecoder:
    """One connection's decoder: its dynamic table lives across the blocks it decodes."""

    __slots__ = ("_allowed", "_dynamic", "_max_list", "_max_size", "_size")

    def __init__(self, *, max_header_list_size: int, max_table_size: int = 4096) -> None:
        self._max_list = max_header_list_size
        self._allowed = max_table_size  # what we advertise (SETTINGS_HEADER_TABLE_SIZE's default)
        self._max_size = max_table_size  # what the encoder last set, at most `_allowed`
        self._dynamic: deque[tuple[bytes, bytes]] = deque()  # newest first
        self._size = 0

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        listed = 0
        pos, end = 0, len(block)
        while pos < end:
            first = block[pos]
            if first & 0x80:  # an indexed field
                index, pos = _integer(block, pos, 0x7F)
                name, value = self._entry(index)
            elif first & 0x40:  # a literal with incremental indexing
                index, pos = _integer(block, pos, 0x3F)
                name, pos = (self._entry(index)[0], pos) if index else _string(block, pos)
                value, pos = _string(block, pos)
                self._add(name, value)
            elif first & 0x20:  # a dynamic table size update
                if out:
                    raise HpackError("a table size update after a header field")
                size, pos = _integer(block, pos, 0x1F)
                if size > self._allowed:
                    raise HpackError(f"a table size update to {size}, above {self._allowed}")
                self._max_size = size
                self._shrink()
                continue
            else:  # a literal without indexing, or never indexed
                index, pos = _integer(block, pos, 0x0F)
                name, pos = (self._entry(index)[0], pos) if index else _string(block, pos)
                value, pos = _string(block, pos)
            out.append((name, value))
            listed += len(name) + len(value) + ENTRY_OVERHEAD
            if listed > self._max_list:
                raise HeaderListTooLarge(f"a header list larger than {self._max_list}")
        return out

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if 0 < index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        dynamic = index - len(STATIC_TABLE) - 1
        if 0 <= dynamic < len(self._dynamic):
            return self._dynamic[dynamic]
        raise HpackError(f"no table entry {index}")

    def _add(self, name: bytes, value: bytes) -> None:
        size = len(name) + len(value) + ENTRY_OVERHEAD
        if size > self._max_size:  # RFC 7541, section 4.4: the table is emptied, nothing added
            self._dynamic.clear()
            self._size = 0
            return
        self._dynamic.appendleft((name, value))
        self._size += size
        self._shrink()

    def _shrink(self) -> None:
        while self._size > self._max_size:
            name, value = self._dynamic.pop()
            self._size -= len(name) + len(value) + ENTRY_OVERHEAD


def _integer(block: bytes, pos: int, mask: int) -> tuple[int, int]:
    """RFC 7541, section 5.1: the integer at `pos` on the prefix `mask`, and where it ends."""
    value = block[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    for _ in range(MAX_INTEGER_GROUPS):
        if pos >= len(block):
            raise HpackError("a truncated integer")
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise HpackError("an integer longer than any field")


def _string(block: bytes, pos: int) -> tuple[bytes, int]:
    """RFC 7541, section 5.2: the string literal at `pos`, and where it ends."""
    if pos >= len(block):
        raise HpackError("a truncated header block")
    huffman = block[pos] & 0x80
    length, pos = _integer(block, pos, 0x7F)
    end = pos + length
    if end > len(block):
        raise HpackError("a truncated header block")
    raw = block[pos:end]
    if not huffman:
        return raw, end
    try:
        return decode_huffman(raw), end
    except HPACKDecodingError as exc:
        raise HpackError(f"a Huffman string: {exc}") from None
