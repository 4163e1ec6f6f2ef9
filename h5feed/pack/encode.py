"""Turning one source video into its HDF5 group, in a pool process.

:func:`encode_video` reads a video file with OpenCV (``cv2.VideoCapture``, frames read until
``read()`` returns False: the container's frame count is not trusted) or an image folder, and
writes the group of the default layout into a small HDF5 file of its own: a 1-D dataset
``frames`` of ``vlen uint8`` JPEG bytes, beside it ``crc32`` (uint32 [frames]: ``zlib.crc32``
of each frame's bytes, which readers verify), the ``label`` and ``source`` attributes. The main
process copies that group into its shard (``h5py`` object copy, no frame passes through
Python there), so memory stays bounded by one video's batch of frames per process, whatever
the video's length.

Frame encoding: decoded frames (every video frame, images that are not JPEG) are encoded as
JPEG at ``quality``; an image whose file is a JPEG (``.jpg``/``.jpeg`` and JPEG bytes) is stored
byte for byte, after checking that OpenCV decodes it.

Errors (cannot open, no readable frame, an undecodable image) come back as a message naming
the file (and frame), not as an exception, so that the caller decides between stopping and
skipping.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
import zlib
from collections.abc import Iterator, Sequence

import cv2
import h5py
import numpy as np
from numpy.typing import NDArray

from h5feed.common.layouts import CRC_DATASET
from h5feed.pack.sources import JPEG_EXTENSIONS

__all__ = ["EncodeTask", "Encoded", "encode_video", "init_worker"]

_JPEG_MAGIC = b"\xff\xd8\xff"
_WRITE_BATCH_FRAMES = 256  # frames held in memory before they are appended to the dataset
_CHUNK_FRAMES = 256  # elements per HDF5 chunk of the growing frames dataset
_PARENT_CHECK_S = 0.5
_INTERRUPTED_STATUS = 130
_ORPHANED_STATUS = 1


@dataclasses.dataclass(frozen=True, slots=True)
class EncodeTask:
    """What one pool process packs: plain values only (they cross a process boundary)."""

    index: int
    name: str
    label: int
    source: str  # relative to root, as recorded in the manifest
    root: str
    is_images: bool
    frames: tuple[str, ...]  # image files relative to root; empty for a video file
    quality: int
    out_path: str  # the HDF5 file to write the group into


@dataclasses.dataclass(frozen=True, slots=True)
class Encoded:
    """The outcome of one :class:`EncodeTask`: ``error`` is None on success."""

    index: int
    frames: int
    payload_bytes: int  # sum of the JPEG byte lengths
    header_frames: int  # frame count the container claims (-1: unknown or an image folder)
    error: str | None = None


def init_worker(parent_pid: int) -> None:
    """Pool initializer. Ctrl-C (SIGINT to the whole process group) ends the process at once
    and quietly: the main process handles it and stops the pool. The process exits within
    :data:`_PARENT_CHECK_S` of its parent dying, even by SIGKILL (a pool worker would
    otherwise wait forever on its task queue, whose write end it holds itself). OpenCV runs
    single-threaded, as the parallelism comes from the processes."""
    signal.signal(signal.SIGINT, lambda *_: os._exit(_INTERRUPTED_STATUS))
    cv2.setNumThreads(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_CHECK_S)
        os._exit(_ORPHANED_STATUS)

    threading.Thread(target=watch, name="h5feed-pack-parent-watch", daemon=True).start()


class _BadSource(Exception):
    pass


def _video_frames(path: str, quality: int) -> Iterator[NDArray[np.uint8]]:
    capture = cv2.VideoCapture(path)
    try:
        if not capture.isOpened():
            raise _BadSource("OpenCV cannot open this video")
        params = [cv2.IMWRITE_JPEG_QUALITY, quality]
        while True:
            ok, image = capture.read()
            if not ok:
                return
            ok, encoded = cv2.imencode(".jpg", image, params)
            if not ok:
                raise _BadSource("OpenCV could not encode a frame as JPEG")
            yield encoded.reshape(-1)
    finally:
        capture.release()


def _header_frames(path: str) -> int:
    capture = cv2.VideoCapture(path)
    try:
        count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) if capture.isOpened() else -1
    finally:
        capture.release()
    return count if count > 0 else -1


def _image_frames(root: str, frames: tuple[str, ...], quality: int) -> Iterator[NDArray[np.uint8]]:
    params = [cv2.IMWRITE_JPEG_QUALITY, quality]
    for number, relative in enumerate(frames):
        path = os.path.join(root, relative)
        with open(path, "rb") as handle:
            data = handle.read()
        buffer = np.frombuffer(data, dtype=np.uint8)
        image = cv2.imdecode(buffer, cv2.IMREAD_COLOR)
        if image is None:
            raise _BadSource(f"frame {number} ({relative!r}) is not an image OpenCV decodes")
        keep = os.path.splitext(path)[1].lower() in JPEG_EXTENSIONS and data[:3] == _JPEG_MAGIC
        if keep:
            yield buffer
            continue
        ok, encoded = cv2.imencode(".jpg", image, params)
        if not ok:
            raise _BadSource(f"frame {number} ({relative!r}): OpenCV could not encode it as JPEG")
        yield encoded.reshape(-1)


def _append(dataset: h5py.Dataset, batch: list[NDArray[np.uint8]]) -> None:
    start = dataset.shape[0]
    dataset.resize((start + len(batch),))
    write_frames(dataset, start, batch)


def write_frames(dataset: h5py.Dataset, start: int, frames: Sequence[NDArray[np.uint8]]) -> None:
    """``frames`` (1-D uint8 arrays) into rows ``start``.. of the variable-length ``dataset``.

    h5py stacks the arrays it is given into one 2-D array when they are all of one length,
    and then refuses it ("Can't broadcast (n, length) -> (n,)"): a still video's JPEGs, or a
    folder of copies of one image, may all be one size. Those are written one row at a time
    (one frame alone too: h5py would take it for a 2-D shape)."""
    if len({len(frame) for frame in frames}) <= 1:
        for i, frame in enumerate(frames):
            dataset[start + i] = frame
        return
    elements = np.empty(len(frames), dtype=object)
    for i, frame in enumerate(frames):
        elements[i] = frame
    dataset[start : start + len(frames)] = elements


def encode_video(task: EncodeTask) -> Encoded:
    """Write the group of ``task`` into ``task.out_path``; return its counts or its error."""
    path = os.path.join(task.root, task.source)
    header = -1 if task.is_images else _header_frames(path)
    if task.is_images:
        frames = _image_frames(task.root, task.frames, task.quality)
    else:
        frames = _video_frames(path, task.quality)
    count = payload = 0
    try:
        with h5py.File(task.out_path, "w") as out:
            group = out.create_group(task.name)
            dataset = group.create_dataset(
                "frames",
                shape=(0,),
                maxshape=(None,),
                chunks=(_CHUNK_FRAMES,),
                dtype=h5py.vlen_dtype(np.uint8),
            )
            group.attrs["label"] = np.int64(task.label)
            group.attrs["source"] = task.source
            batch: list[NDArray[np.uint8]] = []
            crcs: list[int] = []  # 4 bytes a frame: a 10^6-frame video holds 4 MB here
            for frame in frames:
                batch.append(frame)
                crcs.append(zlib.crc32(frame.data))
                count += 1
                payload += frame.size
                if len(batch) == _WRITE_BATCH_FRAMES:
                    _append(dataset, batch)
                    batch = []
            if batch:
                _append(dataset, batch)
            group.create_dataset(CRC_DATASET, data=np.asarray(crcs, np.uint32), dtype=np.uint32)
    except (_BadSource, cv2.error, OSError) as exc:
        where = f" after {count} frames" if count and not task.is_images else ""
        return Encoded(task.index, count, payload, header, f"{exc}{where}")
    if count == 0:
        what = "the folder holds no image" if task.is_images else "OpenCV reads no frame from it"
        return Encoded(task.index, 0, 0, header, f"no frame: {what}")
    return Encoded(task.index, count, payload, header)
