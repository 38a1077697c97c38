"""A write's last check before it leaves the process, for the caller that must not write late.

A bind checks that it may still write (not superseded, not past its deadline, still the leader)
before each API call; but a call can then wait in the client's rate limiter, and a process paused
there (SIGSTOP past its lease) sends the write when it wakes, unchecked. The caller sets its check
for the span of its writes (`guarded_writes`); the transport calls it once its token is granted,
right before the request goes out. A context variable keeps the check to the caller's own task:
other tasks' writes (lease renewals, events, registration) are not affected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_GUARD: ContextVar[Callable[[], None] | None] = ContextVar("vgpu_scheduler_write_guard", default=None)


@contextmanager
def guarded_writes(check: Callable[[], None]) -> Iterator[None]:
    """Every write of this task (and the tasks it starts) within the block calls `check` just
    before it is sent; `check` raises to stop it."""
    token = _GUARD.set(check)
    try:
        yield
    finally:
        _GUARD.reset(token)


def check_write(method: str) -> None:
    """Called by a transport right before it sends a request: a write runs the caller's check."""
    if method != "GET":
        guard = _GUARD.get()
        if guard is not None:
            guard()
