"""On-disk cache of file indexes, so a restart on thousands of files takes seconds.

An entry is keyed by the file's resolved path, size and modification time (ns) and the layout
the job asks for (its kind and names; ``auto`` included); it holds the layout recognised and
the videos, so a hit needs neither opening the file nor recognising its layout again (the file
is opened lazily, on its first read). Any change to the file gives a new key, so a stale
entry is never used.
Entries are msgpack files written atomically (temporary file + rename): concurrent workers can
share one cache directory. A corrupt or unreadable entry is treated as a miss.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pathlib
import tempfile
from typing import Any

import msgpack

from h5feed.common import layouts
from h5feed.common.layouts import Auto, LayoutSpec

_log = logging.getLogger(__name__)

VideoEntry = tuple[str, int, int]  # (group name, frame count, label)
#: What a hit gives: the layout recognised for the file, and its videos.
CachedIndex = tuple[LayoutSpec, list[VideoEntry]]
#: Videos one entry may hold (a corrupt or forged entry costs at most this).
_MAX_ENTRY_VIDEOS = 1_000_000


def _key(path: str, layout: LayoutSpec) -> str:
    st = os.stat(path)
    names = json.dumps(layout.to_wire(), sort_keys=True)
    ident = f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{names}"
    return hashlib.sha256(ident.encode()).hexdigest()


def load(cache_dir: str, path: str, layout: LayoutSpec) -> CachedIndex | None:
    """The layout recognised and the cached index of ``path`` asked for with ``layout``, or
    None when there is no valid entry (an entry of an older format is no valid entry)."""
    try:
        entry = pathlib.Path(cache_dir) / (_key(path, layout) + ".msgpack")
        raw: Any = msgpack.unpackb(entry.read_bytes(), raw=False)
        if not isinstance(raw, dict) or len(raw.get("videos", ())) > _MAX_ENTRY_VIDEOS:
            return None
        resolved = layouts.from_wire(dict(raw["layout"]))
        if isinstance(resolved, Auto):
            return None
        videos = [(str(name), int(n), int(label)) for name, n, label in raw["videos"]]
        if not videos or min(n for _name, n, _label in videos) < 1:
            return None
        return resolved, videos
    except (OSError, ValueError, TypeError, KeyError, msgpack.UnpackException):
        return None


def store(
    cache_dir: str,
    path: str,
    layout: LayoutSpec,
    resolved: LayoutSpec,
    videos: list[VideoEntry],
) -> None:
    """Write the index of ``path`` asked for with ``layout`` and read with ``resolved``;
    failures to write only cost a future re-read."""
    try:
        directory = pathlib.Path(cache_dir)
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / (_key(path, layout) + ".msgpack")
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        entry = {"layout": resolved.to_wire(), "videos": [list(v) for v in videos]}
        with os.fdopen(fd, "wb") as out:
            out.write(msgpack.packb(entry, use_bin_type=True))
        os.replace(tmp, final)
    except OSError as exc:  # a read-only or full cache directory must not stop training
        _log.warning("index cache %s not written: %s", cache_dir, exc)


class MemoryIndex:
    """The indexes a persistent worker read in earlier jobs, kept in memory, so the next
    iteration of the same dataset answers its INDEX without a disk read.

    Keyed like the on-disk cache (path, size, modification time, layout asked for): a
    changed file is a miss. At most ``max_files`` files are kept (then it starts over), so a
    service that serves many datasets keeps bounded memory. Not thread-safe (one event loop).
    """

    def __init__(self, max_files: int = 100_000) -> None:
        self.max_files = max_files
        self._entries: dict[str, CachedIndex] = {}

    def load(self, path: str, layout: LayoutSpec) -> CachedIndex | None:
        try:
            return self._entries.get(_key(path, layout))
        except OSError:
            return None

    def store(
        self, path: str, layout: LayoutSpec, resolved: LayoutSpec, videos: list[VideoEntry]
    ) -> None:
        try:
            key = _key(path, layout)
        except OSError:
            return
        if len(self._entries) >= self.max_files:
            self._entries.clear()
        self._entries[key] = (resolved, videos)
