"""Turning encoded frames into preprocessed clips, written straight into the output array.

Per frame: ``cv2.imdecode`` (BGR; with ``reduced_decode``, straight to 1/2, 1/4 or 1/8 of the
stored size when that is still at least ``resize``) -> ``cv2.resize`` to ``resize`` with
``INTER_LINEAR`` -> crop at the planned offset -> BGR to RGB written into the output slice ->
horizontal flip in place when planned. Frames stored as pixels (the raw layout) skip
``imdecode`` and the BGR swap: stored RGB comes out RGB; grayscale (one channel) comes out as
three equal channels. OpenCV runs single-threaded here (``cv2.setNumThreads(1)``):
parallelism comes from worker processes, and threads inside each would only fight over the
same cores.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import cv2
import numpy as np

from h5feed.common.config import ClipSpec
from h5feed.common.config import crop_offset as crop_offset  # moved to common: the lineage's too
from h5feed.common.errors import DataError, FrameError

cv2.setNumThreads(1)


#: (factor, imdecode flag) of libjpeg's DCT scaling, largest reduction first.
_REDUCTIONS = (
    (8, cv2.IMREAD_REDUCED_COLOR_8),
    (4, cv2.IMREAD_REDUCED_COLOR_4),
    (2, cv2.IMREAD_REDUCED_COLOR_2),
)
#: JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic...): they hold
#: the image size. Not C4 (DHT), C8 (JPG), CC (DAC).
_SOF_MARKERS = frozenset(
    {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
)
_STANDALONE_MARKERS = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM, RSTn: no length field
#: A segment's start: 0xFF, the marker, the big-endian length (of a segment that has one).
_SEGMENT = struct.Struct(">BBH")
#: A start-of-frame header's height and width (5 bytes after its marker's 0xFF).
_FRAME_SIZE = struct.Struct(">HH")


def _bytes_view(encoded: np.ndarray | bytes) -> memoryview:
    """A flat byte view of an encoded frame, without copying it. Called for every frame:
    ``bytes`` and a C-contiguous array of bytes (what h5py returns) are cast as they are;
    anything else is converted to contiguous uint8 first, value by value."""
    view = encoded.data if isinstance(encoded, np.ndarray) else memoryview(encoded)
    if view.itemsize == 1 and view.c_contiguous:
        return view.cast("B")
    return np.ascontiguousarray(encoded, dtype=np.uint8).reshape(-1).data


def jpeg_size(encoded: np.ndarray | bytes) -> tuple[int, int] | None:
    """(height, width) from a JPEG's start-of-frame header, without decoding; None when the
    data is not a JPEG or its header is cut short (imdecode then reports it properly). The
    scan jumps from segment to segment (EXIF, ICC...), so it reads a few bytes per segment
    and copies nothing, however far the frame header lies. Called for every frame (the
    ``max_frame_pixels`` check), so each segment is one ``unpack_from``: no slices."""
    data = _bytes_view(encoded)
    size = len(data)
    if size < 2 or data[0] != 0xFF or data[1] != 0xD8:
        return None
    i = 2
    while i + 4 <= size:
        prefix, marker, length = _SEGMENT.unpack_from(data, i)
        if prefix != 0xFF:
            return None
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _STANDALONE_MARKERS:
            i += 2
            continue
        if marker in _SOF_MARKERS:
            if i + 9 > size:
                return None
            height, width = _FRAME_SIZE.unpack_from(data, i + 5)
            return height, width
        if marker == 0xDA:  # start of scan without a frame header: not a valid JPEG
            return None
        i += 2 + length
    return None


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(encoded: np.ndarray | bytes) -> tuple[int, int] | None:
    """(height, width) from a PNG's IHDR chunk (always its first), or None if not a PNG."""
    data = _bytes_view(encoded)
    if len(data) < 24 or bytes(data[:8]) != _PNG_SIGNATURE or bytes(data[12:16]) != b"IHDR":
        return None
    return int.from_bytes(data[20:24], "big"), int.from_bytes(data[16:20], "big")


def check_frame_pixels(
    size: tuple[int, int] | None, max_pixels: int, file: str, video: str, frame: int
) -> None:
    """Raise FrameError unless ``size`` (height, width, as the frame's header or dataset says)
    is known and at most ``max_pixels`` pixels (``max_frame_pixels``); called before the
    frame is decoded or read, so a forged header never costs its claimed memory."""
    if size is None:
        raise FrameError(
            "frame is neither a JPEG nor a PNG with a whole header, so its size cannot be "
            f"checked against max_frame_pixels={max_pixels} before decoding it (set "
            "max_frame_pixels=None to decode any format OpenCV reads)",
            file=file,
            video=video,
            frame=frame,
        )
    if size[0] * size[1] > max_pixels:
        raise FrameError(
            f"frame of {size[1]}x{size[0]} ({size[0] * size[1]} pixels) exceeds "
            f"max_frame_pixels={max_pixels}",
            file=file,
            video=video,
            frame=frame,
        )


def reduced_flag(stored: tuple[int, int], target: tuple[int, int]) -> int:
    """The imdecode flag that decodes ``stored`` (height, width) to the smallest of 1/8, 1/4
    and 1/2 of it that is still at least ``target`` in both dimensions (libjpeg rounds up),
    else ``cv2.IMREAD_COLOR`` (a full decode)."""
    for factor, flag in _REDUCTIONS:
        if -(-stored[0] // factor) >= target[0] and -(-stored[1] // factor) >= target[1]:
            return flag
    return cv2.IMREAD_COLOR


def decode_frame(
    encoded: np.ndarray,
    file: str,
    video: str,
    frame: int,
    reduce_to: tuple[int, int] | None = None,
    max_pixels: int | None = None,
) -> np.ndarray:
    """Decode one JPEG (or any format OpenCV reads) to a BGR uint8 image, or raise FrameError.

    With ``reduce_to`` (height, width), a JPEG at least twice that size is decoded straight
    to a reduced size no smaller than it (see :func:`reduced_flag`); other data in full.
    With ``max_pixels``, only a JPEG or PNG whose header says at most that many pixels is
    decoded (:func:`check_frame_pixels`, before ``imdecode`` allocates anything)."""
    flag = cv2.IMREAD_COLOR
    stored = jpeg_size(encoded) if reduce_to is not None or max_pixels is not None else None
    if max_pixels is not None:
        check_frame_pixels(stored or png_size(encoded), max_pixels, file, video, frame)
    if reduce_to is not None and stored is not None:
        flag = reduced_flag(stored, reduce_to)
    image = cv2.imdecode(np.asarray(encoded, dtype=np.uint8), flag)
    if image is None:
        raise FrameError(
            f"frame is not a decodable image ({len(encoded)} bytes)",
            file=file,
            video=video,
            frame=frame,
        )
    return image


def check_crc(encoded: np.ndarray, expected: int, file: str, video: str, frame: int) -> None:
    """Raise FrameError unless ``zlib.crc32`` of the stored bytes is ``expected`` (the CRC32
    ``h5feed pack`` stores beside each frame): a flipped bit or a truncated write that would
    still decode, to garbage, is caught here, before decoding."""
    actual = zlib.crc32(_bytes_view(encoded))
    if actual != expected:
        raise FrameError(
            f"frame fails its CRC32 check ({len(encoded)} bytes, CRC32 {actual:08x}, stored "
            f"{expected:08x}): the stored bytes are corrupt",
            file=file,
            video=video,
            frame=frame,
        )


class ClipWriter:
    """Writes clips of one :class:`ClipSpec` into rows of a batch array.

    The output frame size is ``crop`` or else ``resize``; with neither, it is the stored size of
    the first frame decoded, and every later frame must have that size (else DataError).
    """

    def __init__(self, spec: ClipSpec) -> None:
        self.spec = spec
        self._resize_wh = (spec.resize[1], spec.resize[0]) if spec.resize else None
        #: what :func:`decode_frame` may reduce to (``reduced_decode``): the resize target
        self.reduce_to = spec.resize if spec.reduced_decode else None
        #: the cap on a stored frame's pixels (``max_frame_pixels``), checked before decoding
        self.max_pixels = spec.max_frame_pixels

    def frame_shape(self, first_frame: np.ndarray) -> tuple[int, int]:
        """Output (height, width), given the first decoded frame (used when nothing is set)."""
        height, width = self.spec.frame_shape
        if height is not None and width is not None:
            return height, width
        return int(first_frame.shape[0]), int(first_frame.shape[1])

    def write(
        self,
        out: np.ndarray,
        image: np.ndarray,
        offsets: tuple[float, float],
        flip: bool,
        where: tuple[str, str, int],
        rgb: bool = False,
    ) -> None:
        """Preprocess one decoded frame into ``out`` ([H, W, 3] uint8, C-contiguous).

        ``image`` is BGR [h, w, 3] as ``cv2.imdecode`` gives it, or with ``rgb`` RGB pixels
        as stored; [h, w, 1] or [h, w] is grayscale either way (written as 3 equal channels).
        """
        if self._resize_wh is not None:
            image = cv2.resize(image, self._resize_wh, interpolation=cv2.INTER_LINEAR)
        top, bottom, left, right = self._window(image.shape, out.shape, offsets, where)
        image = image[top:bottom, left:right]
        if image.ndim == 3 and image.shape[2] == 1:
            image = image[:, :, 0]  # cv2.resize drops a single channel axis; crops keep it
        if image.ndim == 2:
            cv2.cvtColor(image, cv2.COLOR_GRAY2RGB, dst=out)
        elif rgb:
            np.copyto(out, image)
        else:
            cv2.cvtColor(image, cv2.COLOR_BGR2RGB, dst=out)
        if flip:
            cv2.flip(out, 1, dst=out)

    def write_encoded(
        self,
        out: np.ndarray,
        stored: Sequence[np.ndarray],
        indices: Sequence[int],
        offsets: tuple[float, float],
        flip: bool,
        file: str,
        video: str,
        crcs: Sequence[int] | None = None,
    ) -> None:
        """Decode and preprocess the encoded frames ``stored`` (at ``indices`` of ``video``)
        into ``out`` ([T, H, W, 3] uint8, C-contiguous): per frame what :func:`check_crc`
        (with ``crcs``), :func:`decode_frame` and :meth:`write` do, with the same errors
        naming the frame, in one loop. Why one loop: this is a worker's hot path, and the
        crop window, the same for every frame of one size, is placed once per size."""
        reduce_to, max_pixels, resize_wh = self.reduce_to, self.max_pixels, self._resize_wh
        resize, cvt_color, flip_image = cv2.resize, cv2.cvtColor, cv2.flip
        seen: tuple[int, ...] = ()  # the (height, width) the window was placed for
        top = bottom = left = right = 0
        for t, data in enumerate(stored):
            if crcs is not None:  # before decoding: a flipped bit may still decode
                check_crc(data, crcs[t], file, video, indices[t])
            image = decode_frame(data, file, video, indices[t], reduce_to, max_pixels)
            if resize_wh is not None:
                image = resize(image, resize_wh, interpolation=cv2.INTER_LINEAR)
            if image.shape[:2] != seen:
                seen = image.shape[:2]
                where = (file, video, indices[t])
                top, bottom, left, right = self._window(seen, out.shape[1:], offsets, where)
            target = out[t]  # imdecode gives 3 channels (IMREAD_COLOR), BGR
            cvt_color(image[top:bottom, left:right], cv2.COLOR_BGR2RGB, dst=target)
            if flip:
                flip_image(target, 1, dst=target)

    def _window(
        self,
        shape: tuple[int, ...],
        out_shape: tuple[int, ...],
        offsets: tuple[float, float],
        where: tuple[str, str, int],
    ) -> tuple[int, int, int, int]:
        """(top, bottom, left, right) of the crop of an image of ``shape`` (height, width
        first) for an output frame of ``out_shape``: the planned crop, or the whole image,
        which must then be the output's size. DataError naming the frame otherwise."""
        height, width = out_shape[0], out_shape[1]
        if self.spec.crop is not None:
            if shape[0] < height or shape[1] < width:
                file, video, frame = where
                raise DataError(
                    f"frame of {shape[1]}x{shape[0]} is smaller than the crop {width}x{height}",
                    file=file,
                    video=video,
                    frame=frame,
                )
            top = crop_offset(shape[0], height, offsets[0], self.spec.crop_mode)
            left = crop_offset(shape[1], width, offsets[1], self.spec.crop_mode)
            return top, top + height, left, left + width
        if shape[0] != height or shape[1] != width:
            file, video, frame = where
            raise DataError(
                f"frame is {shape[1]}x{shape[0]} but this batch's frames are "
                f"{width}x{height}; set resize= to batch videos of different sizes",
                file=file,
                video=video,
                frame=frame,
            )
        return 0, height, 0, width
