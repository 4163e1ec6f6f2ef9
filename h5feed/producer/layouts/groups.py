"""The default layout: one group per video, a vlen-uint8 ``frames`` dataset, a ``label``,
and (written by ``h5feed pack``) a ``crc32`` uint32 dataset of one CRC32 per frame."""

from __future__ import annotations

import logging

import h5py
import numpy as np

from h5feed.common.errors import DataError
from h5feed.common.layouts import CRC_DATASET, Groups
from h5feed.producer.files.clip_bytes import ClipBytes
from h5feed.producer.files.index_cache import VideoEntry
from h5feed.producer.files.link_walk import member_names
from h5feed.producer.files.read_limits import DEFAULT_BOUNDS, DatasetBounds
from h5feed.producer.layouts import pack_index
from h5feed.producer.layouts._common import group_label
from h5feed.producer.layouts.base import LayoutReader

_log = logging.getLogger("h5feed.worker")


#: Videos whose datasets a walk keeps open for their clips (on object storage, opening one
#: again costs a round trip or two; each open dataset costs a few KiB).
KEEP_OPEN = 4096


class GroupsReader(LayoutReader):
    """Videos are the top-level groups holding a ``frames`` dataset, in sorted name order.

    Top-level groups without it are not videos: they are left out, with one warning per file
    naming them (the first few); a video with no frames, a missing label or a file with no
    video at all raises DataError. A video's ``crc32`` dataset, when present, must hold one
    unsigned integer per frame (else DataError when indexing); :meth:`frame_crcs` gives them.
    """

    spec: Groups

    def __init__(
        self,
        h5: h5py.File,
        path: str,
        spec: Groups,
        root: str | None = None,
        bounds: DatasetBounds = DEFAULT_BOUNDS,
    ) -> None:
        super().__init__(h5, path, spec, root, bounds)
        self._datasets: dict[str, h5py.Dataset] = {}
        self._crcs: dict[str, h5py.Dataset | None] = {}
        self._prepared = False  # its index read, or :meth:`prepare` called

    def index(self) -> list[VideoEntry]:
        """From the pack index when the file has one (one read, checked: see
        :mod:`~h5feed.producer.layouts.pack_index`), else by walking the groups."""
        frames_key = self.spec.frames
        self._prepared = True
        packed = pack_index.read(
            self.h5, self.path, frames_key, self.spec.label, self.readable_whole
        )
        if packed is not None:
            if self._plans:
                self._open_for_plans(packed)
            return packed
        videos: list[VideoEntry] = []
        frameless: list[str] = []
        for name in member_names(self.h5, self.path, "videos"):
            group = self.h5[name]
            if name == pack_index.INDEX_GROUP:  # the pack index, when not used (other names)
                continue
            if not isinstance(group, h5py.Group):
                continue
            if frames_key not in group:
                frameless.append(name)
                continue
            frames = group[frames_key]
            if isinstance(frames, h5py.Dataset):
                self.readable(frames, whole=False)  # a refusal fails the index, not a unit
            if not isinstance(frames, h5py.Dataset) or frames.ndim != 1:
                raise DataError(
                    f"{frames_key!r} must be a 1-D dataset of encoded frames",
                    file=self.path,
                    video=name,
                )
            if frames.shape[0] == 0:
                raise DataError("video has no frames", file=self.path, video=name)
            label = group_label(group, self.spec.label, self.path, name)
            crcs = self._check_crcs(group, name, int(frames.shape[0]))
            videos.append((name, int(frames.shape[0]), label))
            if len(self._datasets) < KEEP_OPEN:  # read again by clips: its metadata, now
                self._datasets[name], self._crcs[name] = frames, crcs
        if frameless and videos:  # once per file: the groups may be something else entirely
            _log.warning(
                "%s: %d top-level groups without a %r dataset are not videos and are left "
                "out: %s",
                self.path, len(frameless), frames_key, frameless[:5],
            )  # fmt: skip
        if not videos:
            raise DataError(
                f"no videos found: expected top-level groups holding a {frames_key!r} "
                f"dataset; the file has {sorted(self.h5.keys())[:10]}",
                file=self.path,
            )
        return videos

    def prepare(self, videos: list[VideoEntry]) -> None:
        """On object storage, a file whose metadata is paged (``h5feed pack``'s shards) has
        its videos' datasets opened now, as when its index is read (:meth:`_open_for_plans`):
        from its metadata pages, a few requests. Another file's stay opened by each video's
        first plan: opening them all here would read its metadata spread through the file
        (a walk's worth) before the first clip. Once per reader; nothing after its index."""
        if self._prepared:
            return
        self._prepared = True
        if not self._plans:
            return
        from h5feed.producer.files import remote_files  # a URL's file: imported already

        if remote_files.metadata_page(self.h5) is not None:
            self._open_for_plans(videos)

    def _open_for_plans(self, videos: list[VideoEntry]) -> None:
        """On object storage, the datasets of a pack's first :data:`KEEP_OPEN` videos opened
        now, as a walk opens them, so that their clips are planned without a call to h5py
        (on a read-ahead thread, that call would wait for h5py's lock, held by the worker's
        own read). ``h5feed pack`` writes its metadata in pages of its own (one or two
        requests for hundreds of videos); a file written before does it one video at a
        time. A video that cannot be opened is left as it was: its first read raises what
        opening it raises, naming it, as without this (the bad-data policy's case, for its
        units only)."""
        for name, *_ in videos[:KEEP_OPEN]:
            try:
                self._frames_dataset(name)
                self._crc_dataset(name)
            except Exception:  # raised again, by name, by the video's own read
                continue

    def _check_crcs(self, group: h5py.Group, video: str, frames: int) -> h5py.Dataset | None:
        """The video's ``crc32`` dataset once checked (unsigned integers [frames]), or None
        when it has none."""
        crcs = group.get(CRC_DATASET)
        if crcs is None:
            return None
        if (
            not isinstance(crcs, h5py.Dataset)
            or crcs.shape != (frames,)
            or not np.issubdtype(crcs.dtype, np.unsignedinteger)
        ):
            what = f"{crcs.dtype} {crcs.shape}" if isinstance(crcs, h5py.Dataset) else "a group"
            raise DataError(
                f"{CRC_DATASET!r} must be unsigned integers [{frames}] (one CRC32 per frame), "
                f"got {what}",
                file=self.path,
                video=video,
            )
        return self.readable(crcs, whole=False)

    def frame_crcs(self, video: str, indices: list[int]) -> list[int] | None:
        dataset = self._crc_dataset(video)
        if dataset is None:
            return None
        return [int(value) for value in self.elements(dataset, indices)]

    def _crc_dataset(self, video: str) -> h5py.Dataset | None:
        if video not in self._crcs:  # checked again: the index may come from the cache
            group = self.h5[video]
            frames = group[self.spec.frames]
            self._crcs[video] = self._check_crcs(group, video, int(frames.shape[0]))
        return self._crcs[video]

    def _frames_dataset(self, video: str) -> h5py.Dataset:
        dataset = self._datasets.get(video)
        if dataset is None:
            dataset = self.readable(self.h5[video][self.spec.frames], whole=False)
            self._datasets[video] = dataset
        return dataset

    def clip_bytes(self, video: str, indices: list[int]) -> ClipBytes | None:
        crcs = self._crc_dataset(video)
        others = () if crcs is None else (crcs,)
        return self.planned(self._frames_dataset(video), min(indices), max(indices), *others)

    def read_frames(self, video: str, indices: list[int]) -> list[np.ndarray]:
        return self.elements(self._frames_dataset(video), indices)
