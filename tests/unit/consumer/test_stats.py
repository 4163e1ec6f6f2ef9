"""ds.stats() reads real numbers: per-worker figures, rates, the input-bound verdict."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import signal
import threading
import time

import pytest

import h5feed
from h5feed.consumer.core.counters import Counters

CLIP = {"clip_len": 4, "resize": (48, 64), "crop": (40, 40)}


def test_stats_is_a_plain_dict_before_during_and_after(small_dataset: list[pathlib.Path]) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, batch_size=4, workers=2)
    assert feed.stats() == {"running": False}
    stream = feed.stream()
    next(stream)
    during = feed.stats()
    assert during["running"] is True and during["batches"] == 1 and during["clips"] == 4
    assert {w["host"] for w in during["workers"]} == set(during["hosts"])
    assert during["credit_budget"] == 4 and 0 <= during["inflight_batches"] <= 4
    for _ in stream:
        pass
    after = feed.stats()
    assert after["running"] is False and after["batches"] == 6 and after["clips"] == 24
    assert sum(w["clips"] for w in after["workers"]) == 24
    assert after["bytes"] == 24 * 4 * 40 * 40 * 3
    assert after["malformed_messages"] == 0 and after["dropped_parts"] == 0


def test_the_verdict_flips_when_the_trainer_becomes_slower_than_the_workers(
    small_dataset: list[pathlib.Path],
) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, batch_size=4, workers=1, epochs=None)
    with feed.stream() as stream:
        for _ in range(40):  # a trainer that takes no time: it always waits for input
            next(stream)
        fast = stream.stats()
        deadline = time.monotonic() + 30  # the workers fill the credit budget: batches wait
        while (now := stream.stats())["queue_depth"] < now["credit_budget"]:
            assert time.monotonic() < deadline, f"the budget not filled in 30 s: {now}"
            time.sleep(0.05)
        began = time.monotonic()
        while time.monotonic() - began < 11:  # a slow trainer for a whole recent window
            next(stream)
            time.sleep(0.25)
        slow = stream.stats()
    assert fast["input_bound"] is True and fast["suggested_extra_workers"] >= 1, fast["verdict"]
    assert fast["wait_share_recent"] > 0.5
    assert slow["input_bound"] is False and slow["suggested_extra_workers"] == 0, slow["verdict"]
    assert slow["wait_share_recent"] < 0.1


def test_a_slow_worker_shows_as_the_slowest(small_dataset: list[pathlib.Path]) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, batch_size=4, workers=2, epochs=None)
    with feed.stream() as stream:
        next(stream)
        slow_pid = stream.worker_pids[0]
        done = threading.Event()

        def throttle() -> None:
            # The worker runs 10 ms in 210: a unit of these tiny clips takes a few ms, so with
            # longer running spells most of its units would start and end within one, and
            # its latency would not show the throttle at all.
            while not done.is_set():
                os.kill(slow_pid, signal.SIGSTOP)
                time.sleep(0.2)
                os.kill(slow_pid, signal.SIGCONT)
                time.sleep(0.01)

        thread = threading.Thread(target=throttle, daemon=True)
        thread.start()
        try:
            began = time.monotonic()
            while time.monotonic() - began < 4:  # many throttle cycles, many units each
                next(stream)
        finally:
            done.set()
            thread.join(5)
            os.kill(slow_pid, signal.SIGCONT)
        workers = {w["pid"]: w for w in stream.stats()["workers"]}
    slowest = max(workers.values(), key=lambda w: w["unit_latency_s"])
    assert slowest["pid"] == slow_pid, workers


def test_keras_callback_logs_the_input_wait_share_per_epoch(
    small_dataset: list[pathlib.Path],
) -> None:
    keras = pytest.importorskip("keras")
    ds = h5feed.dataset(small_dataset, **CLIP, batch_size=8, workers=1)
    model = keras.Sequential(
        [
            keras.layers.Input((4, 40, 40, 3)),
            keras.layers.GlobalAveragePooling3D(),
            keras.layers.Dense(4),
        ]
    )
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(
        ds.map(lambda b: (b["frames"], b["label"])),
        epochs=2,
        verbose=0,
        callbacks=[h5feed.input_wait_callback(ds.stats)],
    )
    shares = history.history["input_wait_share"]
    assert len(shares) == 2 and all(0.0 <= s <= 1.0 for s in shares)
    assert all(rate > 0 for rate in history.history["input_clips_per_s"])
    assert ds.stats()["clips"] == 24  # the last epoch's figures


def test_a_misspelt_counter_raises_instead_of_starting_a_new_one() -> None:
    counters = Counters()
    counters.dropped_parts += 1
    with pytest.raises(AttributeError):
        counters.dropped_part += 1  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        counters.batches = 1  # type: ignore[attr-defined]  # the dead counters are gone
    assert dataclasses.asdict(counters) == {
        name: int(name == "dropped_parts") for name in dataclasses.asdict(Counters())
    }
