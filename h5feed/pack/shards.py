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
from h5feed.producer.layouts import pack_index
from h5feed.producer.sample_data import LAYOUT, LAYOUT_ATTR

__all__ = ["CLASSES_ATTR", "ShardWriter", "file_sha256", "shard_name"]

CLASSES_ATTR = "classes"
_HASH_BLOCK_BYTES = 1 << 20


def shard_name(index: int) -> str:
    return f"shard-{index:05d}.h5"


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_HASH_BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()


class ShardWriter:
    """One shard being written. ``add`` videos, then ``finish`` (or ``discard``)."""

    def __init__(self, out_dir: str, index: int, classes: Sequence[str]) -> None:
        self.name = shard_name(index)
        self.final = os.path.join(out_dir, self.name)
        self.tmp = self.final + ".tmp"
        self.videos: list[dict[str, Any]] = []
        self.payload_bytes = 0
        self._h5 = h5py.File(self.tmp, "w")  # truncates a stale .tmp of an interrupted run
        self._h5.attrs[PACK_VERSION_ATTR] = np.int64(PACK_VERSION)
        self._h5.attrs[LAYOUT_ATTR] = LAYOUT
        self._h5.attrs[CLASSES_ATTR] = np.array(list(classes), dtype=h5py.string_dtype())

    def add(self, video_file: str, entry: dict[str, Any], payload: int) -> None:
        """Copy group ``entry["name"]`` of ``video_file`` (written by ``encode_video``) into
        the shard; ``entry`` (name, frames, label, source) goes into the manifest."""
        name = entry["name"]
        with h5py.File(video_file, "r") as src:
            src.copy(src[name], self._h5, name=name)
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
