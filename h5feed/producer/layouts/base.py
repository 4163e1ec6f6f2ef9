"""The interface every layout reader implements."""

from __future__ import annotations

import abc
from typing import ClassVar

import h5py
import numpy as np

from h5feed.common.layouts import LayoutSpec
from h5feed.producer.index_cache import VideoEntry


class LayoutReader(abc.ABC):
    """Reads the videos of one open HDF5 file in one layout.

    Guarantees: :meth:`index` lists every video once, in a fixed order (the order the plan
    numbers them in), or raises :class:`~h5feed.common.errors.DataError` naming the file and
    video — a video is never left out silently. :meth:`read_frames` reads only the frames
    asked for. Not thread-safe (h5py serialises access anyway); create readers inside the
    process that uses them (h5py handles do not survive ``fork`` or pickling).
    """

    #: True: ``read_frames`` gives encoded images (JPEG bytes) to decode with OpenCV;
    #: False: decoded pixel arrays [H, W, C] (C = 3 RGB, or 1 / no axis: grayscale).
    encoded: ClassVar[bool] = True

    def __init__(self, h5: h5py.File, path: str, spec: LayoutSpec) -> None:
        self.h5 = h5
        self.path = path
        self.spec = spec

    def close(self) -> None:
        self.h5.close()

    @abc.abstractmethod
    def index(self) -> list[VideoEntry]:
        """(video name, frame count >= 1, label) of every video, in plan order."""

    @abc.abstractmethod
    def read_frames(self, video: str, indices: list[int]) -> list[np.ndarray]:
        """The frames of ``video`` at ``indices`` (any order, repeats allowed), one each."""
