"""Go's `time.Parse(time.RFC3339, s)`: what it accepts, and its error text when it does not.

The node lock value starts with such a timestamp and HAMi answers a bind on a node whose lock it
cannot parse with the parse error itself, so the text is part of what kube-scheduler (and the
pod's BindingFailed event) shows. Go's general parser decides, not ISO 8601: the hour may have one
digit, a fractional second may follow the seconds, the zone is `Z` or `±hh:mm`, nothing may follow.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from vgpu_scheduler.gocompat.durations import _go_time_quote

RFC3339 = "2006-01-02T15:04:05Z07:00"

# The layout as time.Parse walks it: (literal prefix, layout element).
_CHUNKS = (
    ("", "2006"),
    ("-", "01"),
    ("-", "02"),
    ("T", "15"),
    (":", "04"),
    (":", "05"),
    ("", "Z07:00"),
)


class GoTimeParseError(ValueError):
    """A value `time.Parse` rejects; str() is Go's `*time.ParseError` text."""


def _error(value: str, layout_elem: str, value_elem: str, message: str = "") -> GoTimeParseError:
    if message:
        return GoTimeParseError(f"parsing time {_go_time_quote(value)}{message}")
    return GoTimeParseError(
        f"parsing time {_go_time_quote(value)} as {_go_time_quote(RFC3339)}: cannot parse "
        f"{_go_time_quote(value_elem)} as {_go_time_quote(layout_elem)}"
    )


def _digit(s: str, i: int) -> bool:
    return i < len(s) and "0" <= s[i] <= "9"


def _getnum(s: str, fixed: bool) -> tuple[int, str] | None:
    """Go's getnum: one or two leading digits (exactly two when fixed)."""
    if not _digit(s, 0):
        return None
    if not _digit(s, 1):
        return None if fixed else (int(s[0]), s[1:])
    return int(s[:2]), s[2:]


def _days_in(month: int, year: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def parse_rfc3339(value: str) -> datetime:
    """The instant `value` names (timezone-aware), or GoTimeParseError with Go's message."""
    rest = value
    year = month = day = hour = minute = second = micro = 0
    offset: int | None = None  # seconds east of UTC
    for prefix, elem in _CHUNKS:
        for ch in prefix:
            if not rest or rest[0] != ch:
                raise _error(value, prefix, rest)
            rest = rest[1:]
        hold = rest
        bad = False
        out_of_range = ""
        if elem == "2006":
            digits = rest[:4]
            if len(digits) < 4 or not all("0" <= c <= "9" for c in digits):
                bad = True
            else:
                year, rest = int(digits), rest[4:]
        elif elem == "Z07:00":
            if rest[:1] == "Z":
                rest, offset = rest[1:], 0
            elif len(rest) < 6 or rest[3] != ":":
                bad = True
            else:
                sign, hh, mm, rest = rest[0], rest[1:3], rest[4:6], rest[6:]
                hours, minutes = _getnum(hh, True), _getnum(mm, True)
                if hours is None or minutes is None:
                    bad = True
                else:
                    # Go tests the ranges with ">" (offsets of 24 h are written) and before the sign.
                    if hours[0] > 24:
                        out_of_range = "time zone offset hour"
                    if minutes[0] > 60:
                        out_of_range = "time zone offset minute"
                    offset = (hours[0] * 60 + minutes[0]) * 60 * (-1 if sign == "-" else 1)
                    bad = sign not in ("+", "-")
        else:
            got = _getnum(rest, fixed=elem != "15")
            if got is None:
                bad = True
            else:
                number, rest = got
                if elem == "01":
                    month = number
                    out_of_range = "month" if not 1 <= month <= 12 else ""
                elif elem == "02":
                    day = number
                elif elem == "15":
                    hour = number
                    out_of_range = "hour" if hour >= 24 else ""
                elif elem == "04":
                    minute = number
                    out_of_range = "minute" if minute >= 60 else ""
                else:
                    second = number
                    if second >= 60:
                        out_of_range = "second"
                    elif len(rest) >= 2 and rest[0] in ".," and _digit(rest, 1):
                        # A fractional second may follow although the layout has none.
                        n = 2
                        while _digit(rest, n):
                            n += 1
                        micro = int((rest[1:n] + "000000")[:6])
                        rest = rest[n:]
        if out_of_range:
            raise _error(value, elem, rest, f": {out_of_range} out of range")
        if bad:
            raise _error(value, elem, hold)
    if rest:
        raise _error(value, "", rest, f": extra text: {_go_time_quote(rest)}")
    if day < 1 or day > _days_in(month, year):
        raise _error(value, "", "", ": day out of range")
    assert offset is not None
    try:
        moment = datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)
        return moment - timedelta(seconds=offset)
    except (ValueError, OverflowError):  # year 0000 (Go accepts it; Python cannot hold it)
        return datetime.min.replace(tzinfo=UTC)
