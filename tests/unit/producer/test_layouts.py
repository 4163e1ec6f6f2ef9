"""HDF5 layouts: each one through real workers — exactly once, labels, pixels, shuffle — and
auto-detection, its error, and the layout's names on the wire."""

from __future__ import annotations

import collections
import pathlib
from collections.abc import Callable
from typing import Any

import h5py
import numpy as np
import pytest
from layout_data import (
    Video,
    frame_name,
    make_videos,
    write_flat,
    write_frame_datasets,
    write_groups,
    write_raw,
)

import h5feed
from h5feed.common import layouts
from h5feed.common.config import clip_frame_indices
from h5feed.common.errors import DataError, WorkerError
from h5feed.consumer.options import LayoutArgs
from h5feed.producer.layouts import open_reader
from h5feed.producer.layouts._common import natural_key

Writer = Callable[[pathlib.Path, list[Video]], dict[str, Video]]

#: id -> (writer, the layout argument that reads it). Names are non-default where the writer
#: takes them, so the layouts' names are exercised.
CASES: dict[str, tuple[Writer, Any]] = {
    "groups": (write_groups, "groups"),
    "frame_datasets": (
        lambda p, v: write_frame_datasets(p, v, label="y"),
        h5feed.layouts.FrameDatasets(label="y"),
    ),
    "flat": (
        lambda p, v: write_flat(p, v, jpeg_key="jpg", offsets_key="bounds", labels_key="y"),
        h5feed.layouts.Flat(jpeg="jpg", offsets="bounds", labels="y"),
    ),
    "raw_videos": (lambda p, v: write_raw(p, v, with_offsets=True), {"kind": "raw"}),
    "raw_rows": (
        lambda p, v: write_raw(p, v, with_offsets=False, images_key="px", labels_key="y"),
        h5feed.layouts.Raw(images="px", labels="y"),
    ),
    "raw_gray": (lambda p, v: write_raw(p, v, with_offsets=True, grayscale=True), "raw"),
}


def write_case(tmp_path: pathlib.Path, case: str) -> tuple[list[str], dict[tuple[str, str], Video]]:
    """Two files of the case's layout; returns the paths and every video by (file, name)."""
    writer, _layout = CASES[case]
    paths, expected = [], {}
    for i in range(2):
        path = tmp_path / f"{case}_{i}.h5"
        for name, video in writer(path, make_videos(seed=10 + i, count=4)).items():
            expected[(str(path), name)] = video
        paths.append(str(path))
    return paths, expected


def collect(feed: Any) -> list[dict[str, np.ndarray]]:
    return [{k: np.array(v) for k, v in batch.items()} for batch in feed]


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_video_once_with_its_label_and_its_pixels(tmp_path: pathlib.Path, case: str) -> None:
    paths, expected = write_case(tmp_path, case)
    clip_len = 3
    feed = h5feed.batches(
        paths, layout=CASES[case][1], clip_len=clip_len, batch_size=3, workers=2, seed=2
    )
    seen: collections.Counter[tuple[str, str]] = collections.Counter()
    for batch in collect(feed):
        assert batch["frames"].dtype == np.uint8
        assert batch["frames"].shape[1:] == (clip_len, 24, 32, 3)
        for row in range(len(batch["label"])):
            key = (batch["file"][row].decode(), batch["video"][row].decode())
            seen[key] += 1
            frames, label = expected[key]
            assert batch["label"][row] == label
            indices = clip_frame_indices(int(batch["start"][row]), len(frames), clip_len, 1, "loop")
            want = np.stack([frames[i] for i in indices])
            np.testing.assert_array_equal(batch["frames"][row], want, err_msg=str(key))
    assert seen == collections.Counter(dict.fromkeys(expected, 1))


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_seed_same_batches_with_one_or_three_workers(
    tmp_path: pathlib.Path, case: str
) -> None:
    paths, _expected = write_case(tmp_path, case)
    kwargs = {
        "layout": CASES[case][1], "clip_len": 2, "resize": (20, 28), "crop": (16, 16),
        "flip": True, "batch_size": 4, "epochs": 2,
    }  # fmt: skip
    one = collect(h5feed.batches(paths, **kwargs, workers=1, seed=4))
    three = collect(h5feed.batches(paths, **kwargs, workers=3, seed=4))
    other = collect(h5feed.batches(paths, **kwargs, workers=1, seed=5))
    assert len(one) == len(three)
    for a, b in zip(one, three, strict=True):
        for key in ("frames", "label", "file", "video", "start", "sample"):
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    order = [v for batch in one for v in batch["video"].tolist()]
    assert order != [v for batch in other for v in batch["video"].tolist()]


def test_auto_recognises_each_layout_and_mixes_them_in_one_dataset(
    tmp_path: pathlib.Path,
) -> None:
    writers: dict[str, tuple[Writer, layouts.LayoutSpec]] = {
        "groups": (write_groups, layouts.Groups()),
        "frame_datasets": (write_frame_datasets, layouts.FrameDatasets()),
        "flat": (write_flat, layouts.Flat()),
        "raw": (lambda p, v: write_raw(p, v, with_offsets=True), layouts.Raw()),
        "raw_rows": (lambda p, v: write_raw(p, v, with_offsets=False), layouts.Raw()),
    }
    expected: dict[tuple[str, str], Video] = {}
    for i, (name, (writer, spec)) in enumerate(writers.items()):
        path = tmp_path / f"{name}.h5"
        for video, data in writer(path, make_videos(seed=i, count=3)).items():
            expected[(str(path), video)] = data
        reader = open_reader(str(path), layouts.Auto())
        try:
            assert reader.spec == spec, name
        finally:
            reader.close()
    paths = [str(tmp_path / f"{name}.h5") for name in writers]
    batches = collect(h5feed.batches(paths, clip_len=1, batch_size=5, workers=2))  # auto
    seen = collections.Counter(
        (f.decode(), v.decode())
        for b in batches
        for f, v in zip(b["file"], b["video"], strict=True)
    )
    assert seen == collections.Counter(dict.fromkeys(expected, 1))
    labels = {
        (f.decode(), v.decode()): int(x)
        for b in batches
        for f, v, x in zip(b["file"], b["video"], b["label"], strict=True)
    }
    assert labels == {key: video[1] for key, video in expected.items()}


def write_unknown(path: pathlib.Path) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("features", data=np.zeros((10, 3), np.float32))
        f.create_group("meta").create_dataset("classes", data=np.arange(4))


def test_no_known_layout_says_what_the_file_holds_and_what_to_pass(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "unknown.h5"
    write_unknown(path)
    with pytest.raises(DataError) as caught:
        open_reader(str(path), layouts.Auto())
    text = str(caught.value)
    assert "/features: dataset float32 (10, 3)" in text
    assert "/meta: group of 1 members, e.g. 'classes': dataset int64 (4,)" in text
    for hint in ("frames_key=", "FrameDatasets(label=", "Raw(images=", "Flat(jpeg="):
        assert hint in text
    assert str(path) in text
    with pytest.raises(WorkerError) as through_workers:
        list(h5feed.batches(str(path), clip_len=1, workers=1))
    assert "/features: dataset float32 (10, 3)" in str(through_workers.value)
    assert "unknown.h5" in str(through_workers.value)


def test_the_no_match_listing_is_truncated(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "many.h5"
    with h5py.File(path, "w") as f:
        for i in range(30):
            f.create_dataset(f"x{i:02d}", data=np.zeros(2, np.float64))
    with pytest.raises(DataError, match=r"/x19: dataset float64 \(2,\)\n  \.\.\. and 10 more"):
        open_reader(str(path), layouts.Auto())


def test_frame_datasets_are_ordered_by_natural_name_order(tmp_path: pathlib.Path) -> None:
    names = ["frame_10", "frame_9", "frame_1", "frame_2b", "frame_2", "f01", "f1"]
    assert sorted(names, key=natural_key) == [
        "f01", "f1", "frame_1", "frame_2", "frame_2b", "frame_9", "frame_10",
    ]  # fmt: skip
    path = tmp_path / "ordered.h5"
    (video,) = make_videos(seed=3, count=1, min_frames=12, max_frames=12)
    expected = write_frame_datasets(path, [video])
    (name,) = expected
    with h5py.File(path, "r") as f:  # written shuffled: storage order is not frame order
        assert list(f[name]) != [frame_name(i) for i in range(12)]
    (batch,) = collect(
        h5feed.batches(
            str(path), clip_len=12, clip_start="first", workers=1, layout="frame_datasets"
        )
    )
    np.testing.assert_array_equal(batch["frames"][0], np.stack(expected[name][0]))


def test_bad_offsets_and_missing_labels_name_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "flat.h5"
    write_flat(path, make_videos(seed=0, count=2))
    with h5py.File(path, "a") as f:
        f["video_offsets"][-1] = 1000
    with pytest.raises(
        DataError, match=r"video_offsets must run from 0 to the number of frames.*flat\.h5"
    ):
        open_reader(str(path), layouts.Flat()).index()
    raw = tmp_path / "raw.h5"
    with h5py.File(raw, "w") as f:
        f.create_dataset("images", data=np.zeros((3, 4, 4, 3), np.uint8))
    reader = open_reader(str(raw), layouts.Auto())
    with pytest.raises(DataError, match=r"'labels' is missing.*labels=None.*raw\.h5"):
        reader.index()
    reader.close()
    unlabelled = open_reader(str(raw), layouts.Raw(labels=None))
    assert unlabelled.index() == [("000000", 1, -1), ("000001", 1, -1), ("000002", 1, -1)]
    unlabelled.close()


def test_layouts_travel_as_plain_maps_and_are_checked() -> None:
    for layout in ("auto", "groups", "frame_datasets", "raw", "flat", layouts.Flat(jpeg="j")):
        spec = LayoutArgs(layout=layout).resolve()
        again = layouts.from_wire(spec.to_wire())
        assert again == spec and type(again) is type(spec)
    assert LayoutArgs(frames_key="f", label_key=None).resolve() == layouts.Auto("f", None)
    assert LayoutArgs(layout="groups", frames_key="f").resolve().to_wire() == {
        "kind": "groups", "frames": "f", "label": "label",
    }  # fmt: skip
    with pytest.raises(ValueError, match="layout must be one of"):
        LayoutArgs(layout="hdf5").resolve()
    with pytest.raises(ValueError, match="has no names"):
        LayoutArgs(layout={"kind": "flat", "frames": "x"}).resolve()
    with pytest.raises(ValueError, match="give its names in the layout itself"):
        LayoutArgs(layout="flat", frames_key="x").resolve()
    with pytest.raises(ValueError, match="frames_key must be a non-empty"):
        LayoutArgs(frames_key="")
    with pytest.raises(ValueError, match="must be a non-empty name"):
        layouts.Flat(jpeg="")


def test_a_non_default_layout_through_tensorflow(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("tensorflow")  # the tf extra is part of the test install
    path = tmp_path / "flat.h5"
    expected = write_flat(path, make_videos(seed=1, count=5), jpeg_key="jpg")
    ds = h5feed.dataset(
        str(path), layout=h5feed.layouts.Flat(jpeg="jpg"), clip_len=2, batch_size=2, workers=1
    )
    assert ds.element_spec["frames"].shape.as_list() == [None, 2, None, None, 3]
    videos = [v.decode() for batch in ds for v in batch["video"].numpy().tolist()]
    assert sorted(videos) == sorted(expected)
