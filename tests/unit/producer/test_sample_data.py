"""Tests of h5feed.producer.sample_data on real files in tmp_path."""

from __future__ import annotations

import dataclasses
import itertools
import os
import pathlib
from typing import Any

import cv2
import h5py
import numpy as np
import pytest

from h5feed.producer.sample_data import (
    LAYOUT,
    LAYOUT_ATTR,
    SampleSpec,
    make_sample_dataset,
    write_sample_file,
    write_video_file,
)

# Full-size frames, but few and short videos: the whole module runs in a few seconds.
SMALL = SampleSpec(files=2, videos_per_file=4, min_frames=3, max_frames=6, seed=7)
TINY = SampleSpec(
    files=3, videos_per_file=2, min_frames=1, max_frames=3, height=32, width=48, seed=3
)


def _read(path: pathlib.Path, spec: SampleSpec) -> dict[str, tuple[list[bytes], int]]:
    """Every video of a file: group name -> (frame bytes, label)."""
    out: dict[str, tuple[list[bytes], int]] = {}
    with h5py.File(path, "r") as f:
        for name, group in f.items():
            frames = [bytes(x) for x in group[spec.frames_key][()]]
            out[name] = (frames, int(group.attrs[spec.label_key]))
    return out


def _decode(data: bytes) -> np.ndarray[Any, np.dtype[np.uint8]]:
    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    assert image is not None, "frame is not a decodable image"
    return np.asarray(image, dtype=np.uint8)


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> list[pathlib.Path]:
    return make_sample_dataset(tmp_path_factory.mktemp("small"), SMALL, processes=1)


def test_layout(small_dataset: list[pathlib.Path]) -> None:
    assert [p.name for p in small_dataset] == ["sample_000.h5", "sample_001.h5"]
    vlen = h5py.vlen_dtype(np.uint8)
    for path in small_dataset:
        with h5py.File(path, "r") as f:
            assert f.attrs[LAYOUT_ATTR] == LAYOUT == "group_per_video"
            assert list(f.keys()) == [f"video_{i:03d}" for i in range(SMALL.videos_per_file)]
            for group in f.values():
                assert isinstance(group, h5py.Group)
                data = group["frames"]
                assert isinstance(data, h5py.Dataset)
                assert h5py.check_vlen_dtype(data.dtype) == np.dtype(np.uint8)
                assert data.dtype == vlen
                assert data.ndim == 1
                assert SMALL.min_frames <= data.shape[0] <= SMALL.max_frames
                label = group.attrs["label"]
                assert isinstance(label, np.integer)
                assert 0 <= int(label) < SMALL.num_classes
                for element in data[()]:
                    assert element.dtype == np.uint8
                    assert bytes(element[:2]) == b"\xff\xd8"  # JPEG start-of-image
                    assert _decode(bytes(element)).shape == (240, 320, 3)
    assert not list(small_dataset[0].parent.glob("*.tmp"))


def test_labels_balanced_within_a_file(tmp_path: pathlib.Path) -> None:
    spec = dataclasses.replace(TINY, files=1, videos_per_file=10, num_classes=4)
    (path,) = make_sample_dataset(tmp_path, spec)
    labels = sorted(label for _, label in _read(path, spec).values())
    counts = np.bincount(labels, minlength=4)
    assert counts.min() >= 2 and counts.max() <= 3


def test_deterministic(small_dataset: list[pathlib.Path], tmp_path: pathlib.Path) -> None:
    again = make_sample_dataset(tmp_path / "again", SMALL, processes=1)
    for first, second in zip(small_dataset, again, strict=True):
        assert _read(first, SMALL) == _read(second, SMALL)
    other_seed = dataclasses.replace(SMALL, files=1, seed=SMALL.seed + 1)
    (other,) = make_sample_dataset(tmp_path / "other", other_seed)
    assert _read(other, other_seed) != _read(small_dataset[0], SMALL)


def test_write_sample_file_alone_matches_the_dataset(
    small_dataset: list[pathlib.Path], tmp_path: pathlib.Path
) -> None:
    # File i depends only on the spec and i, not on which other files are made.
    path = tmp_path / "one.h5"
    write_sample_file(path, dataclasses.replace(SMALL, files=1), 1)
    assert _read(path, SMALL) == _read(small_dataset[1], SMALL)
    assert not os.path.exists(str(path) + ".tmp")


def test_motion_not_noise(small_dataset: list[pathlib.Path]) -> None:
    for path in small_dataset:
        for frames, _ in _read(path, SMALL).values():
            decoded = [_decode(b).astype(np.float32) for b in frames]
            for before, after in itertools.pairwise(decoded):
                mad = float(np.abs(after - before).mean())
                assert 0.5 < mad < 40.0, mad


def test_skips_complete_files_and_reports_progress(tmp_path: pathlib.Path) -> None:
    calls: list[tuple[int, int]] = []
    paths = make_sample_dataset(tmp_path / "d", TINY, lambda d, t: calls.append((d, t)))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    assert paths == sorted(paths) and all(p.exists() for p in paths)
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in paths}

    paths[1].unlink()
    pathlib.Path(str(paths[1]) + ".tmp").write_bytes(b"left over by a crash")
    calls.clear()
    again = make_sample_dataset(tmp_path / "d", TINY, lambda d, t: calls.append((d, t)))
    assert again == paths
    assert calls == [(1, 3), (2, 3), (3, 3)]
    for p in (paths[0], paths[2]):  # kept untouched
        assert (p.stat().st_ino, p.stat().st_mtime_ns) == before[p]
    assert paths[1].exists() and not pathlib.Path(str(paths[1]) + ".tmp").exists()
    with h5py.File(paths[1], "r") as f:
        assert f.attrs[LAYOUT_ATTR] == LAYOUT


def test_short_videos_and_small_frames(tmp_path: pathlib.Path) -> None:
    spec = dataclasses.replace(TINY, files=1, videos_per_file=12, min_frames=1, max_frames=2)
    (path,) = make_sample_dataset(tmp_path, spec)
    lengths = set()
    for frames, _ in _read(path, spec).values():
        lengths.add(len(frames))
        for b in frames:
            assert _decode(b).shape == (32, 48, 3)
    assert lengths == {1, 2}


def test_custom_keys(tmp_path: pathlib.Path) -> None:
    spec = dataclasses.replace(TINY, files=1, frames_key="jpegs", label_key="y")
    (path,) = make_sample_dataset(tmp_path, spec)
    with h5py.File(path, "r") as f:
        group = f["video_000"]
        assert "jpegs" in group and "frames" not in group
        assert "y" in group.attrs and "label" not in group.attrs


def test_parallel_matches_serial(tmp_path: pathlib.Path) -> None:
    serial = make_sample_dataset(tmp_path / "serial", TINY, processes=1)
    calls: list[tuple[int, int]] = []
    parallel = make_sample_dataset(
        tmp_path / "parallel", TINY, lambda d, t: calls.append((d, t)), processes=2
    )
    assert calls == [(1, 3), (2, 3), (3, 3)]
    for a, b in zip(serial, parallel, strict=True):
        assert a.name == b.name
        assert _read(a, TINY) == _read(b, TINY)


def test_write_video_file_round_trip(tmp_path: pathlib.Path) -> None:
    ok, encoded = cv2.imencode(".jpg", np.full((8, 8, 3), 128, dtype=np.uint8))
    assert ok
    jpeg = encoded.tobytes()
    videos: dict[str, tuple[list[bytes], int | None]] = {
        "video_000": ([jpeg, jpeg], 2),
        "video_001": ([jpeg, b"this is not a JPEG", b""], 0),
        "video_002": ([], 1),
        "no_label": ([jpeg], None),
    }
    path = tmp_path / "handmade.h5"
    write_video_file(path, videos, frames_key="f", label_key="lab")
    assert not os.path.exists(str(path) + ".tmp")
    with h5py.File(path, "r") as f:
        assert f.attrs[LAYOUT_ATTR] == LAYOUT
        assert list(f.keys()) == sorted(videos)
        for name, (frames, label) in videos.items():
            data = f[name]["f"]
            assert h5py.check_vlen_dtype(data.dtype) == np.dtype(np.uint8)
            assert [bytes(x) for x in data[()]] == frames
            if label is None:
                assert "lab" not in f[name].attrs
            else:
                assert int(f[name].attrs["lab"]) == label
    assert _decode(videos["video_000"][0][0]).shape == (8, 8, 3)
    bad = cv2.imdecode(np.frombuffer(b"this is not a JPEG", dtype=np.uint8), cv2.IMREAD_COLOR)
    assert bad is None


@pytest.mark.parametrize(
    "field, value",
    [
        ("files", 0),
        ("files", 1001),
        ("videos_per_file", 0),
        ("min_frames", 0),
        ("max_frames", 2),  # below min_frames
        ("height", 8),
        ("width", 8),
        ("num_classes", 0),
        ("quality", 0),
        ("quality", 101),
        ("seed", -1),
        ("files", 1.5),
        ("files", True),
        ("frames_key", ""),
        ("frames_key", "a/b"),
        ("label_key", ""),
    ],
)
def test_spec_validation(field: str, value: object) -> None:
    fields: dict[str, Any] = {"min_frames": 3, field: value}
    with pytest.raises(ValueError, match=field):
        SampleSpec(**fields)


def test_bad_arguments(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="file_index"):
        write_sample_file(tmp_path / "x.h5", TINY, -1)
    with pytest.raises(ValueError, match="processes"):
        make_sample_dataset(tmp_path, TINY, processes=0)
    assert not list(tmp_path.glob("*.h5"))
