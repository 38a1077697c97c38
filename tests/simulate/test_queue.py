from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import builders
from vgpu_scheduler.simulate.queue import QueuedPod, QueueError, SchedulingQueue, pod_key, pod_priority


def pod(name: str, priority: int | None = None, ns: str = "default") -> dict[str, Any]:
    spec = {} if priority is None else {"priority": priority}
    return builders.pod(name, namespace=ns, containers=[], spec=spec)


def pop_pod(q: SchedulingQueue, now: float) -> QueuedPod:
    got = q.pop(now)
    assert isinstance(got, QueuedPod), got
    return got


def test_active_order_is_priority_then_arrival() -> None:
    q = SchedulingQueue()
    for name, prio in [("a", 0), ("b", 10), ("c", None), ("d", 10), ("e", -5), ("f", 100)]:
        q.add(pod(name, prio), now=0.0)
    order = [pop_pod(q, 0.0).key for _ in range(6)]
    assert order == ["default/f", "default/b", "default/d", "default/a", "default/c", "default/e"]
    assert q.pop(0.0) is None


@given(st.lists(st.integers(-3, 3), max_size=30))
def test_pop_order_matches_sort_by_priority_then_seq(prios: list[int]) -> None:
    q = SchedulingQueue()
    for i, p in enumerate(prios):
        q.add(pod(f"p{i}", p), now=0.0)
    popped = [pop_pod(q, 0.0).seq for _ in prios]
    assert popped == sorted(range(len(prios)), key=lambda i: (-prios[i], i))


def test_priority_and_key_helpers() -> None:
    assert pod_priority({"spec": {"priority": True}}) == 0  # a bool is not a priority
    assert pod_priority({"spec": {"priority": "7"}}) == 0
    assert pod_priority({}) == 0
    assert pod_key({"metadata": {"name": "x"}}) == "default/x"


def test_backoff_doubles_from_1s_to_10s() -> None:
    q = SchedulingQueue()
    assert [q.backoff_duration(a) for a in range(1, 8)] == [1, 2, 4, 8, 10, 10, 10]
    assert q.backoff_duration(10_000) == 10  # no overflow for huge attempt counts


def test_failed_pod_waits_for_an_event_then_backs_off_in_simulated_time() -> None:
    q = SchedulingQueue()
    q.add(pod("gpu"), now=0.0)
    now = 0.0
    expiries = []
    for _ in range(6):
        qp = pop_pod(q, now)
        q.add_unschedulable(qp, now)
        assert q.pop(now) is None  # nothing changed: no retry without an event
        assert q.unschedulable_count == 1
        assert q.move_all_to_active_on_event(now, "pod finished") == 1
        expiry = q.pop(now)  # still backing off: the queue says until when
        assert isinstance(expiry, float)
        expiries.append(expiry - now)
        assert q.pop(expiry - 0.001) == expiry
        now = expiry
    assert expiries == [1, 2, 4, 8, 10, 10]
    assert pop_pod(q, now).attempts == 7


def test_event_after_backoff_expired_goes_straight_to_active() -> None:
    q = SchedulingQueue()
    q.add(pod("a"), now=0.0)
    q.add_unschedulable(pop_pod(q, 0.0), now=0.0)
    assert q.move_all_to_active_on_event(5.0) == 1
    assert q.active_count == 1 and q.backoff_count == 0
    assert pop_pod(q, 5.0).key == "default/a"


def test_event_during_the_pods_own_cycle_is_not_lost() -> None:
    q = SchedulingQueue()
    q.add(pod("a"), now=0.0)
    qp = pop_pod(q, 0.0)
    q.move_all_to_active_on_event(0.5, "node added")  # arrives while `a` is being scheduled
    q.add_unschedulable(qp, now=0.5)
    assert q.unschedulable_count == 0 and q.backoff_count == 1
    assert q.pop(0.5) == 1.5
    assert pop_pod(q, 1.5).key == "default/a"


def test_event_before_the_cycle_does_not_count() -> None:
    q = SchedulingQueue()
    q.add(pod("a"), now=0.0)
    q.move_all_to_active_on_event(0.0)
    q.add_unschedulable(pop_pod(q, 0.0), now=0.0)
    assert q.unschedulable_count == 1


def test_backoff_keeps_priority_order_when_released() -> None:
    q = SchedulingQueue()
    q.add(pod("low", 0), now=0.0)
    q.add(pod("high", 5), now=0.0)
    first, second = pop_pod(q, 0.0), pop_pod(q, 0.0)
    q.add_unschedulable(second, 0.0)
    q.add_unschedulable(first, 0.0)
    q.move_all_to_active_on_event(0.2)
    assert [pop_pod(q, 1.0).key, pop_pod(q, 1.0).key] == ["default/high", "default/low"]


def test_delete_removes_from_any_sub_queue() -> None:
    q = SchedulingQueue()
    for name in ("a", "b", "c"):
        q.add(pod(name), now=0.0)
    b = pop_pod(q, 0.0)
    assert b.key == "default/a"
    q.add_unschedulable(b, 0.0)
    assert q.delete("default/a") and q.delete("default/b")
    assert not q.delete("default/zzz")
    assert [p.key for p in q.pending()] == ["default/c"]
    assert pop_pod(q, 0.0).key == "default/c"
    assert q.pop(0.0) is None and len(q) == 0


def test_misuse_is_reported() -> None:
    q = SchedulingQueue()
    qp = q.add(pod("a"), now=0.0)
    with pytest.raises(QueueError, match="already queued"):
        q.add(pod("a"), now=0.0)
    with pytest.raises(QueueError, match="already queued"):
        q.add_unschedulable(qp, 0.0)
    q.delete(qp.key)
    with pytest.raises(QueueError, match="never popped"):
        q.add_unschedulable(qp, 0.0)
    with pytest.raises(ValueError, match="backoff"):
        SchedulingQueue(initial_backoff=5, max_backoff=1)


def test_a_parked_pod_waits_for_release_then_resumes_its_backoff_schedule() -> None:
    q = SchedulingQueue()
    q.add(pod("p"), now=0.0)
    qp = pop_pod(q, 0.0)
    q.park(qp, 0.0)
    assert "default/p" in q and len(q) == 1 and q.parked_count == 1
    assert [x.key for x in q.pending()] == ["default/p"]
    assert q.pop(1_000.0) is None  # no timer brings a parked pod back
    # Released at 100 s: kube-scheduler would have retried at 1, 3, 7, 15, 25, ... 95 s; next at 105 s.
    assert q.release_parked(100.0) == 1
    assert q.parked_count == 0
    assert q.pop(104.9) == 105.0
    again = pop_pod(q, 105.0)
    assert again.attempts == 1 + 12 + 1  # the first try, 12 retries skipped (1, 3, 7, 15, 25 .. 95), this one
    q.park(again, 105.0)
    assert q.move_all_to_active_on_event(105.5) == 1  # a cluster event releases parked pods too
    assert q.pop(105.5) == 115.0


def test_release_before_the_backoff_runs_out_keeps_the_expiry() -> None:
    q = SchedulingQueue()
    q.add(pod("p"), now=0.0)
    q.park(pop_pod(q, 0.0), 0.0)
    q.release_parked(0.5)
    assert q.pop(0.5) == 1.0


def test_a_parked_pod_can_be_deleted_and_not_parked_twice() -> None:
    q = SchedulingQueue()
    q.add(pod("p"), now=0.0)
    qp = pop_pod(q, 0.0)
    q.park(qp, 0.0)
    with pytest.raises(QueueError):
        q.park(qp, 0.0)
    assert q.delete("default/p")
    assert len(q) == 0 and q.release_parked(1.0) == 0


@given(st.floats(0, 1e7, allow_nan=False), st.integers(1, 40))
def test_skipped_retries_land_on_the_schedule_of_a_pod_retried_all_along(release: float, first: int) -> None:
    """Parking and releasing at `release` gives the expiry that failing at every retry gives."""
    q = SchedulingQueue()
    q.add(pod("p"), now=0.0)
    qp = pop_pod(q, 0.0)
    qp.attempts = first
    q.park(qp, 0.0)
    expected_attempts, expiry = first, q.backoff_duration(first)
    while expiry <= release and expected_attempts < first + 100:  # simulate the retries one by one
        expected_attempts += 1
        expiry += q.backoff_duration(expected_attempts)
    q.release_parked(release)
    if expected_attempts < first + 100:
        assert qp.backoff_expiry == pytest.approx(expiry)
        assert qp.attempts == expected_attempts
    assert qp.backoff_expiry > release
