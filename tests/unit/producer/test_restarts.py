"""``h5feed produce``'s restart rule (``h5feed/producer/service/restarts.py``): a worker that
delivered
is restarted at once, one that did not after a backoff of 1 s doubling to 60 s, and past
``max_restarts`` such deaths a minute the service reports a crash loop. Pure: the times are
given, nothing sleeps. The service itself runs in ``tests/system/test_producers.py``."""

from __future__ import annotations

from h5feed.producer.service.restarts import CRASH_WINDOW_S, Restarts


def test_deaths_before_delivery_back_off_doubling_to_60_s() -> None:
    restarts = Restarts(max_restarts=100)
    delays = [restarts.died("w", delivered=False, now=float(t)) for t in range(9)]
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert not restarts.due("w", now=8 + 59.9) and restarts.due("w", now=8 + 60)


def test_a_worker_that_delivered_restarts_at_once_and_its_backoff_starts_over() -> None:
    restarts = Restarts(max_restarts=3)
    assert [restarts.died("w", False, t) for t in (0.0, 1.0, 3.0)] == [1, 2, 4]
    assert restarts.died("w", delivered=True, now=10.0) == 0 and restarts.due("w", 10.0)
    assert restarts.died("w", delivered=False, now=11.0) == 1  # from 1 s again
    assert restarts.due("other", 0.0)  # never died: due at once


def test_a_crash_loop_past_max_restarts_a_minute_is_reported_deliveries_are_not() -> None:
    restarts = Restarts(max_restarts=3)
    for t in range(10):
        restarts.died("oom", delivered=True, now=float(t))  # killed while working
    for t in range(3):
        restarts.died("bad", delivered=False, now=float(t))
    assert restarts.crash_loop(now=3.0) is None  # 3 deaths: not past max_restarts
    restarts.died("bad", delivered=False, now=4.0)
    text = restarts.crash_loop(now=4.0)
    assert text is not None and "worker bad died 4 times within 60 s" in text
    assert "max_restarts=3" in text and "oom" not in text
    assert restarts.crash_loop(now=CRASH_WINDOW_S - 0.5) is not None  # all 4 in the window
    assert restarts.crash_loop(now=CRASH_WINDOW_S + 0.5) is None  # the first one left it


def test_forgotten_workers_leave_no_schedule_and_no_crash_loop() -> None:
    """A shared fleet's trainer left: its workers' deaths no longer count, and the record
    holds only workers that exist."""
    restarts = Restarts(max_restarts=1)
    for now in (0.0, 1.0, 3.0):
        restarts.died("fleet-t0-0", delivered=False, now=now)
    restarts.died("fleet-t1-0", delivered=False, now=3.0)
    assert restarts.crash_loop(4.0) is not None
    assert not restarts.due("fleet-t0-0", 4.0)
    restarts.forget(["fleet-t0-0"])
    assert restarts.crash_loop(4.0) is None
    assert restarts.due("fleet-t0-0", 4.0)
    assert not restarts.due("fleet-t1-0", 3.5)  # another trainer's worker keeps its backoff
