"""Handshake timestamps, the generic check and NVIDIA's counters (§3.4), branch by branch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vgpu_scheduler.devices.handshake import (
    HandshakeResult,
    check_handshake,
    format_requesting,
    format_timestamp,
    parse_timestamp,
    requesting_patch,
)
from vgpu_scheduler.devices.nvidia.health import UNSEEN, NodeCounters, check_nvidia

CST = timezone(timedelta(hours=8))
NOW = datetime(2026, 11, 29, 21, 3, 30, tzinfo=UTC)


# ------------------------------------------------------------------ timestamps


def test_format_is_go_datetime_in_the_given_zone() -> None:
    assert format_requesting(NOW, UTC) == "Requesting_2026-11-29 21:03:30"
    assert format_requesting(NOW, CST) == "Requesting_2026-11-30 05:03:30"
    # Sub-second parts are dropped, as Go's layout has none.
    assert format_timestamp(NOW.replace(microsecond=999_999), UTC) == "2026-11-29 21:03:30"
    # Naive datetimes are wall-clock time already.
    assert format_timestamp(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02 03:04:05"


def test_format_without_zone_uses_local_time() -> None:
    local = NOW.astimezone()
    assert format_timestamp(NOW) == local.strftime("%Y-%m-%d %H:%M:%S")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2026-11-29 21:03:30", datetime(2026, 11, 29, 21, 3, 30, tzinfo=UTC), id="valid"),
        # Go: "15" takes 1 digit
        pytest.param("2026-11-29 1:03:30", datetime(2026, 11, 29, 1, 3, 30, tzinfo=UTC), id="one-digit hour"),
        pytest.param("2026-11-29 21:03:30.5", datetime(2026, 11, 29, 21, 3, 30, 500_000, tzinfo=UTC),
                     id="fraction after a dot"),
        pytest.param("2026-11-29 21:03:30,25", datetime(2026, 11, 29, 21, 3, 30, 250_000, tzinfo=UTC),
                     id="fraction after a comma"),
        pytest.param("2024-02-29 00:00:00", datetime(2024, 2, 29, tzinfo=UTC), id="leap day"),
        # RFC 3339 separator
        pytest.param("2026-11-29T21:03:30", None, id="RFC 3339 T rejected"),
        pytest.param("2026-11-29 21:03", None, id="no seconds"),
        # month must have 2 digits
        pytest.param("2026-1-29 21:03:30", None, id="one-digit month"),
        pytest.param("26-11-29 21:03:30", None, id="two-digit year"),
        # extra text
        pytest.param("2026-11-29 21:03:30 ", None, id="trailing space"),
        pytest.param("2026-11-29 21:03:30Z", None, id="trailing Z"),
        pytest.param("2026-13-01 00:00:00", None, id="month 13"),
        pytest.param("2025-02-29 00:00:00", None, id="no leap day in 2025"),
        pytest.param("2026-11-29 24:00:00", None, id="hour 24"),
        pytest.param("2026-11-29 21:60:00", None, id="minute 60"),
        pytest.param("", None, id="empty"),
        pytest.param("now", None, id="not a time"),
        # Go reads ASCII digits only; Python's \d would also take other scripts' digits.
        # Arabic-Indic year
        pytest.param("\u0662\u0660\u0662\u0666-11-29 21:03:30", None, id="Arabic-Indic digits"),
        # full-width seconds
        pytest.param("2026-11-29 21:03:\uff13\uff10", None, id="full-width digits"),
    ],
)
def test_parse_timestamp(text: str, expected: datetime | None) -> None:
    assert parse_timestamp(text, UTC) == expected


def test_parse_interprets_wall_clock_in_zone() -> None:
    assert parse_timestamp("2026-11-30 05:03:30", CST) == NOW


@given(st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30)))
def test_format_parse_round_trip(moment: datetime) -> None:
    aware = moment.replace(microsecond=0, tzinfo=CST)
    assert parse_timestamp(format_timestamp(aware, CST), CST) == aware


def test_requesting_patch_shape() -> None:
    assert requesting_patch("hami.io/node-handshake", "Requesting_x") == {
        "metadata": {"annotations": {"hami.io/node-handshake": "Requesting_x"}}
    }
    assert requesting_patch("hami.io/node-handshake", None) == {
        "metadata": {"annotations": {"hami.io/node-handshake": None}}
    }


# ------------------------------------------------------------------ generic check

HEALTHY_NO_UPDATE = HandshakeResult(healthy=True, need_update=False, write_requesting=False)
ASK_AGAIN = HandshakeResult(healthy=True, need_update=True, write_requesting=True)
UNHEALTHY = HandshakeResult(healthy=False, need_update=False, write_requesting=False)


def stamp(seconds_ago: float) -> str:
    return "Requesting_" + format_timestamp(NOW - timedelta(seconds=seconds_ago), UTC)


@pytest.mark.parametrize(
    ("value", "allocatable", "expected"),
    [
        # Not a Requesting value: ask again (write Requesting_<now>) and re-read the inventory.
        pytest.param(None, 0, ASK_AGAIN, id="no annotation, no devices: ask"),
        pytest.param(None, 4, ASK_AGAIN, id="no annotation: ask"),
        pytest.param("", 4, ASK_AGAIN, id="empty: ask"),
        # <= v2.7 plugins
        pytest.param("Reported 2026-11-29 21:03:00.123 +0000 UTC m=+1.0", 4, ASK_AGAIN,
                     id="Reported (v2.7 plugin): ask"),
        # <= v2.6 cleanup
        pytest.param("Deleted_2026-11-29 21:03:00", 0, ASK_AGAIN, id="Deleted (v2.6 cleanup): ask"),
        # case matters
        pytest.param("requesting_2026-11-29 21:00:00", 0, ASK_AGAIN, id="lower-case requesting: ask"),
        # Requesting without "_" or with a bad time: healthy, nothing to do.
        pytest.param("Requesting", 0, HEALTHY_NO_UPDATE, id="Requesting without time: healthy"),
        pytest.param("Requesting_", 0, HEALTHY_NO_UPDATE, id="Requesting_ with empty time: healthy"),
        pytest.param("Requesting_yesterday", 0, HEALTHY_NO_UPDATE, id="Requesting with a bad time: healthy"),
        # split at the first "_"
        pytest.param("Requesting_x_2026-11-29 20:00:00", 0, HEALTHY_NO_UPDATE,
                     id="split at the first underscore: healthy"),
        # "contains Requesting" is enough; the time is whatever follows the first "_".
        pytest.param("xRequesting_2026-11-29 20:00:00", 0, UNHEALTHY,
                     id="contains Requesting: expired, unhealthy"),
        # Within the 60 s window.
        pytest.param(stamp(0), 0, HEALTHY_NO_UPDATE, id="just stamped: healthy"),
        pytest.param(stamp(59), 0, HEALTHY_NO_UPDATE, id="59 s old: healthy"),
        # stamped "in the future" (clock skew)
        pytest.param(stamp(-30), 0, HEALTHY_NO_UPDATE, id="stamped in the future: healthy"),
        # Expired: healthy while the node still advertises devices, unhealthy at 0.
        pytest.param(stamp(60), 3, HEALTHY_NO_UPDATE, id="expired with devices: healthy"),
        pytest.param(stamp(3600), 1, HEALTHY_NO_UPDATE, id="an hour old with devices: healthy"),
        pytest.param(stamp(60), 0, UNHEALTHY, id="expired without devices: unhealthy"),
        pytest.param(stamp(61), -1, UNHEALTHY, id="expired with a negative count: unhealthy"),
        pytest.param(stamp(86400), 0, UNHEALTHY, id="a day old: unhealthy"),
    ],
)
def test_generic_check(value: str | None, allocatable: int, expected: HandshakeResult) -> None:
    assert check_handshake(value, NOW, allocatable, UTC) == expected


def test_generic_check_compares_instants_across_zones() -> None:
    # Written as local time in +08:00, 30 s ago: still within the window.
    value = "Requesting_" + format_timestamp(NOW - timedelta(seconds=30), CST)
    assert check_handshake(value, NOW, 0, CST) == HEALTHY_NO_UPDATE
    assert check_handshake(value, NOW + timedelta(seconds=31), 0, CST) == UNHEALTHY


# ------------------------------------------------------------------ NVIDIA counters

REG_A = '[{"id":"GPU-0","count":10,"devmem":8192,"devcore":100,"type":"NVIDIA-A100","health":true}]'
REG_B = '[{"id":"GPU-1","count":10,"devmem":8192,"devcore":100,"type":"NVIDIA-A100","health":true}]'


@pytest.mark.parametrize(
    ("counters", "current", "register", "generic", "healthy", "need_update", "after"),
    [
        # current == 0 and nothing reported: the generic result, counters untouched.
        pytest.param(UNSEEN, 0, REG_A, ASK_AGAIN, True, True, UNSEEN, id="nothing reported: ask again"),
        pytest.param(UNSEEN, 0, REG_A, UNHEALTHY, False, False, UNSEEN, id="nothing reported: unhealthy"),
        pytest.param(UNSEEN, 0, "", HEALTHY_NO_UPDATE, True, False, UNSEEN,
                     id="nothing reported, empty register: healthy"),
        pytest.param(NodeCounters(0, REG_A), 0, REG_B, HEALTHY_NO_UPDATE, True, False, NodeCounters(0, REG_A),
                     id="zero seen before: counters kept"),
        # current == 0 after a positive count: unhealthy now, needUpdate from the generic check.
        pytest.param(
            NodeCounters(4, REG_A), 0, REG_A, HEALTHY_NO_UPDATE, False, False, NodeCounters(0, REG_A),
            id="count dropped to zero: unhealthy",
        ),
        pytest.param(NodeCounters(4, REG_A), 0, REG_B, ASK_AGAIN, False, True, NodeCounters(0, REG_B),
                     id="count dropped to zero, register changed: update"),
        # Count changed (first sight after a restart included): healthy + update.
        pytest.param(UNSEEN, 4, REG_A, HEALTHY_NO_UPDATE, True, True, NodeCounters(4, REG_A),
                     id="first sight: update"),
        pytest.param(NodeCounters(4, REG_A), 8, REG_A, HEALTHY_NO_UPDATE, True, True, NodeCounters(8, REG_A),
                     id="count grew: update"),
        pytest.param(NodeCounters(8, REG_A), 4, REG_B, UNHEALTHY, True, True, NodeCounters(4, REG_B),
                     id="count shrank: update though unhealthy"),
        # Register annotation changed: generic health, update.
        pytest.param(NodeCounters(4, REG_A), 4, REG_B, HEALTHY_NO_UPDATE, True, True, NodeCounters(4, REG_B),
                     id="register changed: update"),
        pytest.param(NodeCounters(4, REG_A), 4, "", HEALTHY_NO_UPDATE, True, True, NodeCounters(4, ""),
                     id="register emptied: update"),
        # Nothing changed: the generic result.
        pytest.param(NodeCounters(4, REG_A), 4, REG_A, HEALTHY_NO_UPDATE, True, False, NodeCounters(4, REG_A),
                     id="nothing changed"),
        pytest.param(NodeCounters(4, REG_A), 4, REG_A, ASK_AGAIN, True, True, NodeCounters(4, REG_A),
                     id="nothing changed, asked again: update"),
    ],
)
def test_nvidia_check(
    counters: NodeCounters,
    current: int,
    register: str,
    generic: HandshakeResult,
    healthy: bool,
    need_update: bool,
    after: NodeCounters,
) -> None:
    result = check_nvidia(counters, current, register, generic)
    assert (result.healthy, result.need_update, result.counters) == (healthy, need_update, after)
