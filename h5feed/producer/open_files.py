"""The HDF5 files of one job, at most ``max_open`` of them open at once.

Why a bound: a worker may own more files than it may hold descriptors (``ulimit -n``; 300
files on 2 workers failed under a limit of 100), and every open file also holds HDF5's
metadata cache. Why :data:`DEFAULT_MAX_OPEN_FILES` = 128: it keeps a worker far below the
usual soft limit of 1024 descriptors (also where the hard limit is that low) with its
sockets and shared-memory slots, while a worker that owns up to 128 files (a 1,000-file
dataset on 8 workers) never reopens one; beyond that a global shuffle reopens a file on
about ``1 - 128 / owned`` of its reads (``benchmarks/open_files.py`` measures the cost).

Guarantees of :class:`OpenFiles`:

1. At most ``max_open`` readers are open at any time; opening one more first closes the least
   recently used.
2. A closed file is reopened on demand with the layout recognised when it was first opened
   (no second detection), so it reads exactly as before; its index is not read again (the
   caller keeps it).
3. :attr:`reopened` counts reopenings (a figure for the worker's log and benchmarks).
4. Not thread-safe: the worker's single event-loop thread uses it.
5. A file that cannot be opened (or reopened) raises :class:`FileReadError` carrying its
   number; :func:`check_readable` checks a file without opening it (``stat`` and access).
"""

from __future__ import annotations

import collections
import os
import socket
import stat

from h5feed.common.config import DEFAULT_MAX_OPEN_FILES
from h5feed.common.errors import FileReadError
from h5feed.common.layouts import LayoutSpec
from h5feed.producer.layouts import LayoutReader, open_reader

__all__ = ["DEFAULT_MAX_OPEN_FILES", "OpenFiles", "check_readable"]


def check_readable(number: int, path: str) -> None:
    """Raise :class:`FileReadError` naming ``path`` and this host unless it is a regular file
    this process may read (``stat`` and ``access``, no open): run for every file a worker owns
    when its JOB arrives, so a missing or unreadable file is reported when the iteration
    starts, even where files are opened lazily."""
    host = socket.gethostname()
    try:
        info = os.stat(path)
    except OSError as exc:
        raise FileReadError(
            f"cannot stat the file: {exc.strerror or exc}", file=path, host=host, number=number
        ) from exc
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise FileReadError(f"the path is {kind}", file=path, host=host, number=number)
    if not os.access(path, os.R_OK):
        raise FileReadError(
            "the file is not readable by this process", file=path, host=host, number=number
        )


class OpenFiles:
    """Readers of a job's files by number, at most ``max_open`` open (least recently used
    closed first)."""

    def __init__(self, max_open: int = DEFAULT_MAX_OPEN_FILES, root: str | None = None) -> None:
        """``root``: the data root every file is confined to (see ``open_reader``), if any."""
        if max_open < 1:
            raise ValueError(f"max_open_files must be >= 1, got {max_open}")
        self.max_open = max_open
        self.root = root
        self.reopened = 0
        self._known: dict[int, tuple[str, LayoutSpec]] = {}  # path, resolved layout
        self._open: collections.OrderedDict[int, LayoutReader] = collections.OrderedDict()

    def open(self, number: int, path: str, layout: LayoutSpec) -> LayoutReader:
        """Open file ``number`` at ``path`` with ``layout`` (``Auto``: recognised here) and
        keep it as the most recently used. DataError when it cannot be opened."""
        previous = self._open.pop(number, None)
        if previous is not None:  # opened again (a JOB that repeats it): one reader only
            previous.close()
        self._make_room()
        reader = _open(number, path, layout, self.root)
        self._known[number] = (path, reader.spec)
        self._open[number] = reader
        return reader

    def get(self, number: int) -> LayoutReader:
        """The reader of file ``number`` (opened before with :meth:`open`), reopened if it was
        closed to make room; KeyError for a file never opened."""
        reader = self._open.get(number)
        if reader is not None:
            self._open.move_to_end(number)
            return reader
        path, layout = self._known[number]
        self._make_room()
        reader = _open(number, path, layout, self.root)
        self._open[number] = reader
        self.reopened += 1
        return reader

    def path(self, number: int) -> str:
        return self._known[number][0]

    @property
    def open_count(self) -> int:
        return len(self._open)

    def close(self) -> None:
        for reader in self._open.values():
            reader.close()
        self._open.clear()

    def _make_room(self) -> None:
        while len(self._open) >= self.max_open:
            _number, oldest = self._open.popitem(last=False)
            oldest.close()


def _open(number: int, path: str, layout: LayoutSpec, root: str | None) -> LayoutReader:
    """``open_reader``, with the file's number on a FileReadError."""
    try:
        return open_reader(path, layout, root)
    except FileReadError as exc:
        exc.number = number
        raise
