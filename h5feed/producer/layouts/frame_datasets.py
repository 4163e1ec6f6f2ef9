"""One group per video, one 1-D uint8 dataset per frame (the JPEG's bytes)."""

from __future__ import annotations

import logging

import h5py
import numpy as np

from h5feed.common.errors import DataError
from h5feed.common.layouts import FrameDatasets
from h5feed.producer.files.index_cache import VideoEntry
from h5feed.producer.files.link_walk import member_names
from h5feed.producer.files.read_limits import DEFAULT_BOUNDS, DatasetBounds
from h5feed.producer.layouts._common import group_label, natural_key
from h5feed.producer.layouts.base import LayoutReader

_log = logging.getLogger("h5feed.worker")


class FrameDatasetsReader(LayoutReader):
    """Every top-level group is a video (sorted names); top-level datasets are ignored.

    A video's frames are its member datasets in *natural* order of their names (digit runs
    compare by value: ``frame_9`` before ``frame_10``; see ``_common.natural_key``); member
    groups are ignored. Each frame dataset must be 1-D uint8 (encoded bytes). A group with no
    frame dataset is no video: it is left out, with one warning per file naming such groups
    (an error only when the file has no video at all). A frame of another shape or dtype, or
    a missing label raises DataError naming the video (and the frame's dataset).
    """

    spec: FrameDatasets

    def __init__(
        self,
        h5: h5py.File,
        path: str,
        spec: FrameDatasets,
        root: str | None = None,
        bounds: DatasetBounds = DEFAULT_BOUNDS,
    ) -> None:
        super().__init__(h5, path, spec, root, bounds)
        self._frames: dict[str, list[str]] = {}

    def frame_names(self, video: str) -> list[str]:
        """The names of the frame datasets of ``video``, in frame order (checked once)."""
        names = self._frames.get(video)
        if names is None:
            group = self.h5[video]
            names = []
            for member in member_names(group, self.path, "frames"):
                obj = group[member]
                if not isinstance(obj, h5py.Dataset):
                    continue
                if obj.ndim != 1 or obj.dtype != np.uint8:
                    raise DataError(
                        f"frame dataset {member!r} must be 1-D uint8 (encoded bytes), got "
                        f"{obj.dtype} {obj.shape}",
                        file=self.path,
                        video=video,
                    )
                self.readable(obj, whole=True)  # read_frames reads these very members, whole
                names.append(member)
            names.sort(key=natural_key)
            self._frames[video] = names
        return names

    def index(self) -> list[VideoEntry]:
        videos: list[VideoEntry] = []
        frameless: list[str] = []
        for name in member_names(self.h5, self.path, "videos"):
            group = self.h5[name]
            if not isinstance(group, h5py.Group):
                continue
            frames = self.frame_names(name)
            if not frames:
                frameless.append(name)
                continue
            label = group_label(group, self.spec.label, self.path, name)
            videos.append((name, len(frames), label))
        if frameless and videos:  # once per file
            _log.warning(
                "%s: %d top-level groups without frame datasets are not videos and are left "
                "out: %s",
                self.path, len(frameless), frameless[:5],
            )  # fmt: skip
        if not videos:
            raise DataError(
                "no videos found: expected top-level groups of frame datasets", file=self.path
            )
        return videos

    def read_frames(self, video: str, indices: list[int]) -> list[np.ndarray]:
        names = self.frame_names(video)
        group = self.h5[video]
        read: dict[int, np.ndarray] = {}
        for i in indices:
            if i not in read:
                read[i] = np.asarray(group[names[i]][()])
        return [read[i] for i in indices]
