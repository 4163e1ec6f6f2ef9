"""The layouts of files made the way public loaders write them (issue 22): one video per file
under class directories, fixed-T rows of opaque JPEG blobs, float images with a declared
scale and channel order; a directory searched recursively; and what auto-detection suggests
when it recognises nothing."""

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
    make_videos,
    write_blobs,
    write_float_images,
    write_video_files,
)

import h5feed
from h5feed.common import layouts
from h5feed.common.config import clip_frame_indices
from h5feed.common.errors import DataError, WorkerError
from h5feed.consumer.hdf5.config import hdf_config
from h5feed.consumer.position.fingerprint import fingerprint
from h5feed.producer import inspection
from h5feed.producer.layouts import open_reader

CLASSES = ["ApplyEyeMakeup", "Archery", "Basketball", "Biking", "Bowling"]

Expected = dict[tuple[str, str], Video]


def video_jpeg(tmp: pathlib.Path) -> tuple[list[str], Any, Expected]:
    expected = write_video_files(tmp / "ucf", make_videos(seed=1, count=7), CLASSES)
    return [str(tmp / "ucf")], h5feed.layouts.Video(classes=tuple(CLASSES)), expected


def video_pixels(tmp: pathlib.Path) -> tuple[list[str], Any, Expected]:
    expected = write_video_files(tmp / "ucf", make_videos(seed=2, count=6), CLASSES, pixels=True)
    return [str(tmp / "ucf")], h5feed.layouts.Video(classes=tuple(CLASSES)), expected


def blobs(tmp: pathlib.Path) -> tuple[list[str], Any, Expected]:
    paths, expected = [], {}
    for i, lengths in enumerate((False, True)):
        path = tmp / f"blobs_{i}.h5"
        videos = make_videos(seed=3 + i, count=4, min_frames=3, max_frames=8)
        for name, video in write_blobs(path, videos, frames_per_row=8, lengths=lengths).items():
            expected[(str(path), name)] = video
        paths.append(str(path))
    return paths, "blobs", expected


def float_bgr(tmp: pathlib.Path) -> tuple[list[str], Any, Expected]:
    path = tmp / "images.h5"
    expected = write_float_images(path, make_videos(seed=5, count=3, max_frames=4))
    layout = h5feed.layouts.Raw(scale=1.0, channels="bgr", offsets=None)
    return [str(path)], layout, {(str(path), k): v for k, v in expected.items()}


CASES: dict[str, Callable[[pathlib.Path], tuple[list[str], Any, Expected]]] = {
    "video_jpeg": video_jpeg,
    "video_pixels": video_pixels,
    "blobs": blobs,
    "float_bgr": float_bgr,
}


def collect(feed: Any) -> list[dict[str, np.ndarray]]:
    return [{k: np.array(v) for k, v in batch.items()} for batch in feed]


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_video_once_with_its_label_and_its_pixels(tmp_path: pathlib.Path, case: str) -> None:
    files, layout, expected = CASES[case](tmp_path)
    clip_len = 2
    feed = h5feed.batches(files, layout=layout, clip_len=clip_len, batch_size=3, workers=2)
    seen: collections.Counter[tuple[str, str]] = collections.Counter()
    for batch in collect(feed):
        assert batch["frames"].shape[1:] == (clip_len, 24, 32, 3)
        for row in range(len(batch["label"])):
            key = (batch["file"][row].decode(), batch["video"][row].decode())
            seen[key] += 1
            frames, label = expected[key]
            assert batch["label"][row] == label, key
            indices = clip_frame_indices(int(batch["start"][row]), len(frames), clip_len, 1, "loop")
            want = np.stack([frames[i] for i in indices])
            np.testing.assert_array_equal(batch["frames"][row], want, err_msg=str(key))
    assert seen == collections.Counter(dict.fromkeys(expected, 1))


# -- one video per file: labels ------------------------------------------------------------------


def test_train_and_val_share_one_class_list(tmp_path: pathlib.Path) -> None:
    videos = make_videos(seed=0, count=5)  # labels 0..4: one video per class
    write_video_files(tmp_path / "train", videos, CLASSES)
    write_video_files(tmp_path / "val", [videos[1], videos[3]], CLASSES)  # two classes only
    classes = h5feed.layouts.directory_classes(tmp_path / "train")
    assert classes == tuple(CLASSES)
    val = hdf_config(str(tmp_path / "val"), {"layout": h5feed.layouts.Video(classes=classes)})
    assert val.file_labels == (1, 3)  # numbered by the training classes, not renumbered
    derived = hdf_config(str(tmp_path / "val"), {"layout": "video"})
    assert derived.layout == h5feed.layouts.Video(classes=("Archery", "Biking"))
    assert derived.file_labels == (0, 1)
    # the class list is part of the resume fingerprint: a state of one is refused by the other
    assert fingerprint(val)["layout"] != fingerprint(derived)["layout"]
    feed = h5feed.batches(
        str(tmp_path / "val"), layout=val.layout, clip_len=1, batch_size=4, workers=2
    )
    (batch,) = collect(feed)
    names = [v.decode().split("_")[1] for v in batch["video"]]
    labels = dict(zip(names, batch["label"].tolist(), strict=True))
    assert labels == {"Archery": 1, "Biking": 3}


def test_a_file_outside_the_classes_is_refused_before_any_worker_starts(
    tmp_path: pathlib.Path,
) -> None:
    write_video_files(tmp_path / "ucf", make_videos(seed=0, count=3), CLASSES)
    with pytest.raises(ValueError, match=r"v_Basketball_g01_c02.*not among classes="):
        only_two = h5feed.layouts.Video(classes=("Archery", "ApplyEyeMakeup"))
        hdf_config(str(tmp_path / "ucf"), {"layout": only_two})
    loose = tmp_path / "loose.hdf5"
    (tmp_path / "ucf" / "Archery" / "v_Archery_g01_c01.hdf5").rename(loose)
    with pytest.raises(ValueError, match=r"parent directory"):
        # under a data root, the file's path has no directory to name its class
        hdf_config(["loose.hdf5"], {"layout": "video", "data_root": str(tmp_path)})
    with pytest.raises(ValueError, match="classes must be distinct"):
        h5feed.layouts.Video(classes=("a", "a"))
    with pytest.raises(ValueError, match="leave classes None"):
        h5feed.layouts.Video(label="y", classes=("a",))


def test_a_video_label_from_an_attribute_or_none(tmp_path: pathlib.Path) -> None:
    expected = write_video_files(tmp_path, make_videos(seed=0, count=2), CLASSES)
    (first, name), (second, _name) = list(expected)
    with h5py.File(first, "a") as f:
        f["video"].attrs["label"] = 7
    with h5py.File(second, "a") as f:
        f.attrs["label"] = np.int64(9)  # on the file, not the dataset
    for path, label in ((first, 7), (second, 9)):
        reader = open_reader(path, layouts.Video(label="label"))
        assert reader.index()[0][2] == label
        reader.close()
    reader = open_reader(first, layouts.Video(label=None))
    assert reader.index()[0][0] == name and reader.index()[0][2] == -1
    reader.close()
    with h5py.File(first, "a") as f:
        del f["video"].attrs["label"]
    reader = open_reader(first, layouts.Video(label="label"))
    with pytest.raises(DataError, match=r"no 'label' attribute.*v_ApplyEyeMakeup_g01_c00"):
        reader.index()
    reader.close()


def test_an_empty_or_mistyped_video_names_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c" / "empty.hdf5"
    path.parent.mkdir()
    with h5py.File(path, "w") as f:
        f.create_dataset("video", (0,), dtype=h5py.vlen_dtype(np.uint8))
    with pytest.raises(DataError, match=r"holds no frame.*empty\.hdf5"):
        open_reader(str(path), layouts.Video())
    with h5py.File(path, "w") as f:
        f.create_dataset("video", data=np.zeros((2, 4, 4, 3), np.int16))
    with pytest.raises(DataError, match=r"must be uint8 or float pixels.*empty\.hdf5"):
        open_reader(str(path), layouts.Video())
    with pytest.raises(DataError, match=r"dataset 'clip' is missing"):
        open_reader(str(path), layouts.Video(frames="clip"))


# -- blobs -----------------------------------------------------------------------------------


def test_blobs_without_lengths_count_leading_blobs_and_refuse_padding_in_between(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "b.h5"
    videos = make_videos(seed=0, count=3, min_frames=2, max_frames=5)
    write_blobs(path, videos, frames_per_row=6)
    reader = open_reader(str(path), layouts.Blobs())
    assert [n for _v, n, _l in reader.index()] == [len(f) for f, _ in videos]
    reader.close()
    with h5py.File(path, "a") as f:
        row = f["frames"][1]
        row[0] = np.zeros((), row.dtype)  # padding first, frames after it
        f["frames"][1] = row
    reader = open_reader(str(path), layouts.Blobs())
    with pytest.raises(DataError, match=r"no frames.*000001"):
        reader.index()
    reader.close()
    with h5py.File(path, "a") as f:
        row = f["frames"][1]
        row[0], row[1] = row[1], np.zeros((), row.dtype)
        f["frames"][1] = row
    reader = open_reader(str(path), layouts.Blobs())
    with pytest.raises(DataError, match=r"padding must come last.*000001"):
        reader.index()
    reader.close()


def test_blob_lengths_are_checked(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "b.h5"
    write_blobs(path, make_videos(seed=0, count=2), frames_per_row=4, lengths=True)
    with h5py.File(path, "a") as f:
        f["lengths"][1] = 5
    reader = open_reader(str(path), layouts.Blobs())
    with pytest.raises(DataError, match=r"says 5 frames, not in 1\.\.4.*000001"):
        reader.index()
    reader.close()
    with h5py.File(path, "w") as f:
        f.create_dataset("frames", data=np.zeros((2, 3), np.uint8))
    with pytest.raises(DataError, match=r"must be opaque blobs"):
        open_reader(str(path), layouts.Blobs())


# -- float images and channel order ------------------------------------------------------------


def test_float_images_need_a_declared_scale_and_a_wrong_one_is_an_error(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "f.h5"
    write_float_images(path, make_videos(seed=0, count=2, max_frames=3))
    with pytest.raises(DataError, match=r"declare their scale.*scale=255\.0.*never guesses"):
        open_reader(str(path), layouts.Raw(offsets=None))
    reader = open_reader(str(path), layouts.Raw(offsets=None, scale=255.0))  # 0..255 stored
    with pytest.raises(DataError, match=r"outside 0\.\.255.*declared scale right") as caught:
        reader.read_frames("000001", [0])
    assert caught.value.video == "000001" and caught.value.frame == 0
    reader.close()
    with h5py.File(path, "a") as f:
        f["images"][0, 0, 0, 0] = np.nan
    reader = open_reader(str(path), layouts.Raw(offsets=None, scale=1.0))
    with pytest.raises(DataError, match="not finite"):
        reader.read_frames("000000", [0])
    reader.close()
    uint8 = tmp_path / "u.h5"
    with h5py.File(uint8, "w") as f:
        f.create_dataset("images", data=np.zeros((2, 4, 4, 3), np.uint8))
        f.create_dataset("labels", data=np.zeros(2, np.int64))
    with pytest.raises(DataError, match="applies to float images only"):
        open_reader(str(uint8), layouts.Raw(scale=1.0))
    with pytest.raises(ValueError, match="scale must be None or a number > 0"):
        layouts.Raw(scale=0)
    with pytest.raises(ValueError, match="channels must be one of"):
        layouts.Raw(channels="rbg")


def test_float_pixels_in_zero_one_with_scale_255_through_a_video(tmp_path: pathlib.Path) -> None:
    (video,) = make_videos(seed=0, count=1)
    path = tmp_path / "Archery" / "clip.h5"
    path.parent.mkdir()
    frames = np.stack(video[0])
    with h5py.File(path, "w") as f:
        f.create_dataset("video", data=frames[..., ::-1].astype(np.float32) / 255.0)  # BGR
    reader = open_reader(str(path), layouts.Video(scale=255.0, channels="bgr"))
    assert not reader.encoded and reader.pixel_size() == (24, 32)
    np.testing.assert_array_equal(np.stack(reader.read_frames("clip", [0, 2])), frames[[0, 2]])
    reader.close()


# -- a directory is searched recursively --------------------------------------------------------


def test_a_directory_is_searched_recursively_and_the_error_says_so(tmp_path: pathlib.Path) -> None:
    for rel in ("a/x.hdf5", "a/deeper/y.h5", "b/z.HDF", "b/notes.txt", "top.he5"):
        (tmp_path / "d" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "d" / rel).write_bytes(b"")
    files = hdf_config(str(tmp_path / "d"), {}).files
    assert [pathlib.Path(f).relative_to(tmp_path / "d").as_posix() for f in files] == [
        "a/deeper/y.h5", "a/x.hdf5", "b/z.HDF", "top.he5",
    ]  # fmt: skip
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(
        FileNotFoundError, match=r"searched recursively for \*\.h5/\*\.hdf5/\*\.hdf"
    ):
        hdf_config(str(tmp_path / "empty"), {})


# -- what auto-detection suggests -------------------------------------------------------------


def suggestions(text: str) -> list[str]:
    """The suggested layouts of an error message, as Python expressions."""
    after = text.split("What fits it (layout=...):\n", 1)[1].split("\nDescribe it", 1)[0]
    return [line.strip().split("  #", 1)[0] for line in after.splitlines()]


def test_inspect_suggests_the_layout_that_reads_the_file(tmp_path: pathlib.Path) -> None:
    video = write_video_files(tmp_path / "ucf", make_videos(seed=0, count=1), CLASSES)
    ((video_path, _name),) = video
    blob_path, float_path = tmp_path / "b.h5", tmp_path / "f.h5"
    write_blobs(blob_path, make_videos(seed=1, count=2), frames_per_row=12, lengths=True)
    write_float_images(float_path, make_videos(seed=2, count=1, max_frames=3))
    wanted = {
        video_path: "h5feed.layouts.Video(frames='video')",
        str(blob_path): "h5feed.layouts.Blobs(frames='frames', labels='labels', lengths='lengths')",
        str(float_path): "h5feed.layouts.Raw(images='images', labels='labels', offsets=None, "
        "scale=255.0)",
    }
    for path, suggestion in wanted.items():
        _output, errors = inspection.run([path], "auto", as_json=False)
        (error,) = errors
        assert path in error and suggestion in suggestions(error), error
        spec = eval(suggestion, {"h5feed": h5feed})  # the suggestion reads the file
        if isinstance(spec, layouts.Raw):
            spec = layouts.Raw(images="images", offsets=None, scale=1.0)  # 0..255 stored
        report = inspection.inspect_file(path, spec)
        assert report["videos"] >= 1 and report["frame_shape"] == [24, 32, 3]
    output, errors = inspection.run([video_path], '{"kind": "video"}', as_json=False)
    assert not errors and "labels       0: 1" in output  # its directory, the only class


def test_new_layouts_travel_as_plain_maps() -> None:
    for spec in (
        layouts.Video(classes=("a", "b"), scale=2.0, channels="bgr"),
        layouts.Video(label=None, frames="frames"),
        layouts.Blobs(lengths=None),
        layouts.Raw(scale=255.0, channels="bgr"),
    ):
        wire = spec.to_wire()
        if wire.get("classes"):
            wire["classes"] = list(wire["classes"])  # msgpack gives lists
        assert layouts.from_wire(wire) == spec
    with pytest.raises(ValueError, match="classes must be distinct non-empty names"):
        layouts.from_wire({"kind": "video", "classes": [1, 2]})


def test_a_float_file_fails_through_workers_with_the_hint(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "f.h5"
    write_float_images(path, make_videos(seed=0, count=1, min_frames=2, max_frames=2))
    with pytest.raises(WorkerError, match=r"Raw\(images='images'.*scale=255\.0"):
        list(h5feed.batches(str(path), clip_len=1, workers=1))


def test_labels_from_a_user_mapping_of_file_names(tmp_path: pathlib.Path) -> None:
    expected = write_video_files(tmp_path, make_videos(seed=0, count=3), CLASSES)
    names = [name for _path, name in expected]  # v_ApplyEyeMakeup_g01_c00, ...
    annotations = {names[0]: "zebra", names[1]: "ant", names[2]: "zebra"}  # e.g. from a CSV
    config = hdf_config(str(tmp_path), {"layout": layouts.Video(label=annotations)})
    assert config.file_labels == (1, 0, 1)  # class names numbered in sorted order
    assert config.layout == layouts.Video(label=None)  # the mapping is not sent to workers
    given = layouts.Video(label=annotations, classes=("ant", "bee", "zebra"))
    assert hdf_config(str(tmp_path), {"layout": given}).file_labels == (2, 0, 2)
    numbers = hdf_config(str(tmp_path), {"layout": layouts.Video(label=dict.fromkeys(names, 4))})
    assert numbers.file_labels == (4, 4, 4)
    assert fingerprint(numbers)["labels"] != fingerprint(config)["labels"]  # they decide batches
    with pytest.raises(ValueError, match=r"no label for .*v_Archery_g01_c01"):
        hdf_config(str(tmp_path), {"layout": layouts.Video(label={names[0]: 1})})
    with pytest.raises(ValueError, match=r"'zebra' are not among classes="):
        hdf_config(str(tmp_path), {"layout": layouts.Video(label=annotations, classes=("ant",))})
    twin = tmp_path / "other" / f"{names[0]}.h5"
    twin.parent.mkdir()
    twin.write_bytes(b"")
    with pytest.raises(ValueError, match=r"v_ApplyEyeMakeup_g01_c00' names more than one file"):
        hdf_config(str(tmp_path), {"layout": layouts.Video(label=annotations)})
    with pytest.raises(ValueError, match="maps file names"):
        layouts.Video(label={"a": 1.5})


def test_blob_files_declaring_too_much_are_refused_before_a_read(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from h5feed.producer.layouts import blobs as blob_reader

    path = tmp_path / "b.h5"
    write_blobs(path, make_videos(seed=0, count=3), frames_per_row=4)
    monkeypatch.setattr(blob_reader, "MAX_VIDEOS", 2)
    with pytest.raises(DataError, match=r"declares 3 videos, over the limit of 2"):
        open_reader(str(path), layouts.Blobs())
    monkeypatch.setattr(blob_reader, "MAX_VIDEOS", 10)
    monkeypatch.setattr(blob_reader, "MAX_SCANNED_ROW_BYTES", 16)
    reader = open_reader(str(path), layouts.Blobs())
    with pytest.raises(DataError, match=r"over the limit of 16: give the frame counts"):
        reader.index()
    reader.close()
    with h5py.File(path, "w") as f:  # a 1 GB blob declared by a tiny file: refused unread
        f.create_dataset("frames", (1, 1), dtype=np.dtype("V1073741824"))
    with pytest.raises(DataError, match="declares blobs of 1073741824 bytes"):
        open_reader(str(path), layouts.Blobs())


def test_another_label_mapping_over_the_same_files_is_not_served_from_the_known_index(
    tmp_path: pathlib.Path,
) -> None:
    expected = write_video_files(tmp_path / "d", make_videos(seed=0, count=3), CLASSES)
    names = [name for _path, name in expected]
    for label in (1, 2):  # the second run's files are unchanged: only the mapping differs
        layout = layouts.Video(label=dict.fromkeys(names, label))
        feed = h5feed.batches(str(tmp_path / "d"), layout=layout, clip_len=1, batch_size=3,
                              workers=1, index_cache=str(tmp_path / "cache"))  # fmt: skip
        (batch,) = collect(feed)
        assert batch["label"].tolist() == [label] * 3
