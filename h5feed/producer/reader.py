"""Reading videos from one HDF5 file in the default (groups) layout — kept for callers of
:class:`VideoFile`; the readers of every layout are in :mod:`h5feed.producer.layouts`.

A :class:`VideoFile` opens its file once and keeps it open; create it inside the process that
uses it (h5py handles do not survive ``fork`` or pickling).
"""

from __future__ import annotations

from h5feed.common.errors import DataError
from h5feed.common.layouts import Groups
from h5feed.producer.files.locking import open_read_only
from h5feed.producer.layouts.groups import GroupsReader


class VideoFile(GroupsReader):
    """An open HDF5 file in the groups layout, with ``frames_key`` / ``label_key`` names."""

    def __init__(self, path: str, frames_key: str = "frames", label_key: str | None = "label"):
        try:
            h5 = open_read_only(path)
        except OSError as exc:
            raise DataError(f"cannot open HDF5 file: {exc}", file=path) from exc
        super().__init__(h5, path, Groups(frames=frames_key, label=label_key))
        self.frames_key = frames_key
        self.label_key = label_key
