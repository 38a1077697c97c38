"""Go's time.Parse(time.RFC3339, ...): accepted forms and Go's exact error texts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from vgpu_scheduler.gocompat.gotime import GoTimeParseError, parse_rfc3339

L = '"2006-01-02T15:04:05Z07:00"'
V = "2025-10-20T03:07:02"


@pytest.mark.parametrize(
    ("text", "instant"),
    [
        pytest.param("2025-10-20T03:07:02Z", datetime(2025, 10, 20, 3, 7, 2, tzinfo=UTC), id="UTC"),
        pytest.param("2025-10-20T03:07:02+08:00", datetime(2025, 10, 19, 19, 7, 2, tzinfo=UTC), id="+08:00"),
        pytest.param("2025-10-20T03:07:02-01:30", datetime(2025, 10, 20, 4, 37, 2, tzinfo=UTC), id="-01:30"),
        pytest.param("2025-10-20T3:07:02Z", datetime(2025, 10, 20, 3, 7, 2, tzinfo=UTC), id="one-digit hour"),
        pytest.param("2025-10-20T03:07:02.5Z", datetime(2025, 10, 20, 3, 7, 2, 500000, tzinfo=UTC),
                     id="fraction after a dot"),
        pytest.param("2025-10-20T03:07:02,25+00:00", datetime(2025, 10, 20, 3, 7, 2, 250000, tzinfo=UTC),
                     id="fraction after a comma"),
        pytest.param("2024-02-29T00:00:00Z", datetime(2024, 2, 29, tzinfo=UTC), id="leap day"),
    ],
)
def test_accepted(text: str, instant: datetime) -> None:
    assert parse_rfc3339(text) == instant


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("lock", f'parsing time "lock" as {L}: cannot parse "lock" as "2006"', id="not a time"),
        pytest.param("", f'parsing time "" as {L}: cannot parse "" as "2006"', id="empty"),
        pytest.param("2025-10-20", f'parsing time "2025-10-20" as {L}: cannot parse "" as "T"',
                     id="date only"),
        pytest.param(
            "2025-10-20 03:07Z", f'parsing time "2025-10-20 03:07Z" as {L}: cannot parse " 03:07Z" as "T"',
            id="space instead of T",
        ),
        pytest.param(
            "2025-1-20T03:07Z", f'parsing time "2025-1-20T03:07Z" as {L}: cannot parse "1-20T03:07Z" as "01"',
            id="one-digit month",
        ),
        pytest.param(V, f'parsing time "{V}" as {L}: cannot parse "" as "Z07:00"', id="no zone"),
        pytest.param(V + "+0800", f'parsing time "{V}+0800" as {L}: cannot parse "+0800" as "Z07:00"',
                     id="zone without colon"),
        pytest.param(V + "Zjunk", f'parsing time "{V}Zjunk": extra text: "junk"', id="extra text"),
        pytest.param("2025-13-01T00:00:00Z", 'parsing time "2025-13-01T00:00:00Z": month out of range',
                     id="month 13"),
        pytest.param("2025-02-30T00:00:00Z", 'parsing time "2025-02-30T00:00:00Z": day out of range',
                     id="February 30"),
        pytest.param("2025-10-20T24:00:00Z", 'parsing time "2025-10-20T24:00:00Z": hour out of range',
                     id="hour 24"),
        pytest.param("2025-10-20T03:60:00Z", 'parsing time "2025-10-20T03:60:00Z": minute out of range',
                     id="minute 60"),
        pytest.param("2025-10-20T03:07:60Z", 'parsing time "2025-10-20T03:07:60Z": second out of range',
                     id="second 60"),
        pytest.param(V + "+25:00", f'parsing time "{V}+25:00": time zone offset hour out of range',
                     id="zone hour 25"),
        pytest.param(V + "Z\n", f'parsing time "{V}Z\\x0a": extra text: "\\x0a"', id="trailing newline"),
    ],
)
def test_rejected_with_go_message(text: str, message: str) -> None:
    with pytest.raises(GoTimeParseError) as err:
        parse_rfc3339(text)
    assert str(err.value) == message
