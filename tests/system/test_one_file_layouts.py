"""Every layout's one-file dataset is read by every worker (work follows cores, not files):
groups, frame datasets, flat, raw, video, blobs and packs, each one small file on 3 local
workers over 2 epochs, with a local worker SIGKILLed mid-epoch (replaced) and a remote
producer joining mid-epoch. Every sample exactly once per epoch, every worker connected at
the end delivered clips, and the batches are those of a 1-worker run, byte for byte
(tests/support/kill_and_join.py: the run and its checks)."""

from __future__ import annotations

import os
import pathlib
from typing import Any

import pytest
from kill_and_join import check_kill_and_join, collect, run_with_kill_and_join
from one_file_cases import CASES

import h5feed

#: Videos in each case's file where not 6 (tests/support/one_file_cases.py): each case gets
#: 48 samples per epoch, 24 batches, so the late producer joins with most of an epoch to go.
VIDEOS = {"video": 1, "packs": 3}
SAMPLES = 48


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_one_file_dataset_of_each_layout_is_read_by_every_worker_through_a_kill_and_a_join(
    tmp_path: pathlib.Path, case: str
) -> None:
    path, layout = CASES[case](tmp_path)
    names = [os.path.relpath(path, tmp_path)]  # the remote producer serves tmp_path
    options: dict[str, Any] = {
        "layout": layout, "clip_len": 2, "resize": (24, 32), "batch_size": 2, "epochs": 2,
        "clips_per_video": SAMPLES // VIDEOS.get(case, 6), "seed": 3, "index_cache": False,
    }  # fmt: skip
    expected = collect(h5feed.batches(names, workers=1, data_root=str(tmp_path), **options))
    run = run_with_kill_and_join(names, tmp_path, 3, options)
    check_kill_and_join(run, expected, samples=SAMPLES, epochs=2, workers=3)
