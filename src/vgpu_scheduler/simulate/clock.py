"""Simulated time: the loop jumps from event to event instead of sleeping.

Nothing here reads the wall clock, so a run is reproducible and takes as long as the computation, not
as long as the workload would have run.
"""

from __future__ import annotations

import datetime as _dt

from vgpu_scheduler.standin.embedded.runtime import DEFAULT_EPOCH


class ClockError(ValueError):
    """Raised when the loop tries to move simulated time backwards."""


class SimClock:
    """Monotonic simulated clock, in seconds since the start of the simulation."""

    __slots__ = ("_epoch", "_now")

    def __init__(self, start: float = 0.0, *, epoch: int = DEFAULT_EPOCH) -> None:
        if start < 0:
            raise ClockError(f"simulated time cannot start before 0 (got {start})")
        self._now = float(start)
        self._epoch = epoch

    @property
    def now(self) -> float:
        return self._now

    @property
    def epoch(self) -> int:
        return self._epoch

    def advance_to(self, t: float) -> None:
        """Jump to time `t`; jumping to the current time is a no-op, going back is an error."""
        if t < self._now:
            raise ClockError(f"simulated time cannot go backwards (now {self._now}, asked {t})")
        self._now = float(t)

    def advance(self, dt: float) -> None:
        if dt < 0:
            raise ClockError(f"cannot advance simulated time by a negative amount ({dt})")
        self._now += dt

    def unix(self) -> int:
        """Whole Unix seconds, as HAMi writes them into `hami.io/vgpu-time` / `hami.io/bind-time`."""
        return self._epoch + int(self._now)

    def datetime(self) -> _dt.datetime:
        """The current simulated instant as an aware UTC datetime."""
        return _dt.datetime.fromtimestamp(self._epoch + self._now, tz=_dt.UTC)

    def rfc3339(self) -> str:
        """`2026-01-01T00:00:05Z`, the form Kubernetes uses in metadata timestamps."""
        return self.datetime().strftime("%Y-%m-%dT%H:%M:%SZ")

    def __repr__(self) -> str:
        return f"SimClock(now={self._now!r}, epoch={self._epoch!r})"
