"""Go's value syntax for the scheduler's flags: what `strconv`, pflag's StringToString and klog's
flag types accept, with their error texts (`strconv.ParseFloat: parsing "x": invalid syntax`).

Every parser raises ValueError with the Go error text; `vgpu_scheduler.flags` wraps it in pflag's
`invalid argument ... flag:` message.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable
from typing import Any

from vgpu_scheduler.gocompat.durations import DurationError, parse_go_duration
from vgpu_scheduler.gocompat.parsing import go_quote

# --- Go value parsers (raise ValueError with Go's error text) -----------------------------------


def _num_error(func: str, s: str, what: str) -> ValueError:
    return ValueError(f"strconv.{func}: parsing {go_quote(s)}: {what}")


def _underscore_ok(s: str) -> bool:
    """Go's rule: '_' only between digits or between a base prefix and a digit."""
    saw = "^"
    if s[:1] in ("+", "-"):
        s = s[1:]
    i = 0
    hexa = False
    if len(s) >= 2 and s[0] == "0" and s[1].lower() in "box":
        i, saw, hexa = 2, "0", s[1].lower() == "x"
    for ch in s[i:]:
        if ch.isascii() and (ch.isdigit() or (hexa and ch.lower() in "abcdef")):
            saw = "0"
        elif ch == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def parse_go_int(s: str, base: int = 0, bits: int = 64, func: str = "ParseInt") -> int:
    """`strconv.ParseInt(s, base, bits)` (base 0 or 10)."""
    body = s[1:] if s[:1] in ("+", "-") else s
    neg = s[:1] == "-"
    value = _parse_go_uint_digits(body, base, s, func)
    limit = 1 << (bits - 1)
    if (not neg and value >= limit) or (neg and value > limit):
        raise _num_error(func, s, "value out of range")
    return -value if neg else value


def parse_go_uint(s: str, base: int = 0, bits: int = 64) -> int:
    """`strconv.ParseUint(s, base, bits)` (base 0 or 10)."""
    value = _parse_go_uint_digits(s, base, s, "ParseUint")
    if value >= 1 << bits:
        raise _num_error("ParseUint", s, "value out of range")
    return value


def _parse_go_uint_digits(s: str, base: int, orig: str, func: str) -> int:
    if not s:
        raise _num_error(func, orig, "invalid syntax")
    base0 = base == 0
    if base0:
        low = s[1:2].lower()
        if s[0] == "0" and len(s) >= 3 and low in "box":
            base, s = {"b": 2, "o": 8, "x": 16}[low], s[2:]
        elif s[0] == "0":
            base, s = 8, s[1:]
        else:
            base = 10
    value = 0
    underscores = False
    for ch in s:
        if ch == "_" and base0:
            underscores = True
            continue
        digit = int(ch, 36) if ch.isascii() and ch.isalnum() else 99
        if digit >= base:
            raise _num_error(func, orig, "invalid syntax")
        value = value * base + digit
        if value >= 1 << 64:  # Go stops at the first overflow with a range error
            raise _num_error(func, orig, "value out of range")
    if underscores and not _underscore_ok(orig):
        raise _num_error(func, orig, "invalid syntax")
    return value


_GO_DEC_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_GO_HEX_FLOAT = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+\Z")
_GO_SPECIAL_FLOAT = re.compile(r"[+-]?(?:inf|infinity|nan)\Z", re.IGNORECASE)


def parse_go_float32(s: str) -> float:
    """`strconv.ParseFloat(s, 32)`, rounded to float32 (underscore separators not supported)."""
    if _GO_SPECIAL_FLOAT.match(s):
        return float(s.lower().replace("infinity", "inf"))
    if _GO_HEX_FLOAT.match(s):
        value = float.fromhex(s)
    elif _GO_DEC_FLOAT.match(s):
        value = float(s)
    else:
        raise _num_error("ParseFloat", s, "invalid syntax")
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:
        raise _num_error("ParseFloat", s, "value out of range") from None


def format_go_float32(value: float) -> str:
    """`strconv.FormatFloat(float64(f), 'g', -1, 32)`: shortest float32 text, Go's %g layout."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    f32 = struct.unpack("<f", struct.pack("<f", value))[0]
    for precision in range(1, 10):  # 9 significant digits always round-trip a float32
        text = f"{f32:.{precision - 1}e}"
        try:
            if struct.unpack("<f", struct.pack("<f", float(text)))[0] == f32:
                break
        except OverflowError:  # a short rounding of a value near FLT_MAX overshoots it
            continue
    mantissa, exp_text = text.split("e")
    exp = int(exp_text)
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "").rstrip("0") or "0"
    if exp < -4 or exp >= 6:  # shortest formatting uses %e for exponents outside [-4, 6)
        body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{body}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    whole = digits[: exp + 1].ljust(exp + 1, "0")
    frac = digits[exp + 1 :]
    return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"


def go_flag(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """Go's `flag` package turns strconv syntax/range errors into "parse error"/"value out of range"."""

    def wrapped(s: str) -> Any:
        try:
            return parse(s)
        except ValueError as err:
            raise ValueError("value out of range" if "out of range" in str(err) else "parse error") from None

    return wrapped


# --- pflag StringToString (`--node-label-selector`) ---------------------------------------------


_CSV_QUOTE = 'extraneous or missing " in quoted-field'


def _csv_record(line: str) -> list[str]:
    """One record of Go's encoding/csv reader (default settings)."""
    fields_out: list[str] = []
    i = 0
    while True:
        if line[i : i + 1] == '"':
            j, buf = i + 1, []
            while True:
                k = line.find('"', j)
                if k < 0:
                    raise ValueError(f"parse error on line 1, column {len(line) + 1}: {_CSV_QUOTE}")
                buf.append(line[j:k])
                if line[k + 1 : k + 2] == '"':
                    buf.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            if i < len(line) and line[i] != ",":
                raise ValueError(f"parse error on line 1, column {i + 1}: {_CSV_QUOTE}")
            fields_out.append("".join(buf))
        else:
            end = line.find(",", i)
            end = len(line) if end < 0 else end
            quote = line.find('"', i, end)
            if quote >= 0:
                raise ValueError(f'parse error on line 1, column {quote + 1}: bare " in non-quoted field')
            fields_out.append(line[i:end])
            i = end
        if i >= len(line):
            return fields_out
        i += 1  # skip the comma


def parse_string_to_string(s: str) -> dict[str, str]:
    """pflag StringToString.Set: `k=v,k2=v2`; one '=' means one pair (`a=b,c` is {a: "b,c"})."""
    count = s.count("=")
    if count == 0:
        raise ValueError(f"{s} must be formatted as key=value")
    pairs = [s.strip('"')] if count == 1 else _csv_record(s.split("\n", 1)[0])
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"{pair} must be formatted as key=value")
        out[key] = value
    return out


def _csv_field(text: str) -> str:
    if text == "" or not (any(c in text for c in ',"\r\n') or text[0] in " \t" or text == "\\."):
        return text
    return '"' + text.replace('"', '""') + '"'


def format_string_to_string(value: dict[str, str]) -> str:
    """pflag StringToString.String(): `[k=v,k2=v2]` (keys sorted; Go's map order is random)."""
    return "[" + ",".join(_csv_field(f"{k}={v}") for k, v in sorted(value.items())).strip() + "]"


# --- klog value types ---------------------------------------------------------------------------

_SEVERITIES = {"INFO": 0, "WARNING": 1, "ERROR": 2, "FATAL": 3}
_VMODULE_SYNTAX = "syntax error: expect comma-separated list of filename=N"
_TRACE_SYNTAX = "syntax error: expect file.go:234"


def parse_level(s: str) -> int:
    return parse_go_int(s, base=10, bits=32)


def parse_severity(s: str) -> int:
    by_name = _SEVERITIES.get(s.upper())
    return by_name if by_name is not None else parse_go_int(s, base=10, bits=32)


def parse_vmodule(s: str) -> str:
    kept = []
    for pat in s.split(","):
        if not pat:
            continue
        parts = pat.split("=")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise ValueError(_VMODULE_SYNTAX)
        try:
            level = parse_go_int(parts[1], base=10, bits=32)
        except ValueError:
            raise ValueError(_VMODULE_SYNTAX) from None
        if level < 0:
            raise ValueError("negative value for vmodule level")
        if level:
            kept.append(f"{parts[0]}={level}")
    return ",".join(kept)


def parse_trace_location(s: str) -> str:
    if s == "":
        return ""
    parts = s.split(":")
    if len(parts) != 2 or "." not in parts[0]:
        raise ValueError(_TRACE_SYNTAX)
    try:
        line = parse_go_int(parts[1], base=10, bits=64, func="Atoi")
    except ValueError:
        raise ValueError(_TRACE_SYNTAX) from None
    if line <= 0:
        raise ValueError("negative or zero value for level")
    return f"{parts[0]}:{line}"


def parse_duration(s: str) -> float:
    try:
        return parse_go_duration(s)
    except DurationError as err:
        raise ValueError(str(err)) from None
