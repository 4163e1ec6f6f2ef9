"""One-file datasets of every layout h5feed reads (groups, frame datasets, flat, raw, video,
blobs, packs): shared by the one-file layout tests and the object-storage tests."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

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
