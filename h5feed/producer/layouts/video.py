"""One video per file (the common UCF101/Kinetics HDF5 form): the root dataset ``frames``
holds every frame, encoded (vlen uint8 [T]) or as pixels ([T, H, W, C])."""

from __future__ import annotations

import os

import h5py
import numpy as np

from h5feed.common.errors import DataError
from h5feed.common.layouts import DIRECTORY, Video
from h5feed.producer.files.clip_bytes import ClipBytes
from h5feed.producer.files.index_cache import VideoEntry
from h5feed.producer.files.read_limits import DEFAULT_BOUNDS, DatasetBounds
from h5feed.producer.layouts import pixels
from h5feed.producer.layouts._common import dataset_at, label_attribute
from h5feed.producer.layouts.base import LayoutReader


def open_video(
    h5: h5py.File,
    path: str,
    spec: Video,
    root: str | None = None,
    bounds: DatasetBounds = DEFAULT_BOUNDS,
) -> LayoutReader:
    """The reader of a one-video file: encoded frames (a vlen dataset) or pixels."""
    dataset = dataset_at(h5, spec.frames, path, "name it with h5feed.layouts.Video(frames=...)")
    if h5py.check_vlen_dtype(dataset.dtype) is not None:
        return EncodedVideoReader(h5, path, spec, root, bounds, dataset)
    return PixelVideoReader(h5, path, spec, root, bounds, dataset)


class _VideoReader(LayoutReader):
    """The file's one video: named after the file (its name without the suffix), with
    ``frames.shape[0]`` >= 1 frames (DataError naming the file else).

    Its label: with ``label="directory"`` the trainer sets it from the file's parent
    directory and ``classes`` before any worker starts (the reader says -1: the path a
    worker opens may be resolved, its directory renamed by a link); another name is an
    integer attribute of the dataset, else of the file (DataError naming the file when
    neither has it); None is -1.
    """

    spec: Video

    def __init__(
        self,
        h5: h5py.File,
        path: str,
        spec: Video,
        root: str | None = None,
        bounds: DatasetBounds = DEFAULT_BOUNDS,
        dataset: h5py.Dataset | None = None,
    ) -> None:
        """``dataset``: ``spec.frames`` of ``h5``, if looked up already."""
        super().__init__(h5, path, spec, root, bounds)
        if dataset is None:
            dataset = dataset_at(h5, spec.frames, path, "name it with Video(frames=...)")
        self.frames = self.readable(dataset, whole=False)
        self.name = os.path.splitext(os.path.basename(path))[0] or spec.frames
        if not self.frames.shape or self.frames.shape[0] == 0:
            raise DataError(
                f"{spec.frames!r} holds no frame (shape {self.frames.shape})",
                file=path,
                video=self.name,
            )
        self.check_frames(spec, path)

    def check_frames(self, spec: Video, path: str) -> None:
        """Refuse a ``frames`` dataset this reader cannot read (DataError naming the file)."""
        raise NotImplementedError

    def label(self) -> int:
        name = self.spec.label
        if name is None or name == DIRECTORY or not isinstance(name, str):
            return -1  # none, or the trainer's to decide (the directory, the user's mapping)
        for owner in (self.frames, self.h5):
            if name in owner.attrs:
                return label_attribute(owner, name, self.path, self.name)
        raise DataError(
            f"no {name!r} attribute on {self.spec.frames!r} or on the file (give "
            f"h5feed.layouts.Video(label=...): an attribute, {DIRECTORY!r} or None)",
            file=self.path,
            video=self.name,
        )

    def index(self) -> list[VideoEntry]:
        return [(self.name, int(self.frames.shape[0]), self.label())]

    def clip_bytes(self, video: str, indices: list[int]) -> ClipBytes | None:
        return self.planned(self.frames, min(indices), max(indices))

    def rows(self, video: str, indices: list[int]) -> list[np.ndarray]:
        if video != self.name:
            raise DataError(f"no video {video!r} in this file (it holds {self.name!r})",
                            file=self.path, video=video)  # fmt: skip
        return self.elements(self.frames, indices)


class EncodedVideoReader(_VideoReader):
    """``frames`` is 1-D variable-length uint8: one encoded image (JPEG) per element."""

    encoded = True

    def check_frames(self, spec: Video, path: str) -> None:
        if self.frames.ndim != 1 or h5py.check_vlen_dtype(self.frames.dtype) != np.uint8:
            raise DataError(
                f"{spec.frames!r} must be 1-D variable-length uint8 (one encoded frame per "
                f"element) or pixels [T, H, W, C], got {self.frames.dtype} {self.frames.shape}",
                file=path,
            )
        if spec.scale is not None or spec.channels != "rgb":
            raise DataError(
                "scale and channels describe stored pixels; these frames are encoded (a JPEG "
                "decodes to RGB): leave them at their defaults",
                file=path,
            )

    def read_frames(self, video: str, indices: list[int]) -> list[np.ndarray]:
        return self.rows(video, indices)


class PixelVideoReader(_VideoReader):
    """``frames`` is pixels [T, H, W, C] (C = 1 or 3) or [T, H, W]: uint8, or float with a
    declared ``scale``, stored in ``channels`` order (see
    :mod:`~h5feed.producer.layouts.pixels`)."""

    encoded = False

    def check_frames(self, spec: Video, path: str) -> None:
        pixels.check_dataset(self.frames, 1, spec.scale, "h5feed.layouts.Video", path)

    def read_frames(self, video: str, indices: list[int]) -> list[np.ndarray]:
        stored = self.rows(video, indices)
        if self.spec.scale is None and self.spec.channels == "rgb":
            return stored
        return pixels.to_rgb(
            stored, self.spec.scale, self.spec.channels, (self.path, video, indices)
        )

    def pixel_size(self) -> tuple[int, int]:
        return int(self.frames.shape[1]), int(self.frames.shape[2])
