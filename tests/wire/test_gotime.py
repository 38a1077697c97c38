"""Go's time.Parse(time.RFC3339, ...): accepted forms and Go's exact error texts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from vgpu_scheduler.wire.gotime import GoTimeParseError, parse_rfc3339

L = '"2006-01-02T15:04:05Z07:00"'
V = "2025-10-20T03:07:02"


@pytest.mark.parametrize(
    ("text", "instant"),
    [
        ("2025-10-20T03:07:02Z", datetime(2025, 10, 20, 3, 7, 2, tzinfo=UTC)),
        ("2025-10-20T03:07:02+08:00", datetime(2025, 10, 19, 19, 7, 2, tzinfo=UTC)),
        ("2025-10-20T03:07:02-01:30", datetime(2025, 10, 20, 4, 37, 2, tzinfo=UTC)),
        ("2025-10-20T3:07:02Z", datetime(2025, 10, 20, 3, 7, 2, tzinfo=UTC)),  # one-digit hour
        ("2025-10-20T03:07:02.5Z", datetime(2025, 10, 20, 3, 7, 2, 500000, tzinfo=UTC)),
        ("2025-10-20T03:07:02,25+00:00", datetime(2025, 10, 20, 3, 7, 2, 250000, tzinfo=UTC)),
        ("2024-02-29T00:00:00Z", datetime(2024, 2, 29, tzinfo=UTC)),
    ],
)
def test_accepted(text: str, instant: datetime) -> None:
    assert parse_rfc3339(text) == instant


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lock", f'parsing time "lock" as {L}: cannot parse "lock" as "2006"'),
        ("", f'parsing time "" as {L}: cannot parse "" as "2006"'),
        ("2025-10-20", f'parsing time "2025-10-20" as {L}: cannot parse "" as "T"'),
        ("2025-10-20 03:07Z", f'parsing time "2025-10-20 03:07Z" as {L}: cannot parse " 03:07Z" as "T"'),
        ("2025-1-20T03:07Z", f'parsing time "2025-1-20T03:07Z" as {L}: cannot parse "1-20T03:07Z" as "01"'),
        (V, f'parsing time "{V}" as {L}: cannot parse "" as "Z07:00"'),
        (V + "+0800", f'parsing time "{V}+0800" as {L}: cannot parse "+0800" as "Z07:00"'),
        (V + "Zjunk", f'parsing time "{V}Zjunk": extra text: "junk"'),
        ("2025-13-01T00:00:00Z", 'parsing time "2025-13-01T00:00:00Z": month out of range'),
        ("2025-02-30T00:00:00Z", 'parsing time "2025-02-30T00:00:00Z": day out of range'),
        ("2025-10-20T24:00:00Z", 'parsing time "2025-10-20T24:00:00Z": hour out of range'),
        ("2025-10-20T03:60:00Z", 'parsing time "2025-10-20T03:60:00Z": minute out of range'),
        ("2025-10-20T03:07:60Z", 'parsing time "2025-10-20T03:07:60Z": second out of range'),
        (V + "+25:00", f'parsing time "{V}+25:00": time zone offset hour out of range'),
        (V + "Z\n", f'parsing time "{V}Z\\x0a": extra text: "\\x0a"'),
    ],
)
def test_rejected_with_go_message(text: str, message: str) -> None:
    with pytest.raises(GoTimeParseError) as err:
        parse_rfc3339(text)
    assert str(err.value) == message
