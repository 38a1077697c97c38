"""A pod's backoff is over at its expiry instant, whichever way the queue meets that instant.

kube-scheduler's PriorityQueue treats a pod as backing off while its backoff time is *after* now
(`isPodBackingoff`): at exactly the expiry it is not. So a cluster event at that instant sends the
pod straight to activeQ, the same place a pop at that instant would have flushed it to.
"""

from __future__ import annotations

import pytest

from tests.builders import pod
from vgpu_scheduler.simulate.queue import QueuedPod, SchedulingQueue


def _failed_once(q: SchedulingQueue, failed_at: float) -> QueuedPod:
    q.add(pod("a"), now=0.0)
    qp = q.pop(failed_at)
    assert isinstance(qp, QueuedPod)
    q.add_unschedulable(qp, failed_at)
    return qp


@pytest.mark.parametrize("failed_at", [0.0, 2.5])
def test_an_event_at_the_exact_expiry_goes_straight_to_active(failed_at: float) -> None:
    q = SchedulingQueue(initial_backoff=1.0)
    qp = _failed_once(q, failed_at)
    assert qp.backoff_expiry == failed_at + 1.0
    assert q.move_all_to_active_on_event(qp.backoff_expiry) == 1
    assert (q.active_count, q.backoff_count) == (1, 0)


def test_an_event_just_before_the_expiry_waits_in_backoff() -> None:
    q = SchedulingQueue(initial_backoff=1.0)
    qp = _failed_once(q, 0.0)
    q.move_all_to_active_on_event(qp.backoff_expiry - 0.001)
    assert (q.active_count, q.backoff_count) == (0, 1)
    # ... and the pop at the expiry instant releases it: the same boundary from the other side.
    released = q.pop(qp.backoff_expiry)
    assert isinstance(released, QueuedPod) and released.key == "default/a"
