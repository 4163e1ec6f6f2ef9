"""``ClipWriter.write_encoded``, the worker's per-clip hot path, against the per-frame path it
stands for (``decode_frame`` then ``ClipWriter.write``, frame by frame): the same pixels for
every clip spec it serves, and the same errors naming the same frame."""

from __future__ import annotations

import zlib

import cv2
import numpy as np
import pytest

from h5feed.common.config import ClipSpec
from h5feed.common.errors import DataError, FrameError
from h5feed.producer.worker.decode import ClipWriter, decode_frame

FILE, VIDEO = "/data/videos.h5", "clip_007"


def jpeg(height: int, width: int, seed: int) -> np.ndarray:
    """A textured JPEG of ``height`` x ``width`` as h5py returns a stored frame (uint8 1-D)."""
    rng = np.random.default_rng(seed)
    image = cv2.GaussianBlur(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), (5, 5), 0)
    ok, data = cv2.imencode(".jpg", image)
    assert ok
    return np.asarray(data, np.uint8).reshape(-1)


def frame_by_frame(
    writer: ClipWriter,
    stored: list[np.ndarray],
    indices: list[int],
    offsets: tuple[float, float],
    flip: bool,
) -> np.ndarray:
    """The per-frame path the hot path must equal."""
    first = decode_frame(stored[0], FILE, VIDEO, indices[0], writer.reduce_to, writer.max_pixels)
    height, width = writer.frame_shape(first)
    out = np.full((len(stored), height, width, 3), 7, np.uint8)
    for t, (data, frame) in enumerate(zip(stored, indices, strict=True)):
        image = decode_frame(data, FILE, VIDEO, frame, writer.reduce_to, writer.max_pixels)
        writer.write(out[t], image, offsets, flip, (FILE, VIDEO, frame))
    return out


SPECS = {
    "resize+crop": ClipSpec(clip_len=5, resize=(64, 85), crop=(48, 48)),
    "crop only": ClipSpec(clip_len=5, crop=(40, 56)),
    "resize only": ClipSpec(clip_len=5, resize=(30, 44)),
    "centre crop": ClipSpec(clip_len=5, resize=(64, 85), crop=(48, 48), crop_mode="center"),
    "reduced decode": ClipSpec(clip_len=5, resize=(50, 60), crop=(40, 40), reduced_decode=True),
    "stored size": ClipSpec(clip_len=5, max_frame_pixels=None),
}


@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_write_encoded_gives_the_pixels_of_the_per_frame_path(name: str, flip: bool) -> None:
    writer = ClipWriter(SPECS[name])
    stored = [jpeg(120, 160, seed) for seed in range(5)]
    indices = [3, 4, 5, 6, 0]  # a looped clip: the frames' numbers are not their positions
    expected = frame_by_frame(writer, stored, indices, (0.3, 0.8), flip)
    out = np.full_like(expected, 7)
    writer.write_encoded(out, stored, indices, (0.3, 0.8), flip, FILE, VIDEO)
    np.testing.assert_array_equal(out, expected)


def test_frames_of_another_size_in_one_clip_are_each_cropped_for_their_own_size() -> None:
    """The crop window is placed once per frame size, not once per clip."""
    writer = ClipWriter(ClipSpec(clip_len=3, crop=(40, 40)))
    stored = [jpeg(60, 80, 1), jpeg(100, 90, 2), jpeg(60, 80, 3)]
    expected = frame_by_frame(writer, stored, [0, 1, 2], (0.9, 0.1), True)
    out = np.empty_like(expected)
    writer.write_encoded(out, stored, [0, 1, 2], (0.9, 0.1), True, FILE, VIDEO)
    np.testing.assert_array_equal(out, expected)


def write_clip(
    spec: ClipSpec,
    stored: list[np.ndarray],
    indices: list[int],
    size: tuple[int, int],
    crcs: list[int] | None = None,
) -> None:
    """``stored`` through ``write_encoded`` into output frames of ``size`` (height, width),
    centred crop offsets, no flip: for the tests of its errors."""
    out = np.empty((len(stored), *size, 3), np.uint8)
    ClipWriter(spec).write_encoded(out, stored, indices, (0.5, 0.5), False, FILE, VIDEO, crcs)


def test_an_undecodable_frame_is_a_frame_error_naming_its_frame_number() -> None:
    spec = ClipSpec(clip_len=3, resize=(32, 32), max_frame_pixels=None)
    stored = [jpeg(40, 40, 1), np.frombuffer(b"not an image at all", np.uint8), jpeg(40, 40, 2)]
    with pytest.raises(FrameError) as caught:
        write_clip(spec, stored, [10, 11, 12], (32, 32))
    assert (caught.value.file, caught.value.video, caught.value.frame) == (FILE, VIDEO, 11)


def test_a_frame_over_max_frame_pixels_is_refused_before_decoding_naming_its_frame() -> None:
    spec = ClipSpec(clip_len=2, resize=(32, 32), max_frame_pixels=50 * 50)
    with pytest.raises(FrameError, match="exceeds max_frame_pixels=2500") as caught:
        write_clip(spec, [jpeg(40, 40, 1), jpeg(60, 60, 2)], [4, 5], (32, 32))
    assert caught.value.frame == 5


def test_a_frame_failing_its_crc_is_refused_naming_its_frame() -> None:
    stored = [jpeg(40, 40, 1), jpeg(40, 40, 2)]
    crcs = [zlib.crc32(stored[0].tobytes()), zlib.crc32(stored[1].tobytes()) ^ 1]
    with pytest.raises(FrameError, match="CRC32") as caught:
        write_clip(ClipSpec(clip_len=2, resize=(32, 32)), stored, [8, 9], (32, 32), crcs)
    assert caught.value.frame == 9


def test_a_frame_smaller_than_the_crop_is_a_data_error_naming_its_frame() -> None:
    stored = [jpeg(60, 60, 1), jpeg(40, 60, 2)]
    with pytest.raises(DataError, match="smaller than the crop 50x50") as caught:
        write_clip(ClipSpec(clip_len=2, crop=(50, 50)), stored, [0, 1], (50, 50))
    assert caught.value.frame == 1


def test_a_frame_of_another_size_without_resize_or_crop_is_a_data_error() -> None:
    stored = [jpeg(40, 40, 1), jpeg(40, 48, 2)]
    with pytest.raises(DataError, match="set resize=") as caught:
        write_clip(ClipSpec(clip_len=2), stored, [2, 3], (40, 40))
    assert caught.value.frame == 3
