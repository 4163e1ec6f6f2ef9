"""``workers="auto"``: the controller on given verdicts with an injected clock (grow, shrink,
hysteresis, 10 s spacing, the cap, a generator never grows), its driver on fake workers, the
option's validation, and on real processes: every epoch exactly once while it grows."""

from __future__ import annotations

import collections
import pathlib

import pytest

from h5feed.common.cpus import available_cpus
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.options import FeedOptions, ProcessOptions
from h5feed.consumer.processes.autoscale import (
    GROW_AFTER,
    MIN_SPACING_S,
    SHRINK_AFTER,
    Autoscaler,
    AutoWorkers,
    Reading,
)

BOUND = Reading(wait_share=0.6, idle_workers=0)  # input-bound
IDLE = Reading(wait_share=0.0, idle_workers=1)  # nothing waits, a worker has nothing
MIDDLE = Reading(wait_share=0.05, idle_workers=1)  # between the thresholds


def run(
    controller: Autoscaler,
    readings: list[Reading],
    current: int,
    start: float = 0.0,
    step_s: float = 1.0,
    can_grow: bool = True,
) -> tuple[list[int], float]:
    """Feed one reading per ``step_s`` seconds; the counts decided, and the next time."""
    counts = []
    now = start
    for reading in readings:
        current = controller.decide(now, reading, current, can_grow)
        counts.append(current)
        now += step_s
    return counts, now


def test_grows_after_a_streak_of_input_bound_checks_only() -> None:
    controller = Autoscaler(cap=4)
    counts, _ = run(controller, [BOUND] * GROW_AFTER, current=1)
    assert counts == [1] * (GROW_AFTER - 1) + [2]
    assert controller.changes == [(GROW_AFTER - 1.0, 1, 2)]


def test_a_broken_streak_starts_over() -> None:
    """Hysteresis: a check between the thresholds (or an idle one) resets the grow streak."""
    controller = Autoscaler(cap=4)
    readings = [BOUND] * (GROW_AFTER - 1) + [MIDDLE] + [BOUND] * (GROW_AFTER - 1)
    counts, now = run(controller, readings, current=1)
    assert set(counts) == {1}
    counts, _ = run(controller, [BOUND], current=1, start=now)
    assert counts == [2]


def test_shrinks_only_after_a_longer_idle_streak_and_a_busy_check_resets_it() -> None:
    controller = Autoscaler(cap=4)
    counts, now = run(controller, [IDLE] * (SHRINK_AFTER - 1), current=3)
    assert set(counts) == {3}
    # a low share with no idle worker is no reason to shrink: the streak starts over
    counts, now = run(controller, [Reading(0.0, idle_workers=0)], current=3, start=now)
    counts, now = run(controller, [IDLE] * (SHRINK_AFTER - 1), current=3, start=now)
    assert set(counts) == {3}
    counts, _ = run(controller, [IDLE], current=3, start=now)
    assert counts == [2]


def test_a_share_between_thresholds_changes_nothing_ever() -> None:
    controller = Autoscaler(cap=4)
    counts, _ = run(controller, [MIDDLE] * 100, current=2)
    assert set(counts) == {2} and controller.changes == []


def test_at_most_one_change_per_10_s() -> None:
    controller = Autoscaler(cap=8)
    counts, _ = run(controller, [BOUND] * 60, current=1)
    times = [at for at, _old, _new in controller.changes]
    assert len(times) >= 4
    assert all(b - a >= MIN_SPACING_S for a, b in zip(times, times[1:], strict=False))
    # a change needs a fresh streak after the last one, and the spacing: every 10 s here
    assert [b - a for a, b in zip(times, times[1:], strict=False)] == [MIN_SPACING_S] * (
        len(times) - 1
    )
    assert counts[-1] == 1 + len(times)


def test_the_spacing_holds_from_grow_to_shrink_too() -> None:
    controller = Autoscaler(cap=4)
    counts, now = run(controller, [BOUND] * GROW_AFTER, current=1)
    assert counts[-1] == 2
    grown_at = controller.changes[-1][0]
    # idle from now on: the shrink streak would be complete after SHRINK_AFTER checks
    counts, _ = run(controller, [IDLE] * (SHRINK_AFTER + 5), current=2, start=now)
    shrunk_at = controller.changes[-1][0]
    assert controller.changes[-1][1:] == (2, 1)
    assert shrunk_at - grown_at >= MIN_SPACING_S


def test_checks_count_once_per_interval_however_often_it_is_asked() -> None:
    controller = Autoscaler(cap=4)
    # 100 calls within 0.99 s are one check
    counts, now = run(controller, [BOUND] * 100, current=1, step_s=0.0099)
    assert set(counts) == {1}
    counts, _ = run(controller, [BOUND] * (GROW_AFTER - 1), current=1, start=1.0)
    assert counts[-1] == 2


def test_never_above_the_cap_nor_under_one() -> None:
    controller = Autoscaler(cap=2)
    counts, now = run(controller, [BOUND] * 100, current=1)
    assert max(counts) == 2 and controller.changes == [(GROW_AFTER - 1.0, 1, 2)]
    controller = Autoscaler(cap=2)
    counts, _ = run(controller, [IDLE] * 100, current=1)
    assert set(counts) == {1} and controller.changes == []
    with pytest.raises(ValueError, match="cap must be >= 1"):
        Autoscaler(cap=0)


def test_a_generator_source_never_grows_mid_iteration() -> None:
    controller = Autoscaler(cap=4)
    counts, now = run(controller, [BOUND] * 50, current=1, can_grow=False)
    assert set(counts) == {1} and controller.changes == []
    # it may still shrink (a retired worker hands its shard back as a lost one does)
    counts, _ = run(controller, [IDLE] * SHRINK_AFTER, current=2, start=now, can_grow=False)
    assert counts[-1] == 1


class FakeWorkers:
    """Names only: what :class:`AutoWorkers` asks of the local workers."""

    def __init__(self, names: list[str], running: int) -> None:
        self.names, self.count = names, running
        self.reaped = 0

    @property
    def running(self) -> list[str]:
        return self.names[: self.count]

    def grow(self) -> str | None:
        if self.count >= len(self.names):
            return None
        self.count += 1
        return self.names[self.count - 1]

    def retire(self) -> str | None:
        if self.count <= 1:
            return None
        self.count -= 1
        return self.names[self.count]

    def reap(self) -> None:
        self.reaped += 1


def local_peer(name: str, outstanding: int) -> Peer:
    peer = Peer(name.encode(), name, 1, "localhost")
    peer.local = True
    for unit in range(outstanding):
        peer.outstanding[unit] = 0.0
    return peer


def test_the_driver_starts_and_retires_workers_on_the_controller_s_word() -> None:
    workers = FakeWorkers(["w-0", "w-1", "w-2"], running=1)
    shares: collections.deque[float | None] = collections.deque([None] * 5 + [0.9] * GROW_AFTER)
    lines: list[str] = []
    driver = AutoWorkers(
        Autoscaler(cap=3), workers, lambda: shares.popleft(), lambda: True, lines.append
    )
    busy = [local_peer("w-0", outstanding=2)]
    for now in range(5 + GROW_AFTER):  # no figures before the first batch: no decision
        driver.step(float(now), busy)
    assert workers.running == ["w-0", "w-1"] and driver.grown == 1
    assert "started worker w-1" in lines[-1]
    # idle: w-1 holds nothing; retired after the idle streak, spaced from the growth
    shares.extend([0.0] * (SHRINK_AFTER + 10))
    peers = [local_peer("w-0", outstanding=1), local_peer("w-1", outstanding=0)]
    for now in range(5 + GROW_AFTER, 5 + GROW_AFTER + SHRINK_AFTER + 10):
        driver.step(float(now), peers)
    assert workers.running == ["w-0"] and driver.retired == 1
    assert "retiring worker w-1" in lines[-1]


def test_workers_auto_is_validated() -> None:
    assert ProcessOptions(workers="auto").auto
    assert ProcessOptions(workers="auto").start_workers == 1
    assert ProcessOptions(workers="auto").inflight_batches == max(4, 2 * available_cpus())
    assert not ProcessOptions(workers=3).auto and ProcessOptions(workers=3).start_workers == 3
    for bad in ("Auto", "2", "", 2.0, True, None):
        with pytest.raises(ValueError, match=r'workers must be >= 1, "auto"'):
            ProcessOptions(workers=bad)  # type: ignore[arg-type]
    assert FeedOptions.of({"workers": "auto"}).processes.auto
