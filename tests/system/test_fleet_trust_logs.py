"""Refusal lines at a rate no sender can raise (h5feed/common/trust/refusal_log.py): one line per
interval for every sender together, with counts per kind (issue 38 item 7)."""

from __future__ import annotations

import logging

import pytest

from h5feed.common.trust.refusal_log import MAX_DETAIL_CHARS, MAX_KINDS, RefusalLog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_interval_then_a_summary_with_counts_per_kind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    lines = RefusalLog(logging.getLogger("h5feed.test"), "things", every_s=10.0, clock=clock)
    with caplog.at_level("WARNING", logger="h5feed"):
        for i in range(3000):
            lines.refused("bad", f"from {i}")
        for i in range(7):
            lines.refused("late", f"key {i}")
        lines.flush()  # the interval has not passed: nothing yet
        assert [r.getMessage() for r in caplog.records] == ["things: bad from 0"]
        clock.now += 10.0
        lines.flush()
        lines.flush()  # said once
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and lines.total == 3007
    assert messages[1] == (
        "things: 3006 refusals and drops since the last line: "
        "2999 x bad (last: from 2999); 7 x late (last: key 6)"
    )


def test_kinds_and_details_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    lines = RefusalLog(logging.getLogger("h5feed.test"), "things", clock=clock)
    with caplog.at_level("WARNING", logger="h5feed"):
        lines.refused("first", "x" * 10_000)
        for i in range(MAX_KINDS + 50):
            lines.refused(f"kind{i}", "y" * 10_000)
        clock.now += 60.0
        lines.flush()
    first, summary = (r.getMessage() for r in caplog.records)
    assert len(first) < MAX_DETAIL_CHARS + 40
    assert "50 x other" in summary and summary.count(" x ") == MAX_KINDS + 1
    assert len(summary) < (MAX_KINDS + 1) * (MAX_DETAIL_CHARS + 40)
