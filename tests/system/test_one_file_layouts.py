"""Every layout's one-file dataset is read by every worker (work follows cores, not files):
groups, frame datasets, flat, raw, video, blobs and packs, each one small file on 2 local
workers. Every sample exactly once, both workers delivered clips, and the batches are those
of a 1-worker run."""

from __future__ import annotations

import collections
import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from layout_data import (
    make_videos,
    write_blobs,
    write_flat,
    write_frame_datasets,
    write_groups,
    write_raw,
    write_video_files,
)
from pack_data import write_video

import h5feed
from h5feed.pack.run import pack


def groups(tmp: pathlib.Path) -> tuple[str, Any]:
    write_groups(tmp / "groups.h5", make_videos(seed=1, count=6))
    return str(tmp / "groups.h5"), "groups"


def frame_datasets(tmp: pathlib.Path) -> tuple[str, Any]:
    write_frame_datasets(tmp / "frames.h5", make_videos(seed=2, count=6), label="y")
    return str(tmp / "frames.h5"), h5feed.layouts.FrameDatasets(label="y")


def flat(tmp: pathlib.Path) -> tuple[str, Any]:
    write_flat(tmp / "flat.h5", make_videos(seed=3, count=6))
    return str(tmp / "flat.h5"), "flat"


def raw(tmp: pathlib.Path) -> tuple[str, Any]:
    write_raw(tmp / "raw.h5", make_videos(seed=4, count=6), with_offsets=True)
    return str(tmp / "raw.h5"), "raw"


def video(tmp: pathlib.Path) -> tuple[str, Any]:
    # One video per file is the layout: a one-file dataset is one video, its clips shared.
    written = write_video_files(tmp / "ucf", make_videos(seed=5, count=1, min_frames=12), ["A"])
    [(path, _name)] = written
    return path, h5feed.layouts.Video(classes=("A",))


def blobs(tmp: pathlib.Path) -> tuple[str, Any]:
    write_blobs(tmp / "blobs.h5", make_videos(seed=6, count=6, max_frames=8), frames_per_row=8)
    return str(tmp / "blobs.h5"), "blobs"


def packs(tmp: pathlib.Path) -> tuple[str, Any]:
    for i, frames in enumerate((7, 9, 5)):
        write_video(tmp / "src" / "walk" / f"v{i}.avi", frames, seed=i + 1)
    pack(tmp / "src", tmp / "packed", jobs=1)
    [path] = sorted((tmp / "packed").rglob("*.h5"))
    return str(path), "auto"


CASES: dict[str, Callable[[pathlib.Path], tuple[str, Any]]] = {
    "groups": groups,
    "frame_datasets": frame_datasets,
    "flat": flat,
    "raw": raw,
    "video": video,
    "blobs": blobs,
    "packs": packs,
}


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
