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
2. A file may be made known without opening it (:meth:`know`: its index came from a cache):
   it is opened on its first :meth:`get` (not counted as a reopening). A closed file is
   reopened on demand with the layout recognised when it was first opened
   (no second detection), so it reads exactly as before; its index is not read again (the
   caller keeps it).
3. Making a file known (:meth:`know`) under a number already held for the same path and
   layout keeps its reader: a persistent worker's next job of the same dataset finds its
   files open (``h5feed.producer.worker.loop``). :meth:`open` always opens afresh (its
   caller reads the index of a file that may have changed).
4. :attr:`reopened` counts reopenings (a figure for the worker's log and benchmarks).
5. Not thread-safe: the worker's single event-loop thread uses it.
6. A file that cannot be opened (or reopened) raises :class:`FileReadError` carrying its
   number; :func:`check_readable` checks a file without opening it (``stat`` and access).
7. Every reader checks its datasets against :attr:`bounds` (a job's, see
   :mod:`h5feed.producer.files.read_limits`); :meth:`use_bounds` with other bounds closes the
   readers opened under the old ones, so no dataset is read unchecked against a job's own.
8. :meth:`release` closes a file as if it had never been opened: it stays known and is
   opened on its next :meth:`get`, not counted as a reopening (a job of more files than may
   be open closes each once indexed: :class:`~h5feed.producer.worker.hdf5_job.Hdf5Job`).
9. An object streamed while its node-local copy was made is reopened from the copy by the
   first :meth:`get` after the copy is complete (:mod:`~h5feed.producer.files.node_cache`,
   the same bytes), not counted as a reopening.
"""

from __future__ import annotations

import collections
import os
import socket
import stat

from h5feed.common import object_urls
from h5feed.common.errors import FileReadError
from h5feed.common.layouts import LayoutSpec
from h5feed.common.worker_settings import DEFAULT_MAX_OPEN_FILES
from h5feed.producer.files import node_cache
from h5feed.producer.files.read_limits import DEFAULT_BOUNDS, DatasetBounds
from h5feed.producer.layouts import LayoutReader, open_reader

__all__ = ["DEFAULT_MAX_OPEN_FILES", "OpenFiles", "check_readable"]


def check_readable(number: int, path: str) -> None:
    """Raise :class:`FileReadError` naming ``path`` and this host unless it is a regular file
    this process may read (``stat`` and ``access``, no open): run for every file a worker owns
    when its JOB arrives, so a missing or unreadable file is reported when the iteration
    starts, even where files are opened lazily. A URL: one HEAD request
    (:func:`h5feed.producer.files.remote_files.check_readable`)."""
    if object_urls.is_url(path):
        from h5feed.producer.files import remote_files  # imports fsspec: only for URLs

        remote_files.check_readable(number, path)
        return
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

    def __init__(
        self,
        max_open: int = DEFAULT_MAX_OPEN_FILES,
        root: str | None = None,
        bounds: DatasetBounds = DEFAULT_BOUNDS,
    ) -> None:
        """``root``: the data root every file is confined to (see ``open_reader``), if any."""
        if max_open < 1:
            raise ValueError(f"max_open_files must be >= 1, got {max_open}")
        self.max_open = max_open
        self.root = root
        self.bounds = bounds
        self.reopened = 0
        self.opened = 0  # files opened so far, reopenings included
        self._known: dict[int, tuple[str, LayoutSpec]] = {}  # path, resolved layout
        self._open: collections.OrderedDict[int, LayoutReader] = collections.OrderedDict()
        self._seen: set[int] = set()  # files opened at least once (a later open is a reopening)
        self._failed: dict[int, str] = {}  # files whose open failed here, and their paths

    def open(self, number: int, path: str, layout: LayoutSpec) -> LayoutReader:
        """Open file ``number`` at ``path`` with ``layout`` (``Auto``: recognised here) and
        keep it as the most recently used. DataError when it cannot be opened."""
        previous = self._open.pop(number, None)
        if previous is not None:  # opened afresh (the file may have changed): one reader only
            previous.close()
        self._make_room()
        try:
            reader = _open(number, path, layout, self.root, self.bounds)
        except BaseException:
            self._failed[number] = path
            raise
        self._failed.pop(number, None)
        self.opened += 1
        self._known[number] = (path, reader.spec)
        self._open[number] = reader
        self._seen.add(number)
        return reader

    def know(self, number: int, path: str, layout: LayoutSpec) -> None:
        """Make file ``number`` known without opening it (``layout``: the one recognised for
        it before, never ``Auto``); :meth:`get` opens it when a row first needs it."""
        if self._known.get(number) == (path, layout):
            return  # known already (a persistent worker's next job): kept open if it is
        previous = self._open.pop(number, None)
        if previous is not None:
            previous.close()
        self._known[number] = (path, layout)

    def get(self, number: int) -> LayoutReader:
        """The reader of file ``number`` (opened with :meth:`open` or made known with
        :meth:`know`), opened now if it is not open. FileReadError naming the file and its
        number when it is neither: its open failed here (the trainer may have dealt this
        worker rows of it before that failure reached it: the error moves them on), or it
        was never named."""
        reader = self._open.get(number)
        if (
            reader is not None
            and node_cache.streaming  # empty unless a node cache copies a streamed object
            and node_cache.copy_ready(self._known[number][0])
        ):
            del self._open[number]  # its object now has a node-local copy: read from it
            reader.close()
            reader = None
            self._seen.discard(number)  # not a reopening (guarantee 9)
        if reader is not None:
            self._open.move_to_end(number)
            return reader
        if number not in self._known:
            raise FileReadError(
                "this worker has not opened the file (its open failed here, or no job named it)",
                file=self._failed.get(number, f"file number {number}"),
                host=socket.gethostname(),
                number=number,
            )
        path, layout = self._known[number]
        self._make_room()
        reader = _open(number, path, layout, self.root, self.bounds)
        self.opened += 1
        self._open[number] = reader
        if number in self._seen:
            self.reopened += 1
        self._seen.add(number)
        return reader

    def peek(self, number: int) -> LayoutReader | None:
        """The reader of file ``number`` if it is open now (nothing opened, the order of use
        unchanged), else None."""
        return self._open.get(number)

    def release(self, number: int) -> None:
        """Close file ``number`` if it is open; it stays known, and its next :meth:`get`
        opens it as a first opening (see guarantee 8)."""
        reader = self._open.pop(number, None)
        if reader is not None:
            reader.close()
        self._seen.discard(number)

    def use_bounds(self, bounds: DatasetBounds) -> None:
        """Check datasets against ``bounds`` from now on (a new job's); readers opened under
        other bounds are closed (reopened on demand)."""
        if bounds != self.bounds:
            self.close()
            self.bounds = bounds

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


def _open(
    number: int, path: str, layout: LayoutSpec, root: str | None, bounds: DatasetBounds
) -> LayoutReader:
    """``open_reader``, with the file's number on a FileReadError."""
    try:
        return open_reader(path, layout, root, bounds)
    except FileReadError as exc:
        exc.number = number
        raise
