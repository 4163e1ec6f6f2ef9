"""On-disk cache of file indexes, so a restart on thousands of files takes seconds.

An entry is keyed by the file's identity (device and inode: any path to it, symbolic links
included, finds it), size and modification time (ns) and the layout the job asks for (its
kind and names; ``auto`` included); it holds the layout recognised and the videos as columns
(names, frame counts, labels), so a hit needs neither opening the file nor recognising its
layout again (the file is opened lazily, on its first read). Any change to the file gives a
new key, so a stale entry is never used.
Entries are msgpack files written atomically (temporary file + rename): concurrent workers can
share one cache directory. A corrupt or unreadable entry is treated as a miss.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import pathlib
import tempfile
from typing import Any

import msgpack
import numpy as np

from h5feed.common import layouts, object_urls
from h5feed.common.layouts import Auto, LayoutSpec

_log = logging.getLogger(__name__)

VideoEntry = tuple[str, int, int]  # (group name, frame count, label)
#: What a hit gives: the layout recognised for the file, and its videos.
CachedIndex = tuple[LayoutSpec, list[VideoEntry]]
#: A file's videos as the INDEX_BATCH columns: UTF-8 names, frame counts, labels (int64).
Columns = tuple[list[bytes], np.ndarray, np.ndarray]
#: Videos one entry may hold (a corrupt or forged entry costs at most this).
_MAX_ENTRY_VIDEOS = 1_000_000


@functools.lru_cache(maxsize=64)
def _layout_names(layout: LayoutSpec) -> str:
    return json.dumps(layout.to_wire(), sort_keys=True)


def file_key(path: str, layout: LayoutSpec) -> str:
    """The key of ``path`` read with ``layout`` now (one ``stat``); OSError when it cannot
    be stat'ed. Compute it once per file and pass it to :func:`load`, :func:`store` and
    :class:`MemoryIndex` (10,000 files: each call counts). A URL's key is its URL, size, ETag
    and version (one HEAD request: :func:`h5feed.producer.files.remote_files.identity`)."""
    if object_urls.is_url(path):
        from h5feed.producer.files import remote_files  # imports fsspec: only for URLs

        ident = f"{remote_files.identity(path)}\0{_layout_names(layout)}"
        return hashlib.sha256(ident.encode()).hexdigest()
    st = os.stat(path)
    ident = f"{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{_layout_names(layout)}"
    return hashlib.sha256(ident.encode()).hexdigest()


def load(
    cache_dir: str, path: str, layout: LayoutSpec, key: str | None = None
) -> CachedIndex | None:
    """The layout recognised and the cached index of ``path`` asked for with ``layout``
    (``key``: its :func:`file_key`, if known), or None when there is no valid entry (an
    entry of an older format is no valid entry)."""
    try:
        key = key or file_key(path, layout)
        raw: Any = msgpack.unpackb((pathlib.Path(cache_dir) / (key + ".msgpack")).read_bytes())
        names, frames, labels = raw["names"], raw["frames"], raw["labels"]
        if not (0 < len(names) == len(frames) == len(labels) <= _MAX_ENTRY_VIDEOS):
            return None
        resolved = layouts.from_wire(dict(raw["layout"]))
        # Columns, checked with array operations (an entry is ours, but may be damaged).
        counts = np.asarray(frames, np.int64)
        np.asarray(labels, np.int64)
        if isinstance(resolved, Auto) or int(counts.min()) < 1:
            return None
        if not all(type(name) is str for name in names):
            return None
        return resolved, list(zip(names, frames, labels, strict=True))
    except (OSError, ValueError, TypeError, KeyError, OverflowError, msgpack.UnpackException):
        return None


def store(
    cache_dir: str,
    path: str,
    layout: LayoutSpec,
    resolved: LayoutSpec,
    videos: list[VideoEntry],
    key: str | None = None,
) -> None:
    """Write the index of ``path`` asked for with ``layout`` and read with ``resolved``
    (``key``: its :func:`file_key`, if known); failures to write only cost a future re-read."""
    try:
        directory = pathlib.Path(cache_dir)
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / ((key or file_key(path, layout)) + ".msgpack")
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        names, frames, labels = (list(c) for c in zip(*videos, strict=True))
        entry = {"layout": resolved.to_wire(), "names": names, "frames": frames, "labels": labels}
        with os.fdopen(fd, "wb") as out:
            out.write(msgpack.packb(entry, use_bin_type=True))
        os.replace(tmp, final)
    except OSError as exc:  # a read-only or full cache directory must not stop training
        _log.warning("index cache %s not written: %s", cache_dir, exc)


def columns_of(videos: list[VideoEntry]) -> Columns:
    """``videos`` as INDEX_BATCH columns (computed once per file, kept with its index)."""
    names, frames, labels = zip(*videos, strict=True) if videos else ((), (), ())
    return (
        [name.encode() for name in names],
        np.array(frames, np.int64).reshape(-1),
        np.array(labels, np.int64).reshape(-1),
    )


class MemoryIndex:
    """The indexes a persistent worker read in earlier jobs, kept in memory, so the next
    iteration of the same dataset answers its INDEX without a disk read.

    Keyed like the on-disk cache (path, size, modification time, layout asked for): a
    changed file is a miss. At most ``max_files`` files are kept (then it starts over), so a
    service that serves many datasets keeps bounded memory. Not thread-safe (one event loop).
    """

    def __init__(self, max_files: int = 100_000) -> None:
        self.max_files = max_files
        self._entries: dict[str, tuple[LayoutSpec, list[VideoEntry], Columns]] = {}

    def load(
        self, path: str, layout: LayoutSpec, key: str | None = None
    ) -> tuple[LayoutSpec, list[VideoEntry], Columns] | None:
        """The layout recognised, videos and their columns (see :func:`columns_of`)."""
        try:
            return self._entries.get(key or file_key(path, layout))
        except OSError:
            return None

    def store(
        self,
        path: str,
        layout: LayoutSpec,
        resolved: LayoutSpec,
        videos: list[VideoEntry],
        key: str | None = None,
        columns: Columns | None = None,
    ) -> None:
        try:
            key = key or file_key(path, layout)
        except OSError:
            return
        if len(self._entries) >= self.max_files:
            self._entries.clear()
        self._entries[key] = (resolved, videos, columns or columns_of(videos))
