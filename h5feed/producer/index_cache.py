"""On-disk cache of file indexes, so a restart on thousands of files takes seconds.

An entry is keyed by the file's resolved path, size and modification time (ns) and the layout
used to read it (its kind and names, as recognised for ``layout="auto"``); any change
to the file gives a new key, so a stale entry is never used.
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

from h5feed.common.layouts import LayoutSpec

_log = logging.getLogger(__name__)

VideoEntry = tuple[str, int, int]  # (group name, frame count, label)


def _key(path: str, layout: LayoutSpec) -> str:
    st = os.stat(path)
    names = json.dumps(layout.to_wire(), sort_keys=True)
    ident = f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{names}"
    return hashlib.sha256(ident.encode()).hexdigest()


def load(cache_dir: str, path: str, layout: LayoutSpec) -> list[VideoEntry] | None:
    """The cached index of ``path`` read with ``layout``, or None when there is no valid
    entry."""
    entry = pathlib.Path(cache_dir) / (_key(path, layout) + ".msgpack")
    try:
        raw: Any = msgpack.unpackb(entry.read_bytes(), raw=False)
        return [(str(name), int(n), int(label)) for name, n, label in raw]
    except (OSError, ValueError, TypeError, msgpack.UnpackException):
        return None


def store(cache_dir: str, path: str, layout: LayoutSpec, videos: list[VideoEntry]) -> None:
    """Write the index of ``path``; failures to write only cost a future re-read."""
    try:
        directory = pathlib.Path(cache_dir)
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / (_key(path, layout) + ".msgpack")
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(msgpack.packb([list(v) for v in videos], use_bin_type=True))
        os.replace(tmp, final)
    except OSError as exc:  # a read-only or full cache directory must not stop training
        _log.warning("index cache %s not written: %s", cache_dir, exc)
