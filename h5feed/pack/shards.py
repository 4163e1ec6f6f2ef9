"""Writing shard files: ``shard-00000.h5``, ``shard-00001.h5``, ... in the default layout.

A shard is written as ``<name>.tmp`` and renamed to its final name once complete and flushed
to disk, so a file under a final name is always whole. Each shard holds whole videos only,
copied group by group from the per-video files of :mod:`h5feed.pack.encode` (``frames``
and ``crc32`` datasets, ``label`` and ``source`` attributes), and the file attributes
``h5feed_pack_version = 2`` (the pack format; docs/data/pack.md),
``h5feed_layout = "group_per_video"`` and ``classes`` (the class names, UTF-8 strings, in
label order; empty without classes), and the pack index: a root group ``h5feed_index``
(names, frame counts, labels; :mod:`h5feed.producer.layouts.pack_index`), so a reader takes
one read, not a walk.

A shard keeps its metadata (group and dataset headers, B-trees, attributes, the pack index)
in pages apart from its frames: HDF5's paged file-space strategy (HDF5 1.10.1 and later read
it; h5py's wheels carry 1.14). Written as HDF5 does by default, a shard's metadata lies
between its videos' frames, all through the file, and opening it from object storage (which
looks at every object's header: :mod:`h5feed.producer.files.url_confine`) read about 3 x the
file's bytes (measured: 139 requests and 135 MiB for a 43 MiB shard of 400 videos). In pages
it reads them and little else (6 requests, 2 MiB, with frames contiguous: below). A page is
:func:`page_bytes` of the shard size: a shard's last pages are partly filled, so a shard
grows by at most about two pages.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence
from typing import Any

import h5py
import numpy as np

from h5feed.common.layouts import PACK_VERSION, PACK_VERSION_ATTR
from h5feed.pack.encode import write_frames
from h5feed.producer.layouts import pack_index
from h5feed.producer.sample_data import LAYOUT, LAYOUT_ATTR

__all__ = ["CLASSES_ATTR", "ShardWriter", "file_sha256", "page_bytes", "shard_name"]

CLASSES_ATTR = "classes"
#: Bounds of a shard's page (:func:`page_bytes`): small enough that a small shard stays
#: small, at most the block a producer fetches while it opens a file (4 MiB by default).
MIN_PAGE_BYTES, MAX_PAGE_BYTES = 64 << 10, 4 << 20
_HASH_BLOCK_BYTES = 1 << 20


def shard_name(index: int) -> str:
    return f"shard-{index:05d}.h5"


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_HASH_BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def page_bytes(shard_size: int) -> int:
    """The file-space page of a shard of ``shard_size`` bytes of frames: the largest power of
    two at most 1/128 of it, within [:data:`MIN_PAGE_BYTES`, :data:`MAX_PAGE_BYTES`] (a full
    shard grows by under 2 %; one of 1 GiB gets 4 MiB pages)."""
    wanted = max(1, shard_size // 128)
    return min(MAX_PAGE_BYTES, max(MIN_PAGE_BYTES, 1 << (wanted.bit_length() - 1)))


#: Frames copied into a shard at a time (a video's frames are never all in memory at once).
_COPY_FRAMES = 256


def _copy_video(source: h5py.Group, group: h5py.Group) -> None:
    """``source`` (a video's group as :mod:`h5feed.pack.encode` wrote it) into ``group``: its
    attributes and datasets, its ``frames`` stored contiguous. ``encode`` appends frames to
    a chunked dataset while it decodes (it cannot know how many); in a shard the count is
    known, and contiguous descriptors need no chunk index: less metadata per video (16 MiB
    of HDF5's metadata cache held a shard's 400 videos with 23 of its reads left to make
    again over 1,600 clips, against 228 chunked), and a clip's descriptors are one range."""
    for key, value in source.attrs.items():
        group.attrs[key] = value
    for key, dataset in source.items():
        if key != "frames":
            source.copy(dataset, group, name=key)
            continue
        out = group.create_dataset(key, shape=dataset.shape, dtype=dataset.dtype)
        for start in range(0, dataset.shape[0], _COPY_FRAMES):
            write_frames(out, start, list(dataset[start : start + _COPY_FRAMES]))


class ShardWriter:
    """One shard being written. ``add`` videos, then ``finish`` (or ``discard``)."""

    def __init__(
        self, out_dir: str, index: int, classes: Sequence[str], page: int = MAX_PAGE_BYTES
    ) -> None:
        self.name = shard_name(index)
        self.final = os.path.join(out_dir, self.name)
        self.tmp = self.final + ".tmp"
        self.videos: list[dict[str, Any]] = []
        self.payload_bytes = 0
        # truncates a stale .tmp of an interrupted run; metadata in pages (module docstring)
        self._h5 = h5py.File(self.tmp, "w", fs_strategy="page", fs_page_size=page)
        self._h5.attrs[PACK_VERSION_ATTR] = np.int64(PACK_VERSION)
        self._h5.attrs[LAYOUT_ATTR] = LAYOUT
        self._h5.attrs[CLASSES_ATTR] = np.array(list(classes), dtype=h5py.string_dtype())

    def add(self, video_file: str, entry: dict[str, Any], payload: int) -> None:
        """Copy group ``entry["name"]`` of ``video_file`` (written by ``encode_video``) into
        the shard; ``entry`` (name, frames, label, source) goes into the manifest."""
        name = entry["name"]
        with h5py.File(video_file, "r") as src:
            _copy_video(src[name], self._h5.create_group(name))
        self.videos.append(entry)
        self.payload_bytes += payload

    def finish(self) -> dict[str, Any]:
        """Write the pack index (:mod:`h5feed.producer.layouts.pack_index`), close, flush and
        rename the shard; return its manifest entry."""
        pack_index.write(self._h5, [(v["name"], v["frames"], v["label"]) for v in self.videos])
        self._h5.close()
        with open(self.tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(self.tmp, self.final)
        return {
            "file": self.name,
            "bytes": os.path.getsize(self.final),
            "sha256": file_sha256(self.final),
            "videos": self.videos,
        }

    def discard(self) -> None:
        """Close and remove the unfinished shard (an error or an interruption)."""
        try:
            self._h5.close()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
