"""The manifest of a packed directory: what was asked for, what is finished, in which shard.

``OUT/h5feed-pack.json`` (JSON, written atomically: temporary file, fsync, rename) records:

* ``format``/``version``: ``"h5feed-pack"``, :data:`VERSION` (another version is refused);
* ``source``: SRC as an absolute path; ``settings``: ``quality``, ``shard_size``,
  ``prefix_class``; ``classes``: the class names;
* ``plan``: every video of SRC when the run started (group name, label, path relative to SRC,
  fingerprint = [bytes, latest mtime in ns, image count]);
* ``shards``: the finished shards, in order: file name, size in bytes, SHA-256, and their
  videos (group name, frame count, source path);
* ``skipped``: videos left out with ``--skip-broken`` (path and reason);
* ``complete``: true once every video is in a finished shard and the shards were verified.

A shard is listed only after its file was renamed to its final name, so every listed shard is
complete; a shard file that is not listed is an unfinished one and is redone.
"""

from __future__ import annotations

import json
import os
from typing import Any

from h5feed.common.system.atomic import atomic_file

__all__ = ["MANIFEST_NAME", "VERSION", "load", "save"]

MANIFEST_NAME = "h5feed-pack.json"
VERSION = 1
_FORMAT = "h5feed-pack"


def save(out_dir: str, manifest: dict[str, Any]) -> None:
    """Write ``manifest`` to ``out_dir`` atomically (a reader sees the old or the new one)."""
    final = os.path.join(out_dir, MANIFEST_NAME)
    with atomic_file(final) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        json.dump({"format": _FORMAT, "version": VERSION, **manifest}, handle, indent=1)
    _fsync_dir(out_dir)


def _fsync_dir(path: str) -> None:
    """Make a rename in ``path`` durable (best effort where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory; the rename is still atomic
    finally:
        os.close(fd)


def load(out_dir: str) -> dict[str, Any] | None:
    """The manifest in ``out_dir``, or None if there is none. Raises ``ValueError`` for a
    manifest that is not JSON, not ours or of another version."""
    path = os.path.join(out_dir, MANIFEST_NAME)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a valid pack manifest: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise ValueError(f"{path}: not an h5feed pack manifest")
    if data.get("version") != VERSION:
        raise ValueError(
            f"{path}: manifest version {data.get('version')!r}; this h5feed reads {VERSION}"
        )
    data.pop("format")
    data.pop("version")
    return data
