from collections.abc import Callable

import pytest

from vgpu_scheduler.simulate.clock import ClockError, SimClock
from vgpu_scheduler.standin.embedded.runtime import DEFAULT_EPOCH


def test_starts_at_zero_and_jumps_forward() -> None:
    clock = SimClock()
    assert clock.now == 0.0
    clock.advance_to(2.5)
    clock.advance(1.5)
    assert clock.now == 4.0
    clock.advance_to(4.0)  # same instant is fine
    assert clock.now == 4.0


@pytest.mark.parametrize(
    ("move", "message"),
    [pytest.param(lambda c: c.advance_to(0.5), "backwards",
                  id="advance_to the past"), pytest.param(lambda c: c.advance(-0.1), "negative",
                                                              id="advance by a negative step")],
)
def test_never_goes_backwards(move: Callable[[SimClock], None], message: str) -> None:
    clock = SimClock(1.0)
    with pytest.raises(ClockError, match=message):
        move(clock)
    assert clock.now == 1.0


def test_timestamps_come_from_the_fixed_epoch() -> None:
    clock = SimClock(epoch=DEFAULT_EPOCH)
    clock.advance(65.9)
    assert clock.unix() == DEFAULT_EPOCH + 65
    assert clock.rfc3339() == "2026-01-01T00:01:05Z"


def test_negative_start_is_rejected() -> None:
    with pytest.raises(ClockError):
        SimClock(-1)
