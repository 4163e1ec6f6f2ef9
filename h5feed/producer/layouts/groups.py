"""The default layout: one group per video, a vlen-uint8 ``frames`` dataset, a ``label``."""

from __future__ import annotations

import h5py
import numpy as np

from h5feed.common.errors import DataError
from h5feed.common.layouts import Groups
from h5feed.producer.index_cache import VideoEntry
from h5feed.producer.layouts import pack_index
from h5feed.producer.layouts._common import group_label, read_rows
from h5feed.producer.layouts.base import LayoutReader


class GroupsReader(LayoutReader):
    """Videos are the top-level groups holding a ``frames`` dataset, in sorted name order.

    Top-level groups without it are not videos and are left out; a video with no frames, a
    missing label or a file with no video at all raises DataError.
    """

    spec: Groups

    def __init__(self, h5: h5py.File, path: str, spec: Groups, root: str | None = None) -> None:
        super().__init__(h5, path, spec, root)
        self._datasets: dict[str, h5py.Dataset] = {}

    def index(self) -> list[VideoEntry]:
        """From the pack index when the file has one (one read, checked: see
        :mod:`~h5feed.producer.layouts.pack_index`), else by walking the groups."""
        frames_key = self.spec.frames
        packed = pack_index.read(self.h5, self.path, frames_key, self.spec.label)
        if packed is not None:
            return packed
        videos: list[VideoEntry] = []
        for name in sorted(self.h5.keys()):
            group = self.h5[name]
            if name == pack_index.INDEX_GROUP:  # the pack index, when not used (other names)
                continue
            if not isinstance(group, h5py.Group) or frames_key not in group:
                continue
            frames = group[frames_key]
            if isinstance(frames, h5py.Dataset):
                self.readable(frames)  # a refusal fails the index, not the first unit
            if not isinstance(frames, h5py.Dataset) or frames.ndim != 1:
                raise DataError(
                    f"{frames_key!r} must be a 1-D dataset of encoded frames",
                    file=self.path,
                    video=name,
                )
            if frames.shape[0] == 0:
                raise DataError("video has no frames", file=self.path, video=name)
            label = group_label(group, self.spec.label, self.path, name)
            videos.append((name, int(frames.shape[0]), label))
        if not videos:
            raise DataError(
                f"no videos found: expected top-level groups holding a {frames_key!r} "
                f"dataset; the file has {sorted(self.h5.keys())[:10]}",
                file=self.path,
            )
        return videos

    def read_frames(self, video: str, indices: list[int]) -> list[np.ndarray]:
        dataset = self._datasets.get(video)
        if dataset is None:
            dataset = self.readable(self.h5[video][self.spec.frames])
            self._datasets[video] = dataset
        return read_rows(dataset, indices)
