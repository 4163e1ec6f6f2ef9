"""Pure rules: clip placement, frame indices, file ownership, plan shape (no processes)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from h5feed.common.config import ClipSpec, clip_frame_indices, clip_start
from h5feed.consumer.hdf5.units import assign_files
from h5feed.consumer.plan.epoch_plan import EpochPlan, Index, PlanOptions


def test_frame_indices_for_full_and_short_videos() -> None:
    assert clip_frame_indices(2, 10, 4, 2, "loop") == [2, 4, 6, 8]
    assert clip_frame_indices(0, 3, 5, 1, "loop") == [0, 1, 2, 0, 1]
    assert clip_frame_indices(0, 3, 5, 1, "repeat_last") == [0, 1, 2, 2, 2]
    with pytest.raises(ValueError, match="outside"):
        clip_frame_indices(10, 10, 1, 1, "loop")


def test_clip_start_modes() -> None:
    assert clip_start(100, 16, "first", 0, 1, 0.9) == 0
    assert clip_start(100, 16, "center", 0, 1, 0.9) == 42  # room 84, centred
    assert clip_start(100, 16, "random", 0, 1, 0.0) == 0
    assert clip_start(100, 16, "random", 0, 1, 0.999999) == 84
    assert [clip_start(100, 16, "first", k, 4, 0.0) for k in range(4)] == [0, 21, 42, 63]
    assert clip_start(10, 16, "random", 0, 1, 0.7) == 0  # short video: starts at 0


def test_assign_files_balances_by_size_deterministically() -> None:
    owner = assign_files([100, 10, 10, 90, 5], workers=2)
    loads = [
        sum(s for s, o in zip([100, 10, 10, 90, 5], owner, strict=True) if o == w) for w in range(2)
    ]
    assert sorted(loads) == [105, 110]
    assert owner.tolist() == assign_files([100, 10, 10, 90, 5], workers=2).tolist()
    assert sorted(assign_files([1, 1], workers=4).tolist()) == [0, 1]  # extra workers own nothing


def test_assign_files_is_greedy_largest_first_to_the_least_loaded() -> None:
    def reference(sizes: list[int], workers: int) -> list[int]:  # the rule, one file at a time
        load, owner = [0] * workers, [0] * len(sizes)
        for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
            slot = min(range(workers), key=lambda s: (load[s], s))
            owner[i], load[slot] = slot, load[slot] + max(sizes[i], 1)
        return owner

    rng = random.Random(4)
    for _ in range(200):
        sizes = [rng.choice([0, 1, rng.randrange(1, 1000)]) for _ in range(rng.randrange(0, 40))]
        workers = rng.randrange(1, 6)
        assert assign_files(sizes, workers).tolist() == reference(sizes, workers), sizes


def _index(frames: list[int]) -> Index:
    return Index.build(["a.h5"], [[(f"video_{i:03d}", n, i % 3) for i, n in enumerate(frames)]])


@pytest.mark.parametrize("shuffle", [True, False])
def test_epoch_plan_covers_each_sample_once(shuffle: bool) -> None:
    options = PlanOptions(7, shuffle, 0, False, (0, 1))
    index = _index([20, 5, 40, 16, 17])
    plan = EpochPlan(
        index, ClipSpec(clip_len=16), options, 4, clips_per_video=3, clip_start="random"
    )
    samples = np.concatenate([b.samples for b in plan])
    assert sorted(samples.tolist()) == list(range(15))
    assert (samples.tolist() == list(range(15))) is not shuffle
    for batch in plan:
        assert (
            (batch.starts >= 0)
            & (batch.starts <= np.maximum(_index([20, 5, 40, 16, 17]).frames[batch.videos] - 16, 0))
        ).all()
