"""Read-ahead of a worker's next clips on object storage: their bytes fetched on a small
thread pool while the current clip decodes, outside h5py's own (sequential) reads.

h5py reads a file object one call at a time, so a clip whose bytes are not cached waits one
round trip per miss, in turn. Two ways to know a clip's bytes before h5py asks:

* **Planned** (:class:`~h5feed.producer.files.clip_bytes.ClipBytes`, made by the layout's
  reader on the read-ahead thread: it opens the video's datasets first if need be, which
  overlaps that metadata's requests with the worker's decoding): the rows of the clip's
  datasets as stored, and for variable-length frames (the groups, pack, flat and video
  layouts) the heap collections their descriptors point at, parsed from the descriptors once
  fetched (:meth:`Source.fetch_plan`). Exact, from a video's first clip on.
* **Learnt** (no plan: another layout, a compressed dataset, a video whose dataset is not
  open yet): the byte ranges a video's latest read touched (:func:`recording`), from its
  second read on (its first also reads the dataset's metadata, which HDF5 then keeps).

Either way the bytes go into the open file's :class:`~h5feed.producer.files.range_cache.RangeCache`,
where h5py's read takes them (or waits for them while in flight) instead of asking again.

Guarantees:

1. Only files opened from a URL (:func:`h5feed.producer.files.remote_files.open_h5`) take part:
   :func:`ahead` and :func:`recording` do nothing for a path (local files are read as before).
2. Bounded: at most :data:`THREADS` requests in flight per worker process, at most
   :data:`MAX_PENDING` clips' fetches queued or in flight (a new one is refused while all are
   in flight); a plan's heap collections at most a quarter of the file's cache; learnt ranges
   of at most an eighth of it per video, :data:`MAX_VIDEOS` videos and
   :data:`MAX_COLLECTIONS` collection sizes remembered per open file.
3. The only h5py calls off the worker's thread are a plan's (opening datasets, asking where
   they are stored), under h5py's lock like every h5py call; the fetches themselves never
   call h5py (a read of the worker's, holding that lock, may be waiting for them).
4. Only bytes inside the object are fetched, with the open file's own ranged GET (pinned to
   its ETag, like every read of it): those h5py's reads touched before, or those the plan
   names (rows of the clip's datasets, and the collections their descriptors point at,
   checked to lie in the file: :mod:`~h5feed.producer.files.clip_bytes`).
5. Never a changed result: the cache returns the object's bytes whoever fetched them; a fetch
   ahead that fails is fetched again by h5py's read as without read-ahead (with its retries).
6. A process leaving never waits for its fetches ahead: those not started are cancelled
   (when their file closes, and at exit), and those in flight (a request may take its
   whole timeout) run on daemon threads, which the interpreter does not join
   (:class:`_Threads`; a ``ThreadPoolExecutor``'s threads are joined at exit, each pending
   fetch run first).
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import contextlib
import queue
import threading
import weakref
from collections.abc import Callable, Hashable, Iterator

from h5feed.common import object_urls
from h5feed.producer.files import clip_bytes
from h5feed.producer.files.clip_bytes import ClipBytes, Range
from h5feed.producer.files.range_cache import RangeCache

__all__ = [
    "MAX_COLLECTIONS",
    "MAX_PENDING",
    "MAX_REACH",
    "MAX_VIDEOS",
    "THREADS",
    "Source",
    "active",
    "ahead",
    "reach",
    "recording",
    "register",
    "release",
    "release_url",
]

#: Requests in flight per worker process, and clips' fetches queued or in flight.
THREADS = 16
MAX_PENDING = 48
#: Clips read ahead of the one being cut (:func:`reach`): before any clip's bytes are
#: known, then as many as fit in half the smallest cache of the open files, within these.
FIRST_REACH, MIN_REACH, MAX_REACH = 8, 4, 32
#: Videos whose learnt ranges, and collections whose sizes, are remembered per open file.
MAX_VIDEOS = 100_000
MAX_COLLECTIONS = 100_000
#: The size assumed for a heap collection not seen yet (then the last one's seen).
FIRST_COLLECTION_GUESS = 64 << 10
_HEADER = 16  # a collection header's bytes with 8-byte lengths ("GCOL", version, size)

_Work = tuple["concurrent.futures.Future[None]", Callable[[], None]]


class Source:
    """One open URL file: its range cache, what each video's reads touched, and the sizes of
    the heap collections seen."""

    def __init__(self, url: str, cache: RangeCache) -> None:
        self.url, self.cache = url, cache
        self._videos: collections.OrderedDict[str, tuple[Range, ...] | None]
        self._videos = collections.OrderedDict()
        self._recording: list[Range] | None = None
        self._collections: dict[int, int] = {}
        self._guess = min(FIRST_COLLECTION_GUESS, cache.capacity // 8)
        self.ahead = 0  # fetches ahead submitted (a figure for tests)
        self.clip_bytes = 0  # the bytes a planned clip fetched, a running mean (0: none yet)

    def touch(self, position: int, size: int) -> None:
        """A read of ``size`` bytes at ``position`` (recorded while :meth:`recording`)."""
        if size > 0 and self._recording is not None:
            self._recording.append((position, position + size))

    @contextlib.contextmanager
    def recording(self, video: str) -> Iterator[None]:
        self.cache.settle()  # a clip is read: the file's metadata is read by now
        self._recording = []
        try:
            yield
        finally:
            reads, self._recording = self._recording, None
        if video not in self._videos:  # its first read: HDF5 read the dataset's metadata
            self._videos[video] = None  # too, which it keeps in its own cache: not remembered
        else:
            merged = clip_bytes.merged(reads, self.cache.min_fetch)
            if merged and sum(b - a for a, b in merged) <= self.cache.capacity // 8:
                self._videos[video] = merged  # the latest read's: what a clip needs
        self._videos.move_to_end(video)
        while len(self._videos) > MAX_VIDEOS:
            self._videos.popitem(last=False)

    def wanted(self, video: str) -> tuple[Range, ...]:
        """The ranges learnt for ``video`` that are not in the cache now."""
        return tuple(r for r in self._videos.get(video) or () if not self.cache.holds(*r))

    def fetch_ranges(self, ranges: tuple[Range, ...]) -> None:
        for start, stop in ranges:
            self.cache.ensure(start, stop)

    def fetch_plan(self, plan: ClipBytes) -> None:
        """Fetch ``plan``'s ranges, then the heap collections its descriptors point at,
        learning each collection's size from its header (guarantee 3)."""
        ranges = clip_bytes.merged(plan.ranges, clip_bytes.MERGE_GAP)
        self.fetch_ranges(ranges)  # one request
        bound, size = self.cache.capacity // 4, self.cache.size
        planned = sum(b - a for a, b in ranges)
        for start, stop in plan.descriptors:
            self.cache.ensure(start, stop)
            described = self.cache.peek(start, stop)
            if described is None:
                continue  # dropped already, or its fetch failed: h5py reads it itself
            addresses = clip_bytes.heap_addresses(described, plan.sizes, size)
            spans = clip_bytes.spans(addresses, self._collections, self._guess)
            if sum(b - a for a, b in spans) > bound:
                continue
            self.fetch_ranges(tuple(spans))
            planned += sum(b - a for a, b in spans)
            for address in addresses:
                self._learn(address, plan.sizes, bound)
        # A running mean (not exact under threads: a rough figure for reach() is enough).
        self.clip_bytes = planned if not self.clip_bytes else (7 * self.clip_bytes + planned) // 8

    def _learn(self, address: int, sizes: tuple[int, int], bound: int) -> None:
        if address in self._collections:
            return
        header = self.cache.peek(address, address + 8 + sizes[1])
        found = None if header is None else clip_bytes.collection_size(header, sizes)
        if found is None or not _HEADER <= found <= bound or address + found > self.cache.size:
            return
        if len(self._collections) >= MAX_COLLECTIONS:
            self._collections.clear()
        self._collections[address] = self._guess = found
        self.cache.ensure(address, address + found)  # the part the guess left out, if any


class _Threads:
    """At most :data:`THREADS` daemon threads running what is submitted, in order, started
    as work comes (guarantee 6). A future cancelled before a thread takes it is not run."""

    def __init__(self) -> None:
        self._work: queue.SimpleQueue[_Work] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def submit(self, call: Callable[[], None]) -> concurrent.futures.Future[None]:
        """``call()`` on a thread; its future (called under the pool's lock)."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._work.put((future, call))
        if len(self._threads) < THREADS:
            thread = threading.Thread(target=self._run, name="h5feed-read-ahead", daemon=True)
            thread.start()
            self._threads.append(thread)
        return future

    def _run(self) -> None:
        while True:
            future, call = self._work.get()
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while pending
            try:
                call()
                future.set_result(None)
            except BaseException as exc:  # h5py's read fetches it itself (guarantee 5)
                future.set_exception(exc)


class _Pool:
    """The worker's read-ahead threads and its fetches queued or in flight (guarantee 2)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: _Threads | None = None
        self._pending: collections.OrderedDict[
            tuple[int, Hashable], tuple[Source, concurrent.futures.Future[None]]
        ] = collections.OrderedDict()

    def submit(self, source: Source, key: Hashable, call: Callable[[], None]) -> bool:
        """Run ``call`` ahead for ``source``; False when the same ``key`` is queued or in
        flight, or no room can be made (every pending fetch in flight)."""
        full_key = (id(source), key)
        with self._lock:
            # Done fetches are dropped only when they are in the way (this key's, or the
            # room): a clip's rows are offered again and again as later rows come within
            # reach, and a scan of every pending fetch on each offer cost the worker's main
            # thread more than the rest of the offer (measured with cProfile).
            same = self._pending.get(full_key)
            if same is not None:
                if not same[1].done():
                    return False
                del self._pending[full_key]
            if len(self._pending) >= MAX_PENDING:
                for done in [k for k, (_s, f) in self._pending.items() if f.done()]:
                    del self._pending[done]
                if len(self._pending) >= MAX_PENDING:
                    return False
            if self._executor is None:  # started on the first URL clip only
                self._executor = _Threads()
            self._pending[full_key] = (source, self._executor.submit(call))
            source.ahead += 1
            return True

    def forget(self, source: Source | None = None) -> None:
        """Cancel ``source``'s fetches not started (None: every source's)."""
        with self._lock:
            for key in [k for k, (s, _f) in self._pending.items() if source in (None, s)]:
                self._pending.pop(key)[1].cancel()


_POOL = _Pool()
atexit.register(_POOL.forget)  # leaving: no pending fetch is started (guarantee 6)
#: The open source of each URL in this process (the latest open of it).
_SOURCES: weakref.WeakValueDictionary[str, Source] = weakref.WeakValueDictionary()


def register(source: Source) -> None:
    """``source`` is the open file of its URL from now on (an earlier one is forgotten)."""
    previous = _SOURCES.get(source.url)
    if previous is not None and previous is not source:
        _POOL.forget(previous)
    _SOURCES[source.url] = source


def release(source: Source) -> None:
    """``source``'s file is closed: its fetches not started are cancelled."""
    _POOL.forget(source)
    if _SOURCES.get(source.url) is source:
        del _SOURCES[source.url]


def release_url(url: str) -> None:
    """``url`` is read from elsewhere from now on (its node-local copy:
    :mod:`~h5feed.producer.files.node_cache`): its open source, if any, is released, so no
    fetch ahead asks the store for it again."""
    source = _SOURCES.get(url)
    if source is not None:
        release(source)


def reach() -> int:
    """How many clips ahead of the one being cut to fetch: :data:`FIRST_REACH` until a
    planned clip's bytes are known, then as many clips as fit in half the smallest cache of
    the URL files open in this process, within :data:`MIN_REACH` and :data:`MAX_REACH`
    (more would drop clips' bytes fetched ahead before they are read: fetched twice)."""
    fits = [s.cache.capacity // 2 // s.clip_bytes for s in list(_SOURCES.values()) if s.clip_bytes]
    if not fits:
        return FIRST_REACH
    return max(MIN_REACH, min(MAX_REACH, min(fits)))


def active() -> bool:
    """Whether a file opened from a URL is open in this process (else nothing to read ahead)."""
    return bool(_SOURCES)


def _source(path: str) -> Source | None:
    return _SOURCES.get(path) if object_urls.is_url(path) else None


def ahead(
    path: str,
    video: str,
    plan: Callable[[], ClipBytes | None] | None = None,
    key: Hashable = None,
) -> int:
    """Fetch ahead what a clip of ``video`` of the file at ``path`` will read: on a read-ahead
    thread, the bytes ``plan()`` names (the layout reader's
    :meth:`~h5feed.producer.layouts.base.LayoutReader.clip_bytes`), else (no plan, None, or
    it raised) the ranges learnt for the video that are not cached then. ``key`` names the
    clip (the same key is not fetched twice while queued or in flight). The fetches submitted
    (0 or 1). Nothing for a path or a URL not open in this process."""
    source = _source(path)
    if source is None:
        return 0
    return int(_POOL.submit(source, (video, key), lambda: _prepare(source, video, plan)))


def _prepare(source: Source, video: str, plan: Callable[[], ClipBytes | None] | None) -> None:
    made = None
    if plan is not None:
        try:
            made = plan()
        except Exception:  # a video the clip's own read refuses, by name (guarantee 4)
            made = None
    if made is not None:
        source.fetch_plan(made)
    else:
        source.fetch_ranges(source.wanted(video))


@contextlib.contextmanager
def recording(path: str, video: str) -> Iterator[None]:
    """Remember the ranges the reads inside touch as ``video``'s (for a URL's open file)."""
    source = _source(path)
    if source is None:
        yield
        return
    with source.recording(video):
        yield
