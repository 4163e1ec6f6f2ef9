"""Fixed-length rows of opaque encoded frames: ``frames`` [V, T] of ``|V<n>`` (each a JPEG
padded with zero bytes to n), ``labels`` [V], optional ``lengths`` [V]. Keras ``Sequence``
loaders write this form (``np.void(jpeg.ljust(n, b"\\0"))``, videos padded to T frames)."""

from __future__ import annotations

import h5py
import numpy as np

from h5feed.common.errors import DataError
from h5feed.common.layouts import Blobs
from h5feed.producer.files.index_cache import VideoEntry
from h5feed.producer.files.read_limits import DEFAULT_BOUNDS, DatasetBounds
from h5feed.producer.layouts._common import (
    dataset_at,
    read_labels,
    video_name,
    video_number,
)
from h5feed.producer.layouts.base import LayoutReader

#: The largest blob (one padded frame) a file may declare: a read takes whole blobs.
MAX_BLOB_BYTES = 64 << 20
#: The most videos a file may declare (``labels`` and ``lengths`` are read whole: 8 MB each).
MAX_VIDEOS = 1_000_000
#: The largest row (T blobs) read whole to count a video's frames without ``lengths``.
MAX_SCANNED_ROW_BYTES = 256 << 20


class BlobsReader(LayoutReader):
    """Video v is row v of ``frames``: its first ``lengths[v]`` blobs when the file has a
    ``lengths`` dataset (integers in 1..T), else its leading non-empty blobs (a blob of zero
    bytes only is padding; a non-empty blob after padding is a DataError naming the video,
    as is a video of padding only). A blob is decoded without its trailing zero bytes (a
    JPEG ends with FF D9, a PNG with its IEND CRC: neither ends with a zero byte). Labels are
    ``labels`` [V]; names the number zero-padded to 6 digits (``"000012"``).

    Checked when the file is opened: ``frames`` is 2-D opaque (``|V<n>``, n at most
    :data:`MAX_BLOB_BYTES`) with 1 <= V <= :data:`MAX_VIDEOS`, T >= 1. Without ``lengths``,
    indexing reads every row once (one row at a time, each at most
    :data:`MAX_SCANNED_ROW_BYTES`, else a DataError asking for ``lengths``); with it,
    nothing but ``lengths`` and ``labels``. Every dataset goes through :meth:`readable`.
    """

    spec: Blobs

    def __init__(
        self,
        h5: h5py.File,
        path: str,
        spec: Blobs,
        root: str | None = None,
        bounds: DatasetBounds = DEFAULT_BOUNDS,
    ) -> None:
        super().__init__(h5, path, spec, root, bounds)
        frames = dataset_at(h5, spec.frames, path, "name it with h5feed.layouts.Blobs(frames=...)")
        self.frames = self.readable(frames, whole=False)
        dtype, shape = self.frames.dtype, self.frames.shape
        if dtype.kind != "V" or dtype.fields is not None or len(shape) != 2 or 0 in shape:
            raise DataError(
                f"{spec.frames!r} must be opaque blobs [videos, T] (|V<n>, one zero-padded "
                f"encoded frame each), got {dtype} {shape}",
                file=path,
            )
        if dtype.itemsize > MAX_BLOB_BYTES:
            raise DataError(
                f"{spec.frames!r} declares blobs of {dtype.itemsize} bytes, over the limit of "
                f"{MAX_BLOB_BYTES}",
                file=path,
            )
        self.num_videos, self.row_frames = int(shape[0]), int(shape[1])
        if self.num_videos > MAX_VIDEOS:
            raise DataError(
                f"{spec.frames!r} declares {self.num_videos} videos, over the limit of "
                f"{MAX_VIDEOS}",
                file=path,
            )
        self._lengths: np.ndarray | None = None

    def lengths(self) -> np.ndarray:
        """Each video's frame count (see the class docstring), read once."""
        if self._lengths is None:
            name = self.spec.lengths
            if name is not None and name in self.h5:
                self._lengths = self._stored_lengths(name)
            else:
                self._lengths = np.array(
                    [self._leading_blobs(v) for v in range(self.num_videos)], np.int64
                )
        return self._lengths

    def _stored_lengths(self, name: str) -> np.ndarray:
        dataset = dataset_at(self.h5, name, self.path, "or Blobs(lengths=None)")
        self.readable_whole(dataset)
        if dataset.shape != (self.num_videos,) or dataset.dtype.kind not in "iu":
            raise DataError(
                f"{name!r} must be {self.num_videos} integers (frames per video), got "
                f"{dataset.dtype} {dataset.shape}",
                file=self.path,
            )
        lengths = np.asarray(dataset[()], np.int64)
        bad = np.flatnonzero((lengths < 1) | (lengths > self.row_frames))
        if len(bad):
            v = int(bad[0])
            raise DataError(
                f"{name!r} says {int(lengths[v])} frames, not in 1..{self.row_frames}",
                file=self.path,
                video=video_name(v),
            )
        return lengths

    def _leading_blobs(self, v: int) -> int:
        row_bytes = self.row_frames * self.frames.dtype.itemsize
        if row_bytes > MAX_SCANNED_ROW_BYTES:
            raise DataError(
                f"counting the frames of a video reads its row of {row_bytes} bytes, over the "
                f"limit of {MAX_SCANNED_ROW_BYTES}: give the frame counts with a lengths "
                "dataset (Blobs(lengths=...))",
                file=self.path,
                video=video_name(v),
            )
        row = np.asarray(self.frames[v]).view(np.uint8).reshape(self.row_frames, -1)
        empty = np.logical_not(row.any(axis=1))
        count = int(np.argmax(empty)) if empty.any() else self.row_frames
        if count == 0:
            raise DataError("video has no frames (its first blob is empty)",
                            file=self.path, video=video_name(v))  # fmt: skip
        if empty[count:].sum() != self.row_frames - count:
            raise DataError(
                f"blob {count} is empty (padding) but a later one is not: padding must come "
                f"last; give the frame counts with a lengths dataset (Blobs(lengths=...))",
                file=self.path,
                video=video_name(v),
            )
        return count

    def index(self) -> list[VideoEntry]:
        labels = read_labels(
            self.h5, self.spec.labels, self.num_videos, self.path, "Blobs(labels=None)",
            self.readable_whole,
        )  # fmt: skip
        lengths = self.lengths()
        return [(video_name(v), int(lengths[v]), int(labels[v])) for v in range(self.num_videos)]

    def read_frames(self, video: str, indices: list[int]) -> list[np.ndarray]:
        v = video_number(video, self.num_videos, self.path)
        if max(indices) >= self.row_frames or min(indices) < 0:  # the index's counts are less
            raise DataError(f"frames {indices} of a row of {self.row_frames}",
                            file=self.path, video=video)  # fmt: skip
        distinct = sorted(set(indices))
        blobs = np.asarray(self.frames[v, distinct]).view(np.uint8).reshape(len(distinct), -1)
        read = {i: np.trim_zeros(blobs[k], "b") for k, i in enumerate(distinct)}
        return [read[i] for i in indices]
