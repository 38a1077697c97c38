"""Go time.ParseDuration / Duration.String() compatibility (values from Go's own test tables)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vgpu_scheduler.gocompat.durations import (
    DurationError,
    format_go_duration,
    format_go_duration_ns,
    parse_go_duration,
    parse_go_duration_ns,
)

SECOND = 1_000_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0", 0),
        ("5s", 5 * SECOND),
        ("30s", 30 * SECOND),
        ("1478s", 1478 * SECOND),
        ("-5s", -5 * SECOND),
        ("+5s", 5 * SECOND),
        ("-0", 0),
        ("+0", 0),
        ("5.0s", 5 * SECOND),
        ("5.6s", 5 * SECOND + 600_000_000),
        ("5.s", 5 * SECOND),
        (".5s", SECOND // 2),
        ("1.0s", SECOND),
        ("1.00s", SECOND),
        ("1.004s", SECOND + 4_000_000),
        ("1.0040s", SECOND + 4_000_000),
        ("100.00100s", 100 * SECOND + 1_000_000),
        ("10ns", 10),
        ("11us", 11_000),
        ("12\u00b5s", 12_000),
        ("12\u03bcs", 12_000),
        ("13ms", 13_000_000),
        ("300ms", 300_000_000),
        ("14s", 14 * SECOND),
        ("15m", 15 * MINUTE),
        ("5m", 5 * MINUTE),
        ("16h", 16 * HOUR),
        ("1.5h", 90 * MINUTE),
        ("3h30m", 3 * HOUR + 30 * MINUTE),
        ("1m30s", 90 * SECOND),
        ("10.5s4m", 4 * MINUTE + 10 * SECOND + 500_000_000),
        ("-2m3.4s", -(2 * MINUTE + 3 * SECOND + 400_000_000)),
        ("1h2m3s4ms5us6ns", HOUR + 2 * MINUTE + 3 * SECOND + 4_000_000 + 5_000 + 6),
        ("39h9m14.425s", 39 * HOUR + 9 * MINUTE + 14 * SECOND + 425_000_000),
        ("52763797000ns", 52763797000),
        ("0.3333333333333333333h", 20 * MINUTE),
        ("9007199254740993ns", (1 << 53) + 1),
        ("9223372036854775807ns", (1 << 63) - 1),
        ("9223372036854775.807us", (1 << 63) - 1),
        ("9223372036s854ms775us807ns", (1 << 63) - 1),
        ("-9223372036854775808ns", -(1 << 63)),
        ("-9223372036854775.808us", -(1 << 63)),
        ("0.100000000000000000000h", 6 * MINUTE),
        ("0.830103483285477580700h", 49 * MINUTE + 48 * SECOND + 372539827),
    ],
)
def test_parse_valid(text: str, ns: int) -> None:
    assert parse_go_duration_ns(text) == ns
    assert parse_go_duration(text) == pytest.approx(ns / 1e9)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'time: invalid duration ""'),
        ("3", 'time: missing unit in duration "3"'),
        ("-", 'time: invalid duration "-"'),
        ("s", 'time: invalid duration "s"'),
        (".", 'time: invalid duration "."'),
        ("-.", 'time: invalid duration "-."'),
        (".s", 'time: invalid duration ".s"'),
        ("+.s", 'time: invalid duration "+.s"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        ("x", 'time: invalid duration "x"'),
        ("5 m", 'time: unknown unit " m" in duration "5 m"'),
        ("\x85\x85", 'time: invalid duration "\\xc2\\x85\\xc2\\x85"'),
        ("\u00ff", 'time: invalid duration "\\xc3\\xbf"'),
        ("9223372036854775810ns", 'time: invalid duration "9223372036854775810ns"'),
        ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
        ("-9223372036854775809ns", 'time: invalid duration "-9223372036854775809ns"'),
        ("9223372036854776us", 'time: invalid duration "9223372036854776us"'),
        ("3000000h", 'time: invalid duration "3000000h"'),
        ("9223372036854775.808us", 'time: invalid duration "9223372036854775.808us"'),
        ("9223372036854ms775us808ns", 'time: invalid duration "9223372036854ms775us808ns"'),
        ('1"s', 'time: unknown unit "\\"s" in duration "1\\"s"'),
    ],
)
def test_parse_invalid(text: str, message: str) -> None:
    with pytest.raises(DurationError) as info:
        parse_go_duration_ns(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (1100, "1.1\u00b5s"),
        (2_200_000, "2.2ms"),
        (300_000_000, "300ms"),
        (3_300_000_000, "3.3s"),
        (28 * SECOND, "28s"),
        (90 * SECOND, "1m30s"),
        (5 * MINUTE, "5m0s"),
        (4 * MINUTE + 5 * SECOND, "4m5s"),
        (4 * MINUTE + 5_001_000_000, "4m5.001s"),
        (5 * HOUR + 6 * MINUTE + 7_001_000_000, "5h6m7.001s"),
        (8 * MINUTE + 1, "8m0.000000001s"),
        (HOUR, "1h0m0s"),
        ((1 << 63) - 1, "2562047h47m16.854775807s"),
        (-(1 << 63), "-2562047h47m16.854775808s"),
        (-5 * SECOND, "-5s"),
        (-1500, "-1.5\u00b5s"),
    ],
)
def test_format(ns: int, text: str) -> None:
    assert format_go_duration_ns(ns) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(300.0, "5m0s"), (28.0, "28s"), (90.0, "1m30s"), (0.0, "0s"), (0.3, "300ms"), (5400.0, "1h30m0s")],
)
def test_format_seconds(seconds: float, text: str) -> None:
    assert format_go_duration(seconds) == text


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_format_then_parse_round_trips(ns: int) -> None:
    assert parse_go_duration_ns(format_go_duration_ns(ns)) == ns
