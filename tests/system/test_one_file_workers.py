"""Work follows cores, not files, through real processes: 1 file on 3 local workers and 2
files on 5, over 2 epochs, with a local worker SIGKILLed mid-epoch (replaced) and a remote
producer joining mid-epoch. Every sample exactly once per epoch, every worker that is
connected at the end delivered clips, and the batches are those of a 1-worker run, byte for
byte (tests/support/kill_and_join.py: the run and its checks)."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from kill_and_join import check_kill_and_join, collect, run_with_kill_and_join

import h5feed
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

CLIP: dict[str, Any] = {"clip_len": 2, "resize": (24, 32), "clips_per_video": 2}


def dataset(root: pathlib.Path, files: int) -> list[str]:
    """``files`` files of 24 videos (in all) under ``root``, as paths relative to it."""
    spec = SampleSpec(
        files=files, videos_per_file=24 // files, min_frames=4, max_frames=8, height=24,
        width=32, seed=5,
    )  # fmt: skip
    return [p.name for p in make_sample_dataset(root, spec)]


@pytest.mark.parametrize(("files", "workers"), [(1, 3), (2, 5)])
def test_every_worker_reads_a_share_through_a_kill_and_a_join(
    tmp_path: pathlib.Path, files: int, workers: int
) -> None:
    names = dataset(tmp_path, files)
    options: dict[str, Any] = {
        **CLIP, "batch_size": 2, "epochs": 2, "seed": 13, "index_cache": False,
    }  # fmt: skip
    expected = collect(h5feed.batches(names, workers=1, data_root=str(tmp_path), **options))
    run = run_with_kill_and_join(names, tmp_path, workers, options)
    check_kill_and_join(run, expected, samples=48, epochs=2, workers=workers)
