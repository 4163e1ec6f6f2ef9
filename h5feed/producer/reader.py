"""Reading videos from one HDF5 file in the default layout.

Default layout: one top-level group per video; in it a 1-D dataset ``frames_key`` of
variable-length uint8 arrays (``h5py.vlen_dtype(np.uint8)``), one encoded JPEG per element; and
an integer attribute ``label_key`` on the group.

A :class:`VideoFile` opens its file once and keeps it open; create it inside the process that
uses it (h5py handles do not survive ``fork`` or pickling).
"""

from __future__ import annotations

import itertools

import h5py
import numpy as np

from h5feed.common.errors import DataError
from h5feed.producer.index_cache import VideoEntry


class VideoFile:
    """An open HDF5 file of videos. Not thread-safe (h5py serialises access anyway)."""

    def __init__(self, path: str, frames_key: str = "frames", label_key: str | None = "label"):
        self.path = path
        self.frames_key = frames_key
        self.label_key = label_key
        try:
            self._h5 = h5py.File(path, "r")
        except OSError as exc:
            raise DataError(f"cannot open HDF5 file: {exc}", file=path) from exc
        self._datasets: dict[str, h5py.Dataset] = {}

    def close(self) -> None:
        self._h5.close()

    def index(self) -> list[VideoEntry]:
        """(name, frame count, label) of every video, in sorted group-name order.

        Top-level groups without a ``frames_key`` dataset are not videos and are left out. A
        video with no frames, a missing label or a file with no video at all raises
        :class:`DataError` (it would otherwise vanish from every epoch without a word).
        """
        videos: list[VideoEntry] = []
        for name in sorted(self._h5.keys()):
            group = self._h5[name]
            if not isinstance(group, h5py.Group) or self.frames_key not in group:
                continue
            frames = group[self.frames_key]
            if not isinstance(frames, h5py.Dataset) or frames.ndim != 1:
                raise DataError(
                    f"{self.frames_key!r} must be a 1-D dataset of encoded frames",
                    file=self.path,
                    video=name,
                )
            if frames.shape[0] == 0:
                raise DataError("video has no frames", file=self.path, video=name)
            videos.append((name, int(frames.shape[0]), self._label(group, name)))
        if not videos:
            raise DataError(
                f"no videos found: expected top-level groups holding a {self.frames_key!r} "
                f"dataset; the file has {sorted(self._h5.keys())[:10]}",
                file=self.path,
            )
        return videos

    def _label(self, group: h5py.Group, name: str) -> int:
        if self.label_key is None:
            return -1
        if self.label_key not in group.attrs:
            raise DataError(
                f"video has no {self.label_key!r} attribute", file=self.path, video=name
            )
        value = np.asarray(group.attrs[self.label_key])
        if value.size != 1 or not np.issubdtype(value.dtype, np.integer):
            raise DataError(
                f"label {self.label_key!r} must be one integer, got {value!r}",
                file=self.path,
                video=name,
            )
        return int(value.reshape(()))

    def read_frames(self, video: str, indices: list[int]) -> list[np.ndarray]:
        """The encoded frames at ``indices`` (any order, repeats allowed), one array each.

        Reads only those frames: one slice read when the indices are evenly spaced and
        increasing (the usual clip), otherwise one read of the distinct indices.
        """
        dataset = self._datasets.get(video)
        if dataset is None:
            dataset = self._h5[video][self.frames_key]
            self._datasets[video] = dataset
        first, last = indices[0], indices[-1]
        step = indices[1] - indices[0] if len(indices) > 1 else 1
        if step > 0 and all(b - a == step for a, b in itertools.pairwise(indices)):
            return list(dataset[first : last + 1 : step])
        distinct = sorted(set(indices))
        read = dict(zip(distinct, dataset[distinct], strict=True))
        return [read[i] for i in indices]
