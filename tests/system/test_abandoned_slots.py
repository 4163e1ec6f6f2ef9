"""Shared-memory slots of an iteration left early (``break``): its kept workers still hold
units naming those slots, so the slots stay open until the workers took a later job or were
stopped (``h5feed/consumer/processes/worker_pool.py``, guarantee 5). Before, the iteration's
end closed them at once and a worker logged ``cannot open slot N of process P: [Errno 2] No
such file or directory`` (or found the descriptor number taken by another file) and sent its rows
over the socket."""

from __future__ import annotations

import pathlib

import pytest
from conftest import own_worker_pids, wait_until_gone

import h5feed

CLIP = {"clip_len": 4, "resize": (48, 64), "crop": (40, 40)}
RUNS = 20


@pytest.mark.timeout(600)  # 20 runs of 3 iterations, under load
def test_a_dataset_left_after_3_batches_then_more_datasets_20_times_refuse_no_slot(
    small_dataset: list[pathlib.Path],
) -> None:
    # Two feeds for all the runs, so each run's iterations reuse the kept workers: the left
    # iteration's units wait at the very workers the next iterations use (the case of the
    # bug), and the runs cost no worker start (a feed per run started 80 workers: about
    # 60 s of CPU for nothing the test checks). The first run is the fresh-feed case.
    left = h5feed.batches(small_dataset, **CLIP, batch_size=4, seed=1)  # 2 workers
    other = h5feed.batches(small_dataset, **CLIP, batch_size=4, seed=2)  # more datasets
    try:
        for run in range(RUNS):
            with left.stream() as stream:
                for i, _batch in enumerate(stream):
                    if i == 2:
                        break  # 3 batches taken; units naming slots are queued at the workers
                first = stream.stats()
            with other.stream() as stream:
                samples = sorted(s for batch in stream for s in batch["sample"].tolist())
                second = stream.stats()
            with left.stream() as stream:  # the kept workers made the units left behind first
                again = sorted(s for batch in stream for s in batch["sample"].tolist())
                third = stream.stats()
            assert samples == again == list(range(24)), f"run {run}"
            for stats in (first, second, third):
                assert stats["shared_memory_slots"] > 0, f"run {run}: no slot used"
                assert stats["parts_copied_into_slots"] == 0, f"run {run}: rows over the socket"
                assert stats["slots_refused"] == 0, f"run {run}: a worker refused a slot"
            assert {w["pid"] for w in third["workers"]} == {w["pid"] for w in first["workers"]}
    finally:
        left.close()  # stops its workers: their last figures are kept
        other.close()
    assert wait_until_gone(own_worker_pids()) == []
