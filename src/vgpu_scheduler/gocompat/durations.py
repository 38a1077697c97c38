"""Go `time.Duration` text: `time.ParseDuration` and `Duration.String()`.

HAMi's duration flags (`--node-lock-timeout=5m`, `--node-lock-retry-timeout=28s`) are parsed by Go,
so we accept exactly Go's syntax (a sequence of decimal numbers each with a unit, optional sign)
and report Go's error texts. Values are exact integer nanoseconds internally; the public API speaks
float seconds because that is what asyncio and our timers use.
"""

from __future__ import annotations

_NS_PER_UNIT = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # U+00B5 MICRO SIGN
    "\u03bcs": 1_000,  # U+03BC GREEK SMALL LETTER MU
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}

_LIMIT = 1 << 63  # magnitude bound of an int64 Duration (only -2**63 itself is representable)


class DurationError(ValueError):
    """Text Go's `time.ParseDuration` rejects; the message is Go's error text."""


def _go_time_quote(s: str) -> str:
    """`time.quote`: like %q for ASCII, but every non-ASCII/control byte becomes \\xNN."""
    out = ['"']
    for ch in s:
        if ord(ch) < 0x20 or ord(ch) >= 0x80:
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
        else:
            if ch in '"\\':
                out.append("\\")
            out.append(ch)
    out.append('"')
    return "".join(out)


def _invalid(orig: str) -> DurationError:
    return DurationError(f"time: invalid duration {_go_time_quote(orig)}")


def parse_go_duration_ns(text: str) -> int:
    """`time.ParseDuration(text)` as integer nanoseconds."""
    orig = text
    s = text
    neg = False
    if s and s[0] in "+-":
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if s == "":
        raise _invalid(orig)
    total = 0
    while s:
        if not (s[0] == "." or "0" <= s[0] <= "9"):
            raise _invalid(orig)
        # Integer part. Go fails on int64 overflow of the digits alone.
        i = 0
        while i < len(s) and "0" <= s[i] <= "9":
            i += 1
        pre = i > 0
        whole = int(s[:i]) if pre else 0
        if whole > _LIMIT:
            raise _invalid(orig)
        s = s[i:]
        # Fraction: Go keeps accumulating digits until they would overflow, then ignores the rest.
        frac, scale, post = 0, 1, False
        if s.startswith("."):
            s = s[1:]
            i = 0
            overflow = False
            while i < len(s) and "0" <= s[i] <= "9":
                if not overflow:
                    if frac > (_LIMIT - 1) // 10:
                        overflow = True
                    else:
                        nxt = frac * 10 + int(s[i])
                        if nxt > _LIMIT:
                            overflow = True
                        else:
                            frac, scale = nxt, scale * 10
                i += 1
            post = i > 0
            s = s[i:]
        if not pre and not post:
            raise _invalid(orig)  # e.g. ".s"
        # Unit: everything up to the next '.' or digit.
        i = 0
        while i < len(s) and not (s[i] == "." or "0" <= s[i] <= "9"):
            i += 1
        if i == 0:
            raise DurationError(f"time: missing unit in duration {_go_time_quote(orig)}")
        unit_text, s = s[:i], s[i:]
        unit = _NS_PER_UNIT.get(unit_text)
        if unit is None:
            raise DurationError(
                f"time: unknown unit {_go_time_quote(unit_text)} in duration {_go_time_quote(orig)}"
            )
        if whole > _LIMIT // unit:
            raise _invalid(orig)
        value = whole * unit
        if frac > 0:
            # Go computes this part in float64 (exact to the nanosecond for every unit up to h).
            value += int(float(frac) * (float(unit) / float(scale)))
            if value > _LIMIT:
                raise _invalid(orig)
        total += value
        if total > _LIMIT:
            raise _invalid(orig)
    if neg:
        return -total
    if total > _LIMIT - 1:
        raise _invalid(orig)
    return total


def parse_go_duration(text: str) -> float:
    """`time.ParseDuration(text)` in seconds (`"5m"` → 300.0, `"300ms"` → 0.3)."""
    return parse_go_duration_ns(text) / 1e9


def _fraction(value: int, digits: int) -> str:
    """`value / 10**digits` with the fraction's trailing zeros (and a bare '.') removed."""
    whole, frac = divmod(value, 10**digits)
    frac_text = f"{frac:0{digits}d}".rstrip("0")
    return f"{whole}.{frac_text}" if frac_text else str(whole)


def format_go_duration_ns(ns: int) -> str:
    """Go's `Duration.String()` of an integer nanosecond count: `5m0s`, `1h0m0s`, `300ms`, `0s`."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u < 1_000_000_000:
        if u < 1_000:
            return f"{sign}{u}ns"
        if u < 1_000_000:
            return f"{sign}{_fraction(u, 3)}\u00b5s"
        return f"{sign}{_fraction(u, 6)}ms"
    secs, sub = divmod(u, 1_000_000_000)
    text = _fraction((secs % 60) * 1_000_000_000 + sub, 9) + "s"
    minutes = secs // 60
    if minutes:
        text = f"{minutes % 60}m{text}"
        hours = minutes // 60
        if hours:
            text = f"{hours}h{text}"
    return sign + text


def format_go_duration(seconds: float) -> str:
    """Go's `Duration.String()` of a duration given in seconds (rounded to the nanosecond)."""
    return format_go_duration_ns(round(seconds * 1e9))
