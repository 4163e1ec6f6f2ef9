"""Credits: a batch the trainer takes returns its credit, and no returned credit is missed.

The loop thread (h5feed/consumer/core/loop.py) is woken by a returned credit only when some
worker holds at most one unit (otherwise the next DATA part wakes it). Were a credit ever
missed, the thread would sit in its poll until the poll interval ran out. Here that interval is
stretched to 10 minutes, so a missed credit hangs the iteration and the test's own timeout
fails it, instead of costing a silent 50 ms per batch.
"""

from __future__ import annotations

import pathlib
import time

import pytest

import h5feed
from h5feed.consumer.core import loop


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("trainer_step_s", "budget"),
    [
        (0.0, None),  # a fast trainer: workers hold several units, DATA parts wake the thread
        (0.02, None),  # a slow one: workers run dry, only the trainer's credits restart them
        (0.02, 1),  # one batch in flight: every credit is the only way forward
    ],
    ids=["fast-trainer", "slow-trainer", "budget-1"],
)
def test_every_returned_credit_is_dispatched_without_waiting_for_the_poll(
    small_dataset: list[pathlib.Path],
    monkeypatch: pytest.MonkeyPatch,
    trainer_step_s: float,
    budget: int | None,
) -> None:
    monkeypatch.setattr(loop, "_POLL_MS", 600_000)
    feed = h5feed.batches(
        small_dataset,
        clip_len=4,
        resize=(48, 64),
        batch_size=2,
        epochs=2,
        workers=2,
        max_inflight_batches=budget,
        unit_timeout_s=60,
    )
    samples = []
    with feed.stream() as stream:
        for batch in stream:
            samples += batch["sample"].tolist()
            time.sleep(trainer_step_s)  # the trainer's step
        assert stream.stats()["max_inflight_batches"] <= (budget or 4)
    videos = 4 * 6
    assert sorted(samples) == sorted(list(range(videos)) * 2)  # each video once per epoch
