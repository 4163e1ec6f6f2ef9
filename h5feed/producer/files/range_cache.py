"""The bytes of one object held in a worker: the exact ranges fetched, not whole blocks.

HDF5 reads a file in small pieces (a B-tree node, a video's frame descriptors, a heap
collection of a few JPEGs). A block cache turns each miss into a whole block (fsspec's, 256 KiB
to 4 MiB), so a clip of 30 KB read from a file much larger than the cache costs 10 to 30 times
its bytes. :class:`RangeCache` fetches what a read misses, widened to at least
:attr:`~RangeCache.min_fetch` bytes (so HDF5's runs of small adjacent reads are one request;
wider, a quarter of the cache, until the first clip is read (:meth:`~RangeCache.settle`):
opening and indexing a file reads metadata spread through it, in many small pieces; a file
whose metadata lies in pages of its own is read by whole pages: :meth:`~RangeCache.open_in_pages`),
never re-fetching what it holds, and lets the read-ahead fill it with the exact ranges a clip
will need (:meth:`~RangeCache.ensure`, from another thread).

It stands in for fsspec's cache of an open file (``file.cache``): fsspec's buffered file
calls :meth:`_fetch` for every read.

Guarantees:

1. The bytes are the object's: every byte returned was fetched by the file's own ranged GET
   (pinned to the ETag it was opened with) for that position; nothing is assembled from
   another object or position.
2. Bounded: the ranges held total at most ``capacity`` bytes (least recently used dropped
   first, ranges of at most :data:`SMALL` bytes after the larger ones while they hold at
   most an eighth of the capacity); a read or a range to ensure larger than half of it is
   fetched and returned without being kept. At most one fetch of a byte is in flight: a
   read that needs bytes a read-ahead is fetching waits for that fetch (at most
   :data:`~h5feed.common.storage_config.READ_BUDGET_S`) instead of asking again, and fetches
   them itself if it failed.
3. Thread-safe: one lock guards the ranges; no request is made while holding it.
4. A fetch that fails raises to the caller (the file's reader retries it:
   :mod:`h5feed.producer.files.remote_files`); nothing of it is kept.
"""

from __future__ import annotations

import bisect
import collections
import concurrent.futures
import itertools
import threading
from collections.abc import Callable

from h5feed.common import storage_config

__all__ = ["RangeCache"]

Fetcher = Callable[[int, int], bytes]
#: Ranges of at most this many bytes (a video's frame descriptors, its CRCs) are dropped
#: only after the larger ones, while they hold at most 1/SMALL_SHARE of the capacity: a
#: video's descriptors are read by each of its clips, its heap collections by one or two.
SMALL, SMALL_SHARE = 4096, 8
#: Rounds of "fetch what is missing, then assemble" one read may take before it is served
#: by one fetch of its own (ranges dropped meanwhile by other threads' fetches).
_MAX_ROUNDS = 8


class RangeCache:
    """The cached byte ranges of one open object (module docstring)."""

    name = "h5feed-ranges"

    def __init__(self, fetcher: Fetcher, size: int, capacity: int, min_fetch: int) -> None:
        if capacity <= 0 or min_fetch <= 0:
            raise ValueError("a range cache needs a positive capacity and minimum fetch")
        self.fetcher, self.size, self.capacity = fetcher, size, capacity
        self._settled = min(min_fetch, capacity // 4 or 1)
        self.min_fetch = capacity // 4 or 1  # while the file is opened and indexed
        self._opening = True
        self.blocksize = self._settled  # what fsspec's repr and stats read
        self._lock = threading.Lock()
        self._data: dict[int, bytes] = {}  # the held ranges by start
        # Their least recently used order, small ranges apart (guarantee 2).
        self._large: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._small: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._starts: list[int] = []  # the held ranges' starts, sorted (disjoint ranges)
        self._held = self._small_held = 0
        self._flight: dict[tuple[int, int], concurrent.futures.Future[None]] = {}
        self.waited = 0  # reads that waited for a fetch in flight (a figure for tests)

    # -- fsspec's interface ----------------------------------------------------------------
    def _fetch(self, start: int | None, stop: int | None) -> bytes:
        """The bytes ``[start, stop)`` (clamped to the object), fetching what is missing."""
        start, stop = max(0, start or 0), min(self.size, self.size if stop is None else stop)
        if start >= stop:
            return b""
        if stop - start > self.capacity // 2:
            return self.fetcher(start, stop)  # too large to keep (guarantee 2)
        for _round in range(_MAX_ROUNDS):
            data = self._fill(start, stop, widen=True)
            if data is not None:
                return data
        return self.fetcher(start, stop)

    def read(self, start: int, stop: int) -> bytes:
        """The bytes ``[start, stop)``, as :meth:`_fetch` (for readers other than fsspec's
        file: :mod:`~h5feed.producer.files.heap_reads`)."""
        return self._fetch(start, stop)

    def open_in_pages(self, page: int) -> None:
        """The file keeps its metadata in pages of ``page`` bytes (HDF5's paged file-space
        strategy, as ``h5feed pack`` writes): until it settles, a miss is widened to its
        aligned page (at least the minimum fetch, at most a quarter of the capacity) rather
        than to a quarter of the capacity, so opening it reads its metadata pages and not
        the frames around them."""
        if self._opening:
            self.min_fetch = max(self._settled, min(page, self.capacity // 4 or 1))

    def settle(self) -> None:
        """The file is open and indexed: misses are widened to the minimum fetch from now on."""
        self.min_fetch, self._opening = self._settled, False

    def _log_stats(self) -> str:  # fsspec's debug log of a read
        return f", {self.name}: {self._held} bytes held in {len(self._data)} ranges"

    # -- the read-ahead's interface -------------------------------------------------------
    def ensure(self, start: int, stop: int) -> None:
        """Fetch what of ``[start, stop)`` is neither held nor in flight, exactly (not
        widened); wait for what is in flight. Nothing for a range larger than half the
        capacity (it would not be kept)."""
        start, stop = max(0, start), min(self.size, stop)
        if start >= stop or stop - start > self.capacity // 2:
            return
        for _round in range(_MAX_ROUNDS):
            if self._fill(start, stop, widen=False, keep=False) is not None:
                return

    def peek(self, start: int, stop: int) -> bytes | None:
        """The bytes ``[start, stop)`` when all held now, else None (no request)."""
        with self._lock:
            return self._assemble(start, min(stop, self.size))

    def holds(self, start: int, stop: int) -> bool:
        """Whether every byte of ``[start, stop)`` is held or being fetched now."""
        with self._lock:
            return not self._gaps(start, min(stop, self.size), with_flight=True)

    # -- inside ----------------------------------------------------------------------------
    def _fill(self, start: int, stop: int, widen: bool, keep: bool = True) -> bytes | None:
        """One round: the bytes when all are held (``keep``: assembled; else b""), else
        fetch the gaps (or wait for those in flight) and return None."""
        with self._lock:
            gaps = self._gaps(start, stop, with_flight=False)
            if not gaps:
                return self._assemble(start, stop) if keep else b""
            waits = [f for g in gaps for f in self._flying(*g)]
            mine: list[tuple[int, int]] = []
            if not waits:
                for gap in gaps:
                    piece = self._widened(*gap) if widen else gap
                    mine.append(piece)
                    self._flight[piece] = concurrent.futures.Future()
        if waits:
            self.waited += 1
            concurrent.futures.wait(waits, timeout=storage_config.READ_BUDGET_S)
            return None
        for i, piece in enumerate(mine):
            try:
                self._fetch_piece(*piece)
            except BaseException as exc:  # the pieces not fetched yet: nobody may wait on them
                self._abandon(mine[i + 1 :], exc)
                raise
        return None

    def _abandon(self, pieces: list[tuple[int, int]], exc: BaseException) -> None:
        with self._lock:
            futures = [self._flight.pop(piece) for piece in pieces]
        for future in futures:
            future.set_exception(exc)  # a waiter fetches them itself (guarantee 2)

    def _fetch_piece(self, start: int, stop: int) -> None:
        future = self._flight[(start, stop)]
        try:
            data = self.fetcher(start, stop)
            if len(data) != stop - start:
                raise ConnectionError(f"{len(data)} bytes for a range of {stop - start}")
        except BaseException as exc:
            with self._lock:
                del self._flight[(start, stop)]
            future.set_exception(exc)
            raise
        with self._lock:
            del self._flight[(start, stop)]
            self._insert(start, data)
        future.set_result(None)

    def _gaps(self, start: int, stop: int, with_flight: bool) -> list[tuple[int, int]]:
        """The parts of ``[start, stop)`` not held (nor in flight, ``with_flight``)."""
        covered = [(s, s + len(self._data[s])) for s in self._overlapping(start, stop)]
        if with_flight:
            covered += [r for r in self._flight if r[0] < stop and r[1] > start]
        gaps, at = [], start
        for s, e in sorted(covered):
            if s > at:
                gaps.append((at, min(s, stop)))
            at = max(at, e)
            if at >= stop:
                break
        if at < stop:
            gaps.append((at, stop))
        return gaps

    def _flying(self, start: int, stop: int) -> list[concurrent.futures.Future[None]]:
        return [f for (s, e), f in self._flight.items() if s < stop and e > start]

    def _overlapping(self, start: int, stop: int) -> list[int]:
        """The starts of the held ranges that overlap ``[start, stop)``, in order."""
        i = bisect.bisect_right(self._starts, start) - 1
        if i < 0 or self._starts[i] + len(self._data[self._starts[i]]) <= start:
            i += 1
        found = []
        while i < len(self._starts) and self._starts[i] < stop:
            found.append(self._starts[i])
            i += 1
        return found

    def _widened(self, start: int, stop: int) -> tuple[int, int]:
        """``[start, stop)`` widened to whole :attr:`min_fetch`-aligned blocks, within the
        neighbouring held or in-flight ranges (as a block cache would fetch, without
        fetching again what is held)."""
        block = self.min_fetch
        low = max(self._previous_edge(start), start - start % block)
        high = min(self._next_edge(start), self.size, -(-stop // block) * block)
        return low, max(high, stop)

    def _previous_edge(self, position: int) -> int:
        """Where the held or in-flight range before ``position`` ends (0 when none does)."""
        i = bisect.bisect_right(self._starts, position) - 1
        edge = self._starts[i] + len(self._data[self._starts[i]]) if i >= 0 else 0
        for _s, e in self._flight:
            if edge < e <= position:
                edge = e
        return min(edge, position)

    def _next_edge(self, position: int) -> int:
        """Where the next held or in-flight range after ``position`` begins (a widened
        fetch stops there: ranges stay disjoint); the object's end when none does."""
        i = bisect.bisect_right(self._starts, position)
        edge = self._starts[i] if i < len(self._starts) else self.size
        for s, _e in self._flight:
            if position < s < edge:
                edge = s
        return edge

    def _assemble(self, start: int, stop: int) -> bytes | None:
        if self._gaps(start, stop, with_flight=False):
            return None
        parts = []
        for s in self._overlapping(start, stop):
            chunk = self._data[s]
            self._order(chunk).move_to_end(s)
            parts.append(chunk[max(0, start - s) : stop - s])
        return b"".join(parts)

    def _order(self, chunk: bytes) -> collections.OrderedDict[int, None]:
        return self._small if len(chunk) <= SMALL else self._large

    def _insert(self, start: int, data: bytes) -> None:
        if start in self._data:  # unreachable while ranges stay disjoint: keep the newer
            self._drop(start)
        self._data[start] = data
        self._order(data)[start] = None
        bisect.insort(self._starts, start)
        self._held += len(data)
        self._small_held += len(data) if len(data) <= SMALL else 0
        while self._held > self.capacity and len(self._data) > 1:
            self._drop(self._victim(start))

    def _victim(self, newest: int) -> int:
        """The range to drop: the least recently used large one, or small one while small
        ranges hold more than their share (or no large one is held); never ``newest`` (the
        range just fetched, for the read waiting on it) while another is held."""
        small_first = not self._large or self._small_held > self.capacity // SMALL_SHARE
        for order in (self._small, self._large) if small_first else (self._large, self._small):
            for candidate in itertools.islice(order, 2):
                if candidate != newest:
                    return candidate
        return newest  # unreachable while another range is held

    def _drop(self, start: int) -> None:
        chunk = self._data.pop(start)
        del self._order(chunk)[start]
        self._starts.pop(bisect.bisect_left(self._starts, start))
        self._held -= len(chunk)
        self._small_held -= len(chunk) if len(chunk) <= SMALL else 0
