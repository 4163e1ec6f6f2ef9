"""``h5feed inspect``: layout, counts, sizes, labels, frame shape and a sample, as text and
JSON, for every layout; and the auto-detection error for a file in no known layout."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import statistics
import subprocess
import sys

import h5py
import numpy as np
import pytest
from layout_data import (
    Video,
    make_videos,
    write_flat,
    write_frame_datasets,
    write_groups,
    write_raw,
)

from h5feed.cli import main

WRITERS = {
    "groups": write_groups,
    "frame_datasets": write_frame_datasets,
    "flat": write_flat,
    "raw": lambda p, v: write_raw(p, v, with_offsets=True),
    "raw_gray": lambda p, v: write_raw(p, v, with_offsets=False, grayscale=True),
}


def inspect_json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    assert main(["inspect", "--json", *args]) == 0
    parsed: list[dict[str, object]] = json.loads(capsys.readouterr().out)
    return parsed


@pytest.mark.parametrize("case", sorted(WRITERS))
def test_inspect_reports_what_the_file_holds(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    path = tmp_path / f"{case}.h5"
    videos: dict[str, Video] = WRITERS[case](path, make_videos(seed=5, count=7))
    counts = [len(frames) for frames, _ in videos.values()]
    (report,) = inspect_json(capsys, str(path))
    kind = case.removesuffix("_gray")
    assert report["layout"]["kind"] == kind  # type: ignore[index]
    assert report["videos"] == len(videos) and report["frames"] == sum(counts)
    assert report["frames_per_video"] == {
        "min": min(counts), "median": statistics.median(counts), "max": max(counts),
    }  # fmt: skip
    labels = collections.Counter(label for _, label in videos.values())
    assert report["labels"] == sorted(
        ([k, v] for k, v in labels.items()), key=lambda kv: (-kv[1], kv[0])
    )
    assert report["frame_shape"] == [24, 32, 1 if case == "raw_gray" else 3]
    assert report["file_bytes"] == os.path.getsize(path)
    frames_sampled = report["frames_sampled"]
    assert frames_sampled == sum(counts)  # fewer than 256 frames: every one is sampled
    if kind == "raw":
        assert report["mean_frame_bytes"] == 24 * 32 * (1 if case == "raw_gray" else 3)
    else:
        with h5py.File(path, "r") as f:
            assert 0 < report["mean_frame_bytes"] < f.id.get_filesize()  # type: ignore[operator]
    first = sorted(videos)[0] if kind in ("groups", "frame_datasets") else "000000"
    assert report["sample"] == {
        "video": first, "label": videos[first][1], "frames": len(videos[first][0]),
    }  # fmt: skip

    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(str(path))
    assert f"layout       {kind}: h5feed.layouts." in text
    assert f"videos       {len(videos)}, frames {sum(counts)} (per video: min {min(counts)}" in text
    assert f"frame shape  24 x 32 x {1 if case == 'raw_gray' else 3}" in text
    assert f"sample       video {first!r}, label {videos[first][1]}" in text


def test_the_label_histogram_is_truncated(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "many.h5"
    with h5py.File(path, "w") as f:  # raw, one frame per video, 30 distinct labels
        f.create_dataset("images", data=np.zeros((30, 4, 4, 3), np.uint8))
        f.create_dataset("labels", data=np.arange(30))
    (report,) = inspect_json(capsys, str(path))
    assert report["labels_distinct"] == 30 and len(report["labels"]) == 20  # type: ignore[arg-type]
    assert main(["inspect", str(path)]) == 0
    assert "... (10 more labels) (30 distinct)" in capsys.readouterr().out


def test_a_file_in_no_known_layout_is_a_clear_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "features.h5"
    with h5py.File(bad, "w") as f:
        f.create_dataset("features", data=np.zeros((10, 3), np.float32))
    good = tmp_path / "good.h5"
    write_groups(good, make_videos(seed=1, count=2))
    assert main(["inspect", str(bad), str(good)]) == 1
    out, err = capsys.readouterr()
    assert str(good) in out  # the readable file is still reported
    assert "h5feed inspect: error: no known video layout recognised" in err
    assert f"(file {str(bad)!r})" in err
    assert "/features: dataset float32 (10, 3)" in err and "h5feed.layouts.Flat(jpeg=" in err
    assert main(["inspect", "--json", str(bad)]) == 1
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["file"] == str(bad) and "/features: dataset float32" in entry["error"]


def test_a_layout_can_be_given(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "named.h5"
    write_flat(path, make_videos(seed=2, count=3), jpeg_key="jpg", labels_key="y")
    assert main(["inspect", str(path)]) == 1  # "jpg" is no default name: not recognised
    capsys.readouterr()
    layout = '{"kind": "flat", "jpeg": "jpg", "labels": "y"}'
    (report,) = inspect_json(capsys, str(path), "--layout", layout)
    assert report["layout"] == {
        "kind": "flat",
        "jpeg": "jpg",
        "offsets": "video_offsets",
        "labels": "y",
    }
    assert main(["inspect", str(path), "--layout", '{"kind": "flat", "jpg": 1}']) == 1
    assert "has no names ['jpg']" in capsys.readouterr().err


def test_the_command_runs_as_a_program(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.h5"
    write_groups(path, make_videos(seed=3, count=2))
    done = subprocess.run(
        [sys.executable, "-m", "h5feed", "inspect", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "layout       groups: h5feed.layouts.Groups(frames='frames', label='label')" in done.stdout
    )
