"""The interface every layout reader implements."""

from __future__ import annotations

import abc
from typing import ClassVar

import h5py
import numpy as np

from h5feed.common.layouts import LayoutSpec
from h5feed.producer import confine
from h5feed.producer.index_cache import VideoEntry
from h5feed.producer.layouts._common import read_labels, read_rows, video_name, video_number


class LayoutReader(abc.ABC):
    """Reads the videos of one open HDF5 file in one layout.

    Guarantees: :meth:`index` lists every video once, in a fixed order (the order the plan
    numbers them in), or raises :class:`~h5feed.common.errors.DataError` naming the file and
    video — a video is never left out silently. :meth:`read_frames` reads only the frames
    asked for. Not thread-safe (h5py serialises access anyway); create readers inside the
    process that uses them (h5py handles do not survive ``fork`` or pickling). With a data
    ``root``, every dataset goes through :meth:`readable` before it is read.
    """

    #: True: ``read_frames`` gives encoded images (JPEG bytes) to decode with OpenCV;
    #: False: decoded pixel arrays [H, W, C] (C = 3 RGB, or 1 / no axis: grayscale).
    encoded: ClassVar[bool] = True

    def __init__(self, h5: h5py.File, path: str, spec: LayoutSpec, root: str | None = None) -> None:
        self.h5 = h5
        self.path = path
        self.spec = spec
        self.root = root

    def readable(self, dataset: h5py.Dataset) -> h5py.Dataset:
        """``dataset``, once checked against the data root (virtual sources, external
        storage); PathRefused when reading it would leave the root."""
        if self.root is not None:
            confine.check_dataset(dataset, self.root)
        return dataset

    def close(self) -> None:
        self.h5.close()

    @abc.abstractmethod
    def index(self) -> list[VideoEntry]:
        """(video name, frame count >= 1, label) of every video, in plan order."""

    @abc.abstractmethod
    def read_frames(self, video: str, indices: list[int]) -> list[np.ndarray]:
        """The frames of ``video`` at ``indices`` (any order, repeats allowed), one each."""

    def frame_crcs(self, video: str, indices: list[int]) -> list[int] | None:
        """The stored CRC32 of each frame of ``video`` at ``indices``, or None when the file
        stores none (only the groups layout written by ``h5feed pack`` does)."""
        return None

    def pixel_size(self) -> tuple[int, int]:
        """(height, width) of every frame of a layout that stores pixels (``encoded`` False),
        from the dataset's shape, so it can be checked before a frame is read."""
        raise NotImplementedError(f"{type(self).__name__} stores encoded frames")


class OffsetsReader(LayoutReader):
    """A layout whose videos are runs of rows of one ``frames`` dataset cut by ``offsets``
    ([V + 1], video v = rows ``offsets[v] .. offsets[v+1] - 1``) with ``labels`` [V] named
    ``labels_name`` (None: every label is -1); videos are named by their zero-padded number.
    Subclasses set ``frames``, ``offsets``, ``labels_name`` and ``labels_hint``."""

    frames: h5py.Dataset
    offsets: np.ndarray
    labels_name: str | None
    labels_hint: ClassVar[str]  # how to say there are no labels, for the error message

    @property
    def num_videos(self) -> int:
        return len(self.offsets) - 1

    def index(self) -> list[VideoEntry]:
        count = self.num_videos
        labels = read_labels(
            self.h5, self.labels_name, count, self.path, self.labels_hint, self.readable
        )
        lengths = np.diff(self.offsets)
        return [(video_name(v), int(lengths[v]), int(labels[v])) for v in range(count)]

    def read_frames(self, video: str, indices: list[int]) -> list[np.ndarray]:
        base = int(self.offsets[video_number(video, self.num_videos, self.path)])
        return read_rows(self.frames, [base + i for i in indices])
