"""Progress lines while an iteration starts (h5feed/consumer/core/start_report.py): a long
first indexing says how long it has taken and what it waits for; a short one says nothing."""

from __future__ import annotations

import logging

import pytest

from h5feed.common.system.logs import consumer_log
from h5feed.consumer.core.start_report import StartReport


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "h5feed.consumer"]


def test_a_long_start_reports_after_the_first_delay_then_at_each_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, asked = Clock(), []

    def waiting() -> str:
        asked.append(clock.now)
        return "no worker indexed 'train.h5' (1 files left)"

    report = StartReport(consumer_log("job-abc"), first_s=5, every_s=10, clock=clock)
    with caplog.at_level(logging.INFO, logger="h5feed.consumer"):
        for now in (101, 104.9, 105, 110, 114.9, 115, 124, 125.5):
            clock.now = now
            report.tick(0, waiting)
        clock.now = 130.25
        report.done(1)
    lines = _lines(caplog)
    assert asked == [105, 115, 125.5]  # asked only when a line is due
    assert [line.split("] ", 1)[1] for line in lines] == [
        "starting for 5 s: 0 answers so far; no worker indexed 'train.h5' (1 files left)",
        "starting for 15 s: 0 answers so far; no worker indexed 'train.h5' (1 files left)",
        "starting for 26 s: 0 answers so far; no worker indexed 'train.h5' (1 files left)",
        "started after 30.2 s (1 answers)",
    ]
    assert all(line.startswith("[consumer ") and "job job-abc" in line for line in lines)


def test_a_short_start_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    report = StartReport(consumer_log("job"), first_s=5, every_s=10, clock=clock)
    with caplog.at_level(logging.INFO, logger="h5feed.consumer"):
        clock.now = 104
        report.tick(3, lambda: pytest.fail("asked without a line due"))
        report.done(3)
    assert _lines(caplog) == [] and report.reported == 0
