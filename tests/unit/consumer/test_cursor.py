"""The cursor: where in the plan each batch comes from, and iterations that start at one."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pytest

import h5feed
from h5feed.consumer.iteration import IterationStart
from h5feed.consumer.plan.epoch_plan import Cursor
from h5feed.consumer.stream import BatchStream

CLIP: dict[str, Any] = {"clip_len": 4, "resize": (48, 64), "batch_size": 5, "workers": 2}
VIDEOS = 24  # tests/conftest.py SMALL: 4 files x 6 videos


def test_numpy_batches_carry_sample_epoch_and_batch_and_the_cursor_follows(
    small_dataset: list[pathlib.Path],
) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, epochs=2)
    seen = []
    with feed.stream() as stream:
        assert stream.cursor == Cursor(0, 0)
        for batch in stream:
            epoch, index = int(batch["epoch"][0]), int(batch["batch"][0])
            assert (batch["epoch"] == epoch).all() and (batch["batch"] == index).all()
            assert stream.cursor == Cursor(epoch, index + 1)
            seen.append((epoch, index, batch["sample"].tolist()))
    per_epoch = -(-VIDEOS // 5)
    assert [(e, i) for e, i, _ in seen] == [(e, i) for e in range(2) for i in range(per_epoch)]
    for epoch in range(2):
        samples = [s for e, _, batch in seen if e == epoch for s in batch]
        assert sorted(samples) == list(range(VIDEOS))


def test_an_iteration_started_at_a_cursor_continues_the_full_run_exactly(
    small_dataset: list[pathlib.Path],
) -> None:
    full = h5feed.batches(small_dataset, **CLIP, epochs=2)
    reference = [(b["epoch"][0], b["batch"][0], b["sample"], b["start"], b["frames"]) for b in full]
    config = h5feed.batches(small_dataset, **CLIP, epochs=2).config
    with BatchStream(config, IterationStart(Cursor(0, 3))) as resumed:
        rest = [
            (b["epoch"][0], b["batch"][0], b["sample"], b["start"], b["frames"]) for b in resumed
        ]
    assert len(rest) == len(reference) - 3
    for got, want in zip(rest, reference[3:], strict=True):
        assert got[:2] == want[:2]
        for a, b in zip(got[2:], want[2:], strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.timeout(120)
def test_tf_elements_get_position_keys_only_when_asked(small_dataset: list[pathlib.Path]) -> None:
    plain = h5feed.dataset(small_dataset, **CLIP)
    assert set(plain.element_spec) == {"frames", "label", "file", "video", "start"}
    asked = h5feed.dataset(
        small_dataset, **CLIP, keys=("frames", "label", "sample", "epoch", "batch")
    )
    assert set(asked.element_spec) == {"frames", "label", "sample", "epoch", "batch"}
    rows = [(int(b["batch"][0]), b["sample"].numpy().tolist()) for b in asked]
    assert [index for index, _ in rows] == list(range(len(rows)))
    assert sorted(s for _, samples in rows for s in samples) == list(range(VIDEOS))


@pytest.mark.parametrize("keys", [("label",), ("frames", "nope"), ("frames", "frames")])
def test_bad_keys_are_refused(small_dataset: list[pathlib.Path], keys: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="keys must name 'frames'"):
        h5feed.dataset(small_dataset, **CLIP, keys=keys)
