"""Go behaviours the HAMi wire formats depend on: `strconv` parsing and `json.Marshal` output.

The device plugin and HAMi parse the comma/colon annotations with Go's `strconv`; Python's
`int()` is more lenient (whitespace, underscores, unicode digits), so a value HAMi rejects would
silently pass. These helpers accept exactly what Go accepts and produce Go's error text, so our
messages match the ones operators know from HAMi's logs. `go_json` writes JSON byte-for-byte as
Go does for the same field order, so annotations we write compare equal to HAMi's.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# Go's base-10 syntax: optional sign, then ASCII digits only (no '_' because base != 0).
_GO_INT = re.compile(r"[+-]?[0-9]+\Z")

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})

_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


class GoSyntaxError(ValueError):
    """A value Go's strconv rejects; the message is Go's own error text."""


def go_quote(s: str) -> str:
    """Approximate Go's `%q` / `strconv.Quote` for messages."""
    if s.isprintable() and '"' not in s and "\\" not in s:
        return f'"{s}"'
    out = ['"']
    for ch in s:
        esc = _ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def parse_int(s: str, lo: int = INT64_MIN, hi: int = INT64_MAX, func: str = "ParseInt") -> int:
    """`strconv.ParseInt(s, 10, bits)` (or `Atoi` with func="Atoi") with the range [lo, hi]."""
    if _GO_INT.match(s) is None:
        raise GoSyntaxError(f"strconv.{func}: parsing {go_quote(s)}: invalid syntax")
    value = int(s)
    if value < lo or value > hi:
        raise GoSyntaxError(f"strconv.{func}: parsing {go_quote(s)}: value out of range")
    return value


def parse_int32(s: str) -> int:
    return parse_int(s, INT32_MIN, INT32_MAX)


def atoi(s: str) -> int:
    return parse_int(s, func="Atoi")


def parse_bool(s: str) -> bool:
    """`strconv.ParseBool`: 1,t,T,TRUE,true,True / 0,f,F,FALSE,false,False."""
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise GoSyntaxError(f"strconv.ParseBool: parsing {go_quote(s)}: invalid syntax")


def format_bool(b: bool) -> str:
    return "true" if b else "false"


_json_encode = msgspec.json.Encoder().encode

# Go's encoder escapes these inside strings; they can only occur inside strings, so a plain
# replacement on the output is exact.
_GO_HTML_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)


def go_json(obj: Any) -> str:
    """Compact JSON text as Go's `json.Marshal` writes it (HTML-safe escaping included)."""
    text = _json_encode(obj).decode()
    for raw, esc in _GO_HTML_ESCAPES:
        if raw in text:
            text = text.replace(raw, esc)
    return text


def json_kind(value: Any) -> str:
    """The JSON kind of a decoded value, as encoding/json names it in errors ("cannot unmarshal
    number into ...")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
