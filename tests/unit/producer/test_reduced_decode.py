"""``reduced_decode=True``: JPEGs decoded straight to 1/2, 1/4 or 1/8 of their size when the
resize target allows it, through real workers; pixels checked against OpenCV directly."""

from __future__ import annotations

import pathlib

import cv2
import numpy as np
import pytest

import h5feed
from h5feed.common.errors import WorkerError
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset, write_video_file
from h5feed.producer.worker.decode import jpeg_size, reduced_flag


def encode(image: np.ndarray, *params: int) -> bytes:
    ok, data = cv2.imencode(".jpg", image, list(params))
    assert ok
    return bytes(data.tobytes())


def texture(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def vga_dataset(tmp_path_factory: pytest.TempPathFactory) -> list[pathlib.Path]:
    """640x480 JPEG videos (h5feed's sample scenes), so a 171x128 target can use 1/2."""
    spec = SampleSpec(files=2, videos_per_file=3, min_frames=8, max_frames=12, width=640,
                      height=480, seed=5)  # fmt: skip
    return make_sample_dataset(tmp_path_factory.mktemp("vga"), spec)


@pytest.mark.parametrize(
    "params",
    [
        [],
        [cv2.IMWRITE_JPEG_PROGRESSIVE, 1],
        [cv2.IMWRITE_JPEG_RST_INTERVAL, 4],
        [cv2.IMWRITE_JPEG_OPTIMIZE, 1, cv2.IMWRITE_JPEG_QUALITY, 40],
    ],
    ids=["baseline", "progressive", "restart-markers", "optimised-q40"],
)
@pytest.mark.parametrize("size", [(240, 320), (37, 53), (720, 1280)])
def test_jpeg_size_reads_the_header_as_opencv_decodes_it(
    size: tuple[int, int], params: list[int]
) -> None:
    data = encode(texture(*size), *params)
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert jpeg_size(np.frombuffer(data, np.uint8)) == decoded.shape[:2] == size


def test_jpeg_size_is_none_for_what_is_not_a_whole_jpeg_header() -> None:
    png = cv2.imencode(".png", texture(8, 8))[1].tobytes()
    whole = encode(texture(16, 16))
    sof = whole.index(b"\xff\xc0")
    assert jpeg_size(png) is None
    assert jpeg_size(b"this is not a jpeg") is None
    assert jpeg_size(b"") is None
    assert jpeg_size(whole[: sof + 6]) is None  # cut inside the frame header
    assert jpeg_size(whole[:sof]) is None  # cut before it


@pytest.mark.parametrize(
    ("stored", "target", "flag"),
    [
        ((480, 640), (128, 171), cv2.IMREAD_REDUCED_COLOR_2),  # 240x320: 1/4 would be 120 rows
        ((480, 640), (112, 112), cv2.IMREAD_REDUCED_COLOR_4),
        ((480, 640), (60, 80), cv2.IMREAD_REDUCED_COLOR_8),
        ((480, 640), (40, 40), cv2.IMREAD_REDUCED_COLOR_8),  # never beyond 1/8
        ((240, 320), (128, 171), cv2.IMREAD_COLOR),  # above half: a full decode
        ((241, 321), (121, 161), cv2.IMREAD_REDUCED_COLOR_2),  # libjpeg rounds up
        ((241, 321), (122, 161), cv2.IMREAD_COLOR),
    ],
)
def test_the_largest_reduction_that_stays_at_least_the_target(
    stored: tuple[int, int], target: tuple[int, int], flag: int
) -> None:
    assert reduced_flag(stored, target) == flag


def test_reduced_batches_are_what_opencv_gives_when_decoding_reduced(
    vga_dataset: list[pathlib.Path],
) -> None:
    import h5py

    clip = {"clip_len": 4, "resize": (128, 171), "batch_size": 3, "shuffle": True}
    reduced = list(h5feed.batches(vga_dataset, **clip, reduced_decode=True, workers=2))
    full = list(h5feed.batches(vga_dataset, **clip, workers=2))
    assert sum(len(b["frames"]) for b in reduced) == 6  # every video once, as always
    files = {str(p): h5py.File(p, "r") for p in vga_dataset}
    try:
        for got, plain in zip(reduced, full, strict=True):
            for key in ("file", "video", "start", "label"):  # the plan does not change
                assert got[key].tolist() == plain[key].tolist()
            for row in range(len(got["frames"])):
                stored = files[got["file"][row].decode()][got["video"][row].decode()]["frames"]
                start = int(got["start"][row])
                for t in range(4):
                    data = np.asarray(stored[start + t])
                    half = cv2.imdecode(data, cv2.IMREAD_REDUCED_COLOR_2)
                    assert half.shape[:2] == (240, 320)
                    want = cv2.cvtColor(
                        cv2.resize(half, (171, 128), interpolation=cv2.INTER_LINEAR),
                        cv2.COLOR_BGR2RGB,
                    )
                    assert np.array_equal(got["frames"][row, t], want)
            # Close to the full decode, and not the same pixels: the option did something.
            diff = np.abs(got["frames"].astype(np.int16) - plain["frames"].astype(np.int16))
            assert 0 < diff.mean() < 4.0
    finally:
        for handle in files.values():
            handle.close()


def test_reduced_decode_changes_nothing_above_half_the_stored_size(
    vga_dataset: list[pathlib.Path],
) -> None:
    clip = {"clip_len": 3, "resize": (300, 400), "crop": (256, 256), "flip": True}
    reduced = list(h5feed.batches(vga_dataset, **clip, reduced_decode=True, workers=1))
    full = list(h5feed.batches(vga_dataset, **clip, workers=1))
    assert len(reduced) == len(full) > 0
    for got, plain in zip(reduced, full, strict=True):
        assert np.array_equal(got["frames"], plain["frames"])


def test_a_bad_frame_is_named_with_reduced_decode_too(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "corrupt.h5"
    frames = [encode(texture(96, 128, i)) for i in range(4)]
    frames[2] = frames[2][:200]  # a JPEG cut short: the header is whole, the scan is not
    write_video_file(path, {"video_000": (frames, 0)})
    feed = h5feed.batches(path, clip_len=4, resize=(24, 32), reduced_decode=True, workers=1)
    with pytest.raises(WorkerError) as caught:
        list(feed)
    message = str(caught.value)
    assert str(path) in message and "'video_000'" in message and "frame 2" in message
    assert caught.value.error_type == "FrameError"  # a DataError of one frame


def test_reduced_decode_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="reduced_decode must be True or False"):
        h5feed.batches(["x.h5"], reduced_decode="yes")  # type: ignore[arg-type]
