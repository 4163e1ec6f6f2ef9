"""Every layout's one-file dataset is read by every worker (work follows cores, not files):
groups, frame datasets, flat, raw, video, blobs and packs, each one small file on 2 local
workers. Every sample exactly once, both workers delivered clips, and the batches are those
of a 1-worker run."""

from __future__ import annotations

import collections
import pathlib
from typing import Any

import numpy as np
import pytest
from one_file_cases import CASES

import h5feed


def run(path: str, layout: Any, workers: int) -> tuple[list[dict[str, np.ndarray]], Any]:
    feed = h5feed.batches(
        [path], layout=layout, clip_len=2, resize=(24, 32), clips_per_video=4, batch_size=2,
        workers=workers, seed=3, index_cache=False,
    )  # fmt: skip
    batches = [{k: np.array(v) for k, v in batch.items()} for batch in feed]
    return batches, feed.stats()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_one_file_dataset_of_each_layout_is_read_by_both_workers(
    tmp_path: pathlib.Path, case: str
) -> None:
    path, layout = CASES[case](tmp_path)
    got, stats = run(path, layout, workers=2)
    samples = collections.Counter(s for b in got for s in b["sample"].tolist())
    assert set(samples.values()) == {1} and sorted(samples) == list(range(len(samples)))
    clips = {w["name"]: (w["files"], w["clips"]) for w in stats["workers"]}
    assert len(clips) == 2 and all(files == 1 and n > 0 for files, n in clips.values()), clips
    expected, _stats = run(path, layout, workers=1)
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected, strict=True):
        for key in mine:
            assert np.array_equal(mine[key], theirs[key]), (case, key)
