"""Bad data (docs/data/bad-data.md): corrupt, truncated and CRC-failing frames under
``on_error="raise"`` and ``"skip"``; missing, unreadable and frameless files. Real files, real
worker processes and sockets; the in-process parts (reader, ClipMaker) on real files too."""

from __future__ import annotations

import logging
import os
import pathlib
import socket
import zlib
from collections.abc import Mapping, Sequence

import cv2
import h5py
import numpy as np
import pytest
from conftest import own_worker_pids, wait_until_gone
from metrics_helpers import scrape, value
from paths import SUPPORT
from ports import free_port
from remote_producers import remote_feed, start_producer

import h5feed
from h5feed.common.config import ClipSpec
from h5feed.common.errors import (
    DataError,
    FileReadError,
    FrameError,
    TooManySkippedError,
    WorkerError,
)
from h5feed.common.layouts import CRC_DATASET, PACK_VERSION_ATTR, Groups
from h5feed.common.protocol.messages import Row, SkippedRow
from h5feed.consumer.hdf5.bad_data import LISTED, SkipLog, default_max_skipped
from h5feed.consumer.plan.epoch_plan import Index, PlannedBatch
from h5feed.pack.run import pack
from h5feed.pack.verify import _check_video as check_video
from h5feed.producer.files.open_files import check_readable
from h5feed.producer.layouts import open_reader
from h5feed.producer.worker.clips import ClipMaker
from h5feed.producer.worker.code_policy import NOTHING, CodePolicy
from h5feed.producer.worker.decode import decode_frame

FRAMES = 6
CLIP = {"clip_len": FRAMES, "resize": (24, 32), "shuffle": False, "batch_size": 2}
#: video -> (frame, what is wrong with it); video_000 and video_004 are sound.
BAD = {1: (3, "corrupt"), 2: (1, "truncated"), 3: (4, "flipped")}


def jpeg(video: int, frame: int) -> bytes:
    """A small textured JPEG, different for every (video, frame)."""
    pixels = (np.arange(24 * 32 * 3).reshape(24, 32, 3) * (video + 2) + 17 * frame) % 251
    return bytes(cv2.imencode(".jpg", pixels.astype(np.uint8))[1].tobytes())


def spoil(data: bytes, how: str) -> bytes:
    if how == "corrupt":
        return b"\xff\xd8 this is not a jpeg any more"
    if how == "truncated":
        return data[: len(data) * 6 // 10]  # a write cut short
    flipped = bytearray(data)  # one flipped bit in the scan: still decodes, to other pixels
    flipped[len(data) // 2] ^= 0x10
    return bytes(flipped)


def write_groups(
    path: pathlib.Path,
    videos: Mapping[str, Sequence[bytes]],
    crcs: Mapping[str, Sequence[int]] | None = None,
    extra_groups: Sequence[str] = (),
) -> None:
    """The groups layout as ``h5feed pack`` writes it: frames, ``crc32`` (given, else none)
    and a label; ``extra_groups``: top-level groups without frames."""
    with h5py.File(path, "w") as h5:
        for label, (name, frames) in enumerate(videos.items()):
            group = h5.create_group(name)
            dataset = group.create_dataset(
                "frames", (len(frames),), dtype=h5py.vlen_dtype(np.uint8)
            )
            for i, frame in enumerate(frames):
                dataset[i] = np.frombuffer(frame, np.uint8)
            group.attrs["label"] = label
            if crcs is not None:
                group.create_dataset(CRC_DATASET, data=np.asarray(crcs[name], np.uint32))
        for name in extra_groups:
            h5.create_group(name).attrs["note"] = "not a video"


def dataset_pair(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """The same five videos, sound (``clean/data.h5``) and with the frames of :data:`BAD`
    spoiled (``bad/data.h5``), both with the sound frames' CRC32s stored, except for the
    corrupt frame: stored corrupt, so its CRC32 matches and only decoding fails."""
    sound = {f"video_{v:03d}": [jpeg(v, f) for f in range(FRAMES)] for v in range(5)}
    crcs = {name: [zlib.crc32(f) for f in frames] for name, frames in sound.items()}
    spoiled = {name: list(frames) for name, frames in sound.items()}
    bad_crcs = {name: list(values) for name, values in crcs.items()}
    for video, (frame, how) in BAD.items():
        name = f"video_{video:03d}"
        spoiled[name][frame] = spoil(sound[name][frame], how)
        if how == "corrupt":
            bad_crcs[name][frame] = zlib.crc32(spoiled[name][frame])
    (tmp_path / "clean").mkdir()
    (tmp_path / "bad").mkdir()
    write_groups(tmp_path / "clean" / "data.h5", sound, crcs)
    write_groups(tmp_path / "bad" / "data.h5", spoiled, bad_crcs)
    return tmp_path / "clean" / "data.h5", tmp_path / "bad" / "data.h5"


@pytest.fixture()
def files(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    return dataset_pair(tmp_path)


def collect(feed: h5feed.consumer.api.Feed) -> dict[str, np.ndarray]:
    """Every batch of one iteration, concatenated by key (frames copied out of their slot)."""
    batches = [{k: np.array(v) for k, v in batch.items()} for batch in feed]
    return {key: np.concatenate([b[key] for b in batches]) for key in batches[0]}


def row(video: int, file: int = 0) -> Row:
    return Row(video, file, video, 0, 0.0, 0.0, False, 0)


# -- the reader and the clip maker, in process, on real files -------------------------------


def test_each_kind_of_bad_frame_raises_naming_file_video_and_frame(
    files: tuple[pathlib.Path, pathlib.Path],
) -> None:
    _clean, bad = files
    maker = ClipMaker(ClipSpec(clip_len=FRAMES, resize=(24, 32)), Groups(), NOTHING)
    try:
        maker.open_and_index(0, str(bad), None)
        maker.produce([row(0), row(4)])  # the sound videos are fine
        for video, (frame, how) in BAD.items():
            with pytest.raises(FrameError) as caught:
                maker.produce([row(0), row(video)])
            error = caught.value
            assert (error.file, error.video, error.frame) == (str(bad), f"video_{video:03d}", frame)
            if how == "corrupt":  # its CRC32 matches: refused when its header is read
                assert "neither a JPEG nor a PNG with a whole header" in str(error)
            else:
                assert "fails its CRC32 check" in str(error), how
    finally:
        maker.close()


def test_a_flipped_bit_decodes_to_garbage_so_only_the_crc_catches_it() -> None:
    sound = jpeg(3, 4)
    flipped = spoil(sound, "flipped")
    image = decode_frame(np.frombuffer(flipped, np.uint8), "f.h5", "v", 4)
    assert not np.array_equal(image, decode_frame(np.frombuffer(sound, np.uint8), "f.h5", "v", 4))
    with pytest.raises(FrameError, match="not a decodable image"):  # without a CRC: decode
        decode_frame(np.frombuffer(spoil(sound, "truncated"), np.uint8), "f.h5", "v", 1)


def test_skip_zero_fills_the_bad_rows_in_process_and_lists_them(
    files: tuple[pathlib.Path, pathlib.Path],
) -> None:
    clean, bad = files
    spec = ClipSpec(clip_len=FRAMES, resize=(24, 32))
    makers = [ClipMaker(spec, Groups(), NOTHING) for _ in range(2)]
    try:
        makers[0].open_and_index(0, str(clean), None)
        makers[1].open_and_index(0, str(bad), None)
        rows = [row(v) for v in range(5)]
        want, none = makers[0].produce(rows, skip=True)
        assert none == []
        slot = np.full((7, FRAMES, 24, 32, 3), 99, np.uint8)  # a slot holding an old batch
        positions = [6, 0, 2, 5, 1]
        _out, skipped = makers[1].produce(rows, slot, positions, skip=True)
        assert [(r, exc.frame) for r, exc in skipped] == [(1, 3), (2, 1), (3, 4)]
        for r, place in enumerate(positions):
            expected = want[r] if r in (0, 4) else 0
            assert np.array_equal(slot[place], np.broadcast_to(expected, slot[place].shape))
        every_row_bad, skipped = makers[1].produce([row(1), row(2)], skip=True)
        assert every_row_bad.shape == (2, FRAMES, 24, 32, 3) and not every_row_bad.any()
        assert len(skipped) == 2
    finally:
        for maker in makers:
            maker.close()


def test_skip_with_a_transform_gives_zeros_of_its_shape_and_dtype(
    files: tuple[pathlib.Path, pathlib.Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _clean, bad = files
    monkeypatch.syspath_prepend(str(SUPPORT))
    spec = ClipSpec(clip_len=FRAMES, resize=(24, 32), transform="sample_transforms:mean_pool")
    maker = ClipMaker(spec, Groups(), CodePolicy(("sample_transforms:*",)))
    try:
        maker.open_and_index(0, str(bad), None)
        good, none = maker.produce([row(0)])
        out, skipped = maker.produce([row(1), row(0)], skip=True)  # the first row is bad
        assert none == [] and [r for r, _exc in skipped] == [0]
        assert out.dtype == good.dtype and out.shape[1:] == good.shape[1:]
        assert not out[0].any() and np.array_equal(out[1], good[0])
        only_bad, _skipped = maker.produce([row(2)], skip=True)  # shape from a clip of zeros
        assert only_bad.dtype == good.dtype and only_bad.shape == good.shape
        assert not only_bad.any()
    finally:
        maker.close()


def test_a_wrong_crc_dataset_is_an_error_naming_file_and_video(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "crc.h5"
    write_groups(path, {"video_000": [jpeg(0, f) for f in range(3)]}, {"video_000": [1, 2]})
    reader = open_reader(str(path), Groups())
    try:
        with pytest.raises(DataError, match=r"'crc32' must be unsigned integers \[3\].*video_000"):
            reader.index()
    finally:
        reader.close()


def test_a_group_without_frames_is_a_warning_once_per_file_and_left_out(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "mixed.h5"
    frames = [jpeg(0, f) for f in range(2)]
    write_groups(path, {"video_000": frames}, extra_groups=["meta", "notes"])
    reader = open_reader(str(path), Groups())
    try:
        with caplog.at_level(logging.WARNING, logger="h5feed.worker"):
            assert [name for name, _n, _l in reader.index()] == ["video_000"]
    finally:
        reader.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(path) in warnings[0] and "'meta', 'notes'" in warnings[0]
    empty = tmp_path / "empty.h5"
    write_groups(empty, {}, extra_groups=["meta"])
    reader = open_reader(str(empty), Groups())
    try:
        with pytest.raises(DataError, match=r"no videos found.*empty\.h5"):
            reader.index()
    finally:
        reader.close()


def test_check_readable_names_the_file_and_the_host(tmp_path: pathlib.Path) -> None:
    host = socket.gethostname()
    with pytest.raises(FileReadError, match=rf"host {host!r}: cannot stat.*nowhere\.h5") as info:
        check_readable(7, str(tmp_path / "nowhere.h5"))
    assert info.value.number == 7 and info.value.host == host
    (tmp_path / "dir.h5").mkdir()
    with pytest.raises(FileReadError, match=r"is a directory.*dir\.h5"):
        check_readable(0, str(tmp_path / "dir.h5"))


def test_an_io_error_reading_frames_is_a_file_error_not_a_bad_frame(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "cut.h5"
    write_groups(path, {"video_000": [jpeg(0, f) * 40 for f in range(FRAMES)]})
    maker = ClipMaker(ClipSpec(clip_len=FRAMES, resize=(24, 32)), Groups(), NOTHING)
    try:
        maker.open_and_index(3, str(path), None)
        os.truncate(path, 4096)  # the disk loses the frames after the file was opened
        with pytest.raises(FileReadError) as caught:
            maker.produce([row(0, file=3)], skip=True)  # skip does not apply to a file's I/O
        assert caught.value.number == 3 and str(path) in str(caught.value)
    finally:
        maker.close()


def test_pack_writes_version_2_and_a_crc32_per_frame_that_readers_verify(
    tmp_path: pathlib.Path,
) -> None:
    src = tmp_path / "src" / "clip"
    src.mkdir(parents=True)
    for f in range(3):
        (src / f"{f}.jpg").write_bytes(jpeg(1, f))
    out = tmp_path / "out"
    pack(tmp_path / "src", out, jobs=1)
    shard = out / "shard-00000.h5"
    with h5py.File(shard, "r+") as h5:
        assert int(h5.attrs[PACK_VERSION_ATTR]) == 2
        stored = [bytes(b) for b in h5["clip"]["frames"][:]]
        assert stored == [jpeg(1, f) for f in range(3)]
        crcs = h5["clip"][CRC_DATASET]
        assert crcs.dtype == np.uint32 and crcs[:].tolist() == [zlib.crc32(b) for b in stored]
        h5["clip"]["frames"][2] = np.frombuffer(spoil(stored[2], "flipped"), np.uint8)
        assert check_video(h5, str(shard), "clip", 3, -1) == [
            f"{shard}, video 'clip', frame 2: fails its CRC32 (corrupt)"
        ]  # h5feed pack --verify-only
    maker = ClipMaker(ClipSpec(clip_len=3), Groups(), NOTHING)
    try:
        maker.open_and_index(0, str(shard), None)
        with pytest.raises(FrameError, match=r"fails its CRC32 check.*'clip', frame 2"):
            maker.produce([row(0)])
    finally:
        maker.close()


def test_the_default_max_skipped_is_a_thousandth_rounded_up() -> None:
    assert [default_max_skipped(n) for n in (0, 1, 1000, 1001, 100_000)] == [0, 1, 1, 2, 100]


# -- end to end: worker processes, sockets, shared-memory slots ------------------------------


def test_raise_ends_the_run_naming_file_video_and_frame(
    files: tuple[pathlib.Path, pathlib.Path],
) -> None:
    _clean, bad = files
    feed = h5feed.batches(bad, **CLIP, workers=1)
    with pytest.raises(WorkerError) as caught:
        list(feed)
    assert caught.value.error_type == "FrameError"
    message = str(caught.value)
    assert str(bad) in message and "'video_001'" in message and "frame 3" in message
    assert wait_until_gone(own_worker_pids()) == []


@pytest.mark.parametrize("shared_memory", [True, False], ids=["slots", "socket"])
def test_skip_marks_exactly_the_bad_rows_and_keeps_the_rest_of_a_clean_run(
    files: tuple[pathlib.Path, pathlib.Path], shared_memory: bool
) -> None:
    clean, bad = files
    want = collect(h5feed.batches(clean, **CLIP, workers=1, shared_memory=shared_memory))
    feed = h5feed.batches(
        bad, **CLIP, workers=2, on_error="skip", max_skipped=3, shared_memory=shared_memory,
        metrics_port=0,
    )  # fmt: skip
    got = collect(feed)
    assert sorted(got["sample"].tolist()) == list(range(5))  # every sample, exactly once
    assert got["valid"].tolist() == [True, False, False, False, True]
    assert want["valid"].all()
    for key in ("sample", "label", "video", "start"):
        assert np.array_equal(got[key], want[key]), key
    assert np.array_equal(got["frames"][[0, 4]], want["frames"][[0, 4]])
    assert not got["frames"][1:4].any()  # zero-filled, whatever the slot held before
    stats = feed.stats()
    assert stats["skipped"] == 3 and stats["skipped_per_epoch"] == {"0": 3}
    listed = {(s["video"], s["frame"]) for s in stats["skipped_samples"]}
    assert listed == {(f"video_{v:03d}", frame) for v, (frame, _how) in BAD.items()}
    assert all(s["file"] == str(bad) for s in stats["skipped_samples"])
    assert (stats["shared_memory_slots"] > 0) == shared_memory
    assert feed.metrics_port is not None
    assert value(scrape(feed.metrics_port), "h5feed_skipped_samples_total") == 3


def test_tf_elements_carry_valid_under_skip_usable_as_sample_weight(
    files: tuple[pathlib.Path, pathlib.Path],
) -> None:
    tf = pytest.importorskip("tensorflow")  # the tf extra is part of the test install
    _clean, bad = files
    ds = h5feed.dataset(bad, **CLIP, workers=1, on_error="skip", max_skipped=3)
    assert ds.element_spec["valid"] == tf.TensorSpec((None,), tf.bool)
    weights = ds.map(lambda b: tf.cast(b["valid"], tf.float32))
    assert np.concatenate([w.numpy() for w in weights]).tolist() == [1, 0, 0, 0, 1]
    plain = h5feed.dataset(bad, **CLIP, workers=1, keys=("frames", "valid"))
    assert set(plain.element_spec) == {"frames", "valid"}
    assert "valid" not in h5feed.dataset(bad, **CLIP, workers=1).element_spec


def test_more_skipped_than_max_skipped_ends_the_run(
    files: tuple[pathlib.Path, pathlib.Path],
) -> None:
    _clean, bad = files
    # 5 samples: the default allows 1 (0.1%, rounded up); 3 are bad.
    with pytest.raises(TooManySkippedError, match=r"more than max_skipped=1.*video_00[123]"):
        list(h5feed.batches(bad, **CLIP, workers=1, on_error="skip"))
    assert wait_until_gone(own_worker_pids()) == []


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_missing_file_is_reported_when_the_iteration_starts(
    tmp_path: pathlib.Path, on_error: str
) -> None:
    sound, gone = tmp_path / "a.h5", tmp_path / "b.h5"
    for path in (sound, gone):
        write_groups(path, {"video_000": [jpeg(0, f) for f in range(FRAMES)]})
    # Two workers on one host: the file moves to the second, which cannot read it either.
    stream = h5feed.batches([sound, gone], **CLIP, workers=2, on_error=on_error).stream()
    gone.unlink()  # after the file list was resolved, before the workers start
    with pytest.raises(WorkerError) as caught:
        next(stream)  # the first batch: the check runs when the JOB arrives
    assert caught.value.error_type == "FileReadError"
    message = str(caught.value)
    assert str(gone) in message and f"host {socket.gethostname()!r}" in message
    assert "No such file" in message


def test_a_directory_or_a_non_hdf5_file_in_place_of_a_file_is_named(
    tmp_path: pathlib.Path,
) -> None:
    first, second = tmp_path / "a.h5", tmp_path / "b.h5"
    for path in (first, second):
        write_groups(path, {"video_000": [jpeg(0, f) for f in range(FRAMES)]})
    feed = h5feed.batches([first, second], **CLIP, workers=1, on_error="skip")
    first.unlink()
    first.mkdir()  # root reads any file whatever its mode: a directory cannot be read
    second.write_bytes(b"not HDF5 at all" * 64)
    with pytest.raises(WorkerError) as caught:
        list(feed)
    assert caught.value.error_type == "FileReadError"
    assert "a.h5" in str(caught.value) and "is a directory" in str(caught.value)
    with pytest.raises(WorkerError, match=r"on host .*: cannot open HDF5 file.*b\.h5") as caught:
        list(h5feed.batches([second], **CLIP, workers=1))
    assert caught.value.error_type == "FileReadError"


def test_a_group_without_frames_is_left_out_of_the_plan(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "mixed.h5"
    videos = {f"video_{v:03d}": [jpeg(v, f) for f in range(FRAMES)] for v in range(2)}
    write_groups(path, videos, extra_groups=["attachments"])
    got = collect(h5feed.batches(path, **CLIP, workers=1))
    assert got["video"].tolist() == [b"video_000", b"video_001"]
    assert got["valid"].all()


def test_on_error_and_max_skipped_are_checked_before_anything_starts(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "a.h5"
    write_groups(path, {"video_000": [jpeg(0, 0)]})
    with pytest.raises(ValueError, match=r"on_error must be one of \('raise', 'skip'\)"):
        h5feed.batches(path, on_error="ignore")
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="max_skipped must be an int >= 0 or None"):
            h5feed.batches(path, max_skipped=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"\['on_error'\] do not apply to source="):
        h5feed.batches(source="user_sources:squares", on_error="skip")


def _planned(index: Index, samples: list[int], epoch: int = 0) -> PlannedBatch:
    n = len(samples)
    array = np.asarray(samples, np.int64)
    return PlannedBatch(
        epoch, 0, array, array, np.zeros(n, np.int64), np.zeros((n, 2)), np.zeros(n, bool),
        np.zeros(n, np.uint64),
    )  # fmt: skip


def test_the_skip_log_counts_lists_a_bounded_few_and_logs_once_per_file(
    caplog: pytest.LogCaptureFixture,
) -> None:
    videos = [[(f"v{v}", 4, 0) for v in range(300)], [("w0", 4, 0)]]
    index = Index.build(["a.h5", "b.h5"], videos)
    log = logging.getLogger("h5feed.test_bad_data")
    skips = SkipLog("skip", 250, (0, 1), 1, log)
    planned = _planned(index, list(range(301)))
    every = tuple(SkippedRow(p, 1, f"bad {p}") for p in range(201))
    with caplog.at_level(logging.WARNING, logger=log.name):
        where = skips.record(index, planned, np.arange(301), every, "w1")
        skips.record(index, planned, np.arange(301), (SkippedRow(300, 2, "bad w0"),), "w1")
    assert where.tolist() == list(range(201))
    figures = skips.snapshot()
    assert figures["skipped"] == 202 and figures["skipped_per_epoch"] == {"0": 202}
    assert len(figures["skipped_samples"]) == LISTED  # bounded, the first ones
    assert figures["skipped_samples"][0] == {
        "file": "a.h5", "video": "v0", "frame": 1, "epoch": 0, "sample": 0, "worker": "w1",
        "reason": "bad 0",
    }  # fmt: skip
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 2 and "bad 0" in logged[0] and "bad w0" in logged[1]
    with pytest.raises(TooManySkippedError, match=r"251 samples of epoch 0.*max_skipped=250"):
        skips.record(index, planned, np.arange(301), every[201 - 49 :], "w1")


def test_skipped_rows_under_raise_end_the_run_naming_file_video_and_frame() -> None:
    """A worker of other code that skips although the trainer said raise: the trainer's policy
    wins."""
    index = Index.build(["a.h5"], [[("v0", 4, 0), ("v1", 4, 0)]])
    skips = SkipLog("raise", None, (0, 1), 1, logging.getLogger("h5feed.test_bad_data"))
    planned = _planned(index, [0, 1])
    with pytest.raises(DataError, match=r"on_error='raise': bad.*'a\.h5', video 'v1', frame 2"):
        skips.record(index, planned, np.array([0, 1]), (SkippedRow(1, 2, "bad"),), "w1")
    assert skips.snapshot()["skipped"] == 0


def test_a_file_one_producer_cannot_read_moves_to_one_that_can(
    tmp_path: pathlib.Path, small_dataset: list[pathlib.Path]
) -> None:
    # "blind" runs where the data root holds none of the files (another host whose mount
    # is missing): each file given to it moves to "sighted"; the epoch arrives whole.
    blind_root = tmp_path / "empty-mount"
    blind_root.mkdir()
    port = free_port()
    producers = [
        start_producer(port, small_dataset[0].parent, "sighted"),
        start_producer(port, blind_root, "blind"),
    ]
    try:
        feed = remote_feed(port, small_dataset, batch_size=5, start_timeout_s=30)
        samples = [s for batch in feed for s in batch["sample"].tolist()]
        stats = feed.stats()
        assert sorted(samples) == list(range(24))
        clips = {w["name"].split("-")[0]: (w["clips"], w["files"]) for w in stats["workers"]}
        assert clips["blind"] == (0, 0) and clips["sighted"][1] == len(small_dataset)
        # Each file at most once for "blind": refused its own, it is dealt the others to read
        # too (work follows cores: hdf5/sharing.py), each refused once, never again.
        assert 1 <= stats["unreadable_files"] <= len(small_dataset)
    finally:
        for process in producers:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=10)
