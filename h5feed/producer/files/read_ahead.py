"""Read-ahead of a worker's next clips on object storage: their blocks fetched on a small
thread pool while the current clip decodes, outside h5py's own (sequential) reads.

h5py reads a file object one call at a time, so a clip whose blocks are not cached waits one
round trip per block, in turn. Which blocks a clip needs is not known from its frame numbers
in every layout (a video's JPEG bytes live in HDF5's global heap, behind descriptors), so it
is learnt: while a video's frames are read (:func:`recording`) the blocks every read touched
are remembered for that video (:class:`Source`: at most :data:`MAX_VIDEO_BLOCKS` blocks, at
most :data:`MAX_VIDEOS` videos per open file), from its second read on (its first also reads
the dataset's metadata, which HDF5 then keeps in its own cache). When the worker is about to
cut a clip of a video it has read before (:func:`ahead`, called for the next rows of a unit),
the blocks remembered for it that are not in the file's cache are fetched on the pool; the
file's block cache (fsspec's) takes such a block from there instead of asking again
(:meth:`Source.fetch`).

Guarantees:

1. Only files opened from a URL (:func:`h5feed.producer.files.remote_files.open_h5`) take part:
   :func:`ahead` and :func:`recording` do nothing for a path (local files are read as before).
2. Bounded: at most :data:`THREADS` requests in flight per worker process, at most
   :data:`MAX_PENDING` blocks fetched ahead and not yet taken (so at most that many blocks'
   bytes held besides the files' own caches); a block that is not taken is dropped, oldest
   first, when room is needed.
3. Only blocks a read of this file by h5py touched before are fetched, with the open file's
   own ranged GET (pinned to its ETag, like every read of it): nothing outside what h5py
   itself reads is ever requested.
4. Never a changed result: a fetch ahead that fails, or is not done within
   :data:`~h5feed.common.storage_config.READ_BUDGET_S`, is dropped and the block is fetched
   as it would have been without read-ahead (with its retries).
5. A process leaving never waits for its fetches ahead: those not started are cancelled
   (when their file closes, and at exit), and those in flight (a request may take its
   whole timeout) run on daemon threads, which the interpreter does not join
   (:class:`_Threads`; a ``ThreadPoolExecutor``'s threads are joined at exit, each pending
   fetch run first).
6. The first two clips of a video in a worker are not read ahead (what a clip of it needs is
   known after its second read): read-ahead helps from a video's third clip on (later clips
   of an epoch, later epochs), and a clip whose frames lie in other blocks than the latest
   clip's of its video waits for those as without read-ahead.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import contextlib
import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from h5feed.common import object_urls, storage_config

__all__ = [
    "MAX_PENDING",
    "MAX_VIDEOS",
    "MAX_VIDEO_BLOCKS",
    "THREADS",
    "Source",
    "active",
    "ahead",
    "recording",
    "register",
    "release",
]

#: Requests in flight per worker process, and blocks fetched ahead not yet taken.
THREADS = 4
MAX_PENDING = 8
#: A video touching more blocks than this is not remembered (reading it ahead would crowd
#: out the others); videos remembered per open file (then the oldest are forgotten).
MAX_VIDEO_BLOCKS = 4
MAX_VIDEOS = 100_000

Fetcher = Callable[[int, int], bytes]
#: A fetch ahead waiting for a thread: its future, the call and its argument (a block).
_Work = tuple["concurrent.futures.Future[bytes]", Callable[[int], bytes], int]


class Source:
    """One open URL file's blocks: which are in its cache (a copy of its least-recently-used
    order), which each video touched, and the fetch its cache calls (:meth:`fetch`)."""

    def __init__(self, url: str, cache: Any, max_blocks: int) -> None:
        self.url = url
        self.block = int(cache.blocksize)
        self.max_blocks = max_blocks
        self._fetcher: Fetcher = cache.fetcher
        cache.fetcher = self.fetch  # the cache asks here first (guarantee 4 if not ahead)
        self._resident: collections.OrderedDict[int, None] = collections.OrderedDict()
        #: each video's blocks, as its latest read touched them (None: read once only)
        self._videos: collections.OrderedDict[str, tuple[int, ...] | None]
        self._videos = collections.OrderedDict()
        self._recording: set[int] | None = None
        self.ahead = self.taken = 0  # blocks fetched ahead, and of those, used (figures)

    def touch(self, position: int, size: int) -> None:
        """A read of ``size`` bytes at ``position``: the blocks it touches become the most
        recently used (as in fsspec's cache, whose order this mirrors), and are recorded."""
        if size <= 0:
            return
        for number in range(position // self.block, (position + size - 1) // self.block + 1):
            self._resident[number] = None
            self._resident.move_to_end(number)
            if self._recording is not None:
                self._recording.add(number)
        while len(self._resident) > self.max_blocks:
            self._resident.popitem(last=False)

    @contextlib.contextmanager
    def recording(self, video: str) -> Iterator[None]:
        self._recording = set()
        try:
            yield
        finally:
            blocks, self._recording = self._recording, None
        if video not in self._videos:  # its first read: HDF5 read the dataset's metadata
            self._videos[video] = None  # too, which it keeps in its own cache: not remembered
        elif blocks and len(blocks) <= MAX_VIDEO_BLOCKS:
            self._videos[video] = tuple(sorted(blocks))  # the latest read's: what a clip needs
        self._videos.move_to_end(video)
        while len(self._videos) > MAX_VIDEOS:
            self._videos.popitem(last=False)

    def wanted(self, video: str) -> tuple[int, ...]:
        """The blocks remembered for ``video`` that are not in the cache now."""
        return tuple(b for b in self._videos.get(video) or () if b not in self._resident)

    def fetch(self, start: int, end: int) -> bytes:
        """The cache's fetch of one block: taken from the read-ahead when it was fetched
        ahead (waiting for it when in flight), else fetched now."""
        data = _POOL.take(self, start)
        if data is not None:
            self.taken += 1
            return data
        return self._fetcher(start, end)

    def fetch_ahead(self, number: int) -> bytes:
        start = number * self.block
        return self._fetcher(start, start + self.block)


class _Threads:
    """At most :data:`THREADS` daemon threads running what is submitted, in order, started
    as work comes (guarantee 5). A future cancelled before a thread takes it is not run."""

    def __init__(self) -> None:
        self._work: queue.SimpleQueue[_Work] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def submit(self, call: Callable[[int], bytes], arg: int) -> concurrent.futures.Future[bytes]:
        """``call(arg)`` on a thread; its future (called under the pool's lock)."""
        future: concurrent.futures.Future[bytes] = concurrent.futures.Future()
        self._work.put((future, call, arg))
        if len(self._threads) < THREADS:
            thread = threading.Thread(target=self._run, name="h5feed-read-ahead", daemon=True)
            thread.start()
            self._threads.append(thread)
        return future

    def _run(self) -> None:
        while True:
            future, call, arg = self._work.get()
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while pending
            try:
                future.set_result(call(arg))
            except BaseException as exc:  # the taker falls back to its own fetch
                future.set_exception(exc)


class _Pool:
    """The worker's read-ahead threads and its blocks fetched ahead (guarantee 2)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: _Threads | None = None
        self._pending: collections.OrderedDict[
            tuple[int, int], tuple[Source, concurrent.futures.Future[bytes]]
        ] = collections.OrderedDict()

    def submit(self, source: Source, number: int) -> bool:
        """Fetch block ``number`` of ``source`` ahead; False when it is pending already or
        no room can be made (every pending block still in flight)."""
        key = (id(source), number * source.block)
        with self._lock:
            if key in self._pending:
                return False
            if len(self._pending) >= MAX_PENDING and not self._drop_one():
                return False
            if self._executor is None:  # started on the first URL clip only
                self._executor = _Threads()
            future = self._executor.submit(source.fetch_ahead, number)
            self._pending[key] = (source, future)
            source.ahead += 1
            return True

    def _drop_one(self) -> bool:
        for key, (_source, future) in self._pending.items():  # oldest first
            if future.done():
                del self._pending[key]
                return True
        return False

    def take(self, source: Source, start: int) -> bytes | None:
        with self._lock:
            entry = self._pending.pop((id(source), start), None)
        if entry is None or entry[0] is not source:
            return None
        try:
            return entry[1].result(timeout=storage_config.READ_BUDGET_S)
        except Exception:  # failed or late: fetched as without read-ahead (guarantee 4)
            return None

    def forget(self, source: Source | None = None) -> None:
        """Drop ``source``'s blocks fetched ahead (None: every source's), cancelling those
        not started."""
        with self._lock:
            for key in [k for k, (s, _f) in self._pending.items() if source in (None, s)]:
                self._pending[key][1].cancel()
                del self._pending[key]


_POOL = _Pool()
atexit.register(_POOL.forget)  # leaving: no pending fetch is started (guarantee 5)
#: The open source of each URL in this process (the latest open of it).
_SOURCES: weakref.WeakValueDictionary[str, Source] = weakref.WeakValueDictionary()


def register(source: Source) -> None:
    """``source`` is the open file of its URL from now on (an earlier one is forgotten)."""
    previous = _SOURCES.get(source.url)
    if previous is not None and previous is not source:
        _POOL.forget(previous)
    _SOURCES[source.url] = source


def release(source: Source) -> None:
    """``source``'s file is closed: its blocks fetched ahead are dropped."""
    _POOL.forget(source)
    if _SOURCES.get(source.url) is source:
        del _SOURCES[source.url]


def active() -> bool:
    """Whether a file opened from a URL is open in this process (else nothing to read ahead)."""
    return bool(_SOURCES)


def _source(path: str) -> Source | None:
    return _SOURCES.get(path) if object_urls.is_url(path) else None


def ahead(path: str, video: str) -> int:
    """Fetch ahead the blocks a clip of ``video`` of the file at ``path`` will need (those
    remembered from its earlier reads, not cached now); the blocks submitted. Nothing for a
    path, a URL not open in this process or a video not read before."""
    source = _source(path)
    if source is None:
        return 0
    return sum(_POOL.submit(source, number) for number in source.wanted(video))


@contextlib.contextmanager
def recording(path: str, video: str) -> Iterator[None]:
    """Remember the blocks the reads inside touch as ``video``'s (for a URL's open file)."""
    source = _source(path)
    if source is None:
        yield
        return
    with source.recording(video):
        yield
