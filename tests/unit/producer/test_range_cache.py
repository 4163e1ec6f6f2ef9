"""The range cache of an object's bytes (h5feed/producer/files/range_cache.py), in process, in
front of a fetcher of bytes: every read is the object's bytes at that position, what is held
stays within the capacity, nothing held is fetched again, a read waits for a fetch in flight
instead of asking again, and a failed fetch keeps nothing."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h5feed.producer.files.range_cache import SMALL, RangeCache

DATA = bytes(range(256)) * 64  # 16 KiB


class Fetcher:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail = False

    def __call__(self, start: int, stop: int) -> bytes:
        self.calls.append((start, stop))
        assert self.gate.wait(30)
        if self.fail:
            raise ConnectionResetError("cut short")
        return DATA[start:stop]


def made(capacity: int = 4096, min_fetch: int = 256) -> tuple[RangeCache, Fetcher]:
    fetcher = Fetcher()
    cache = RangeCache(fetcher, len(DATA), capacity=capacity, min_fetch=min_fetch)
    cache.settle()
    return cache, fetcher


@settings(max_examples=150, deadline=None)
@given(
    reads=st.lists(st.tuples(st.integers(0, len(DATA)), st.integers(0, 3000)), max_size=40),
    capacity=st.sampled_from([64, 1024, 4096, 1 << 20]),
    min_fetch=st.sampled_from([1, 64, 512, 4096]),
    ensured=st.lists(st.tuples(st.integers(0, len(DATA)), st.integers(1, 600)), max_size=5),
)
def test_every_read_is_the_objects_bytes_and_what_is_held_stays_bounded(
    reads: list[tuple[int, int]],
    capacity: int,
    min_fetch: int,
    ensured: list[tuple[int, int]],
) -> None:
    cache, fetcher = made(capacity, min_fetch)
    for start, size in ensured:
        cache.ensure(start, start + size)
    for start, size in reads:
        assert cache._fetch(start, start + size) == DATA[start : start + size]
        assert cache._held <= capacity
        small = [c for c in cache._data.values() if len(c) <= SMALL]
        assert cache._small_held == sum(map(len, small))  # its two orders, kept in step
        assert (len(cache._small), len(cache._large)) == (len(small), len(cache._data) - len(small))
    for start, stop in fetcher.calls:
        assert 0 <= start < stop <= len(DATA)  # never past the object's end


def test_a_miss_fetches_whole_aligned_blocks_and_nothing_held_is_fetched_again() -> None:
    cache, fetcher = made(capacity=4096, min_fetch=256)
    assert cache._fetch(300, 310) == DATA[300:310]
    assert fetcher.calls == [(256, 512)]  # the aligned block around the read
    assert cache._fetch(260, 500) == DATA[260:500]
    assert fetcher.calls == [(256, 512)]  # held: no request
    assert cache._fetch(500, 530) == DATA[500:530]
    assert fetcher.calls[-1] == (512, 768)  # only what was missing, widened
    assert cache.peek(256, 768) == DATA[256:768] and cache.holds(256, 768)
    cache.ensure(1000, 1010)  # the read-ahead's exact ranges: not widened
    assert fetcher.calls[-1] == (1000, 1010)


def test_the_file_is_read_in_quarters_of_the_cache_until_a_clip_settles_it() -> None:
    fetcher = Fetcher()
    cache = RangeCache(fetcher, len(DATA), capacity=4096, min_fetch=256)
    cache._fetch(10, 20)  # opening: metadata spread through the file
    assert fetcher.calls == [(0, 1024)]
    cache.settle()
    cache._fetch(5000, 5010)
    assert fetcher.calls[-1] == (4864, 5120)


def test_a_paged_file_is_opened_by_whole_pages_within_a_quarter_of_the_cache() -> None:
    fetcher = Fetcher()
    cache = RangeCache(fetcher, len(DATA), capacity=4096, min_fetch=64)
    cache.open_in_pages(512)  # its metadata in pages of 512 bytes
    cache._fetch(600, 610)
    assert fetcher.calls == [(512, 1024)]  # the aligned page, not a quarter (1,024 bytes)
    cache.open_in_pages(1 << 20)  # pages larger than a quarter of the cache: a quarter
    cache._fetch(5000, 5010)
    assert fetcher.calls[-1] == (4096, 5120)
    cache.open_in_pages(8)  # smaller than the minimum fetch: the minimum
    cache._fetch(9000, 9010)
    assert fetcher.calls[-1] == (8960, 9024)
    cache.settle()
    cache.open_in_pages(512)  # settled (a clip was read): no effect
    cache._fetch(12000, 12010)
    assert fetcher.calls[-1] == (11968, 12032)


def test_the_least_recently_used_ranges_are_dropped_and_a_large_read_is_not_kept() -> None:
    cache, _fetcher = made(capacity=1024, min_fetch=256)
    for start in (0, 256, 512, 768, 1024):
        cache._fetch(start, start + 1)
    assert cache._held <= 1024 and not cache.holds(0, 256)  # the oldest went first
    held = cache._held
    assert cache._fetch(4000, 4000 + 600) == DATA[4000:4600]  # > half the cache
    assert cache._held == held  # fetched, returned, not kept


def test_small_ranges_outlive_larger_ones_within_an_eighth_of_the_capacity() -> None:
    """A video's frame descriptors (a small range, read by each of its clips) stay while its
    heap collections (larger ranges, read by one or two clips) come and go."""
    assert SMALL == 4096
    cache, fetcher = made(capacity=12288, min_fetch=1)
    cache.ensure(0, 100)  # the descriptors: the least recently used range from here on
    for start in (200, 5300, 10400):  # three collections of 5,100 bytes: over the capacity
        cache.ensure(start, start + 5100)
    assert cache.peek(0, 100) == DATA[:100]  # kept: the oldest large range went instead
    assert cache.peek(200, 5300) is None and cache._held <= 12288
    calls = len(fetcher.calls)
    assert cache._fetch(0, 100) == DATA[:100] and len(fetcher.calls) == calls
    # Small ranges beyond an eighth of the capacity go first, least recently used first.
    for start in range(200, 2200, 200):  # 2,100 small bytes in all: over the capacity
        cache.ensure(start, start + 200)
    assert cache.peek(0, 100) is None and cache._held <= 12288
    assert cache.peek(5300, 10400) is not None  # the large ranges stay this time


def test_the_range_just_fetched_is_kept_over_older_small_ones() -> None:
    """The eviction rule alone (``_insert``, as a fetch ends): a range that fills the
    capacity with the small ones held makes the small ones go, never itself, which the read
    that fetched it is about to take."""
    cache, _fetcher = made(capacity=8192, min_fetch=2048)
    cache.ensure(9000, 9100)
    cache.ensure(9200, 9300)
    with cache._lock:
        cache._insert(0, DATA[:8000])  # 8,200 bytes held: over the capacity
    assert cache.peek(0, 8000) == DATA[:8000]
    assert cache.peek(9000, 9100) is None and cache.peek(9200, 9300) == DATA[9200:9300]
    assert cache._held == 8100


def test_a_read_waits_for_the_fetch_in_flight_instead_of_asking_again() -> None:
    cache, fetcher = made()
    fetcher.gate.clear()
    ahead = threading.Thread(target=cache.ensure, args=(1000, 1500), name="h5feed-read-ahead")
    ahead.start()
    while not fetcher.calls:
        threading.Event().wait(0.005)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(cache._fetch(1100, 1200)))
    reader.start()
    threading.Event().wait(0.1)
    fetcher.gate.set()
    ahead.join(30)
    reader.join(30)
    assert got == [DATA[1100:1200]]
    assert fetcher.calls == [(1000, 1500)]  # one request for both
    assert cache.waited >= 1


def test_a_failed_fetch_raises_keeps_nothing_and_is_fetched_again() -> None:
    cache, fetcher = made()
    fetcher.fail = True
    with pytest.raises(ConnectionResetError):
        cache._fetch(100, 110)
    assert not cache.holds(100, 110) and cache._held == 0
    fetcher.fail = False
    assert cache._fetch(100, 110) == DATA[100:110]
    cache.ensure(2000, 2100)
    fetcher.fail = True
    assert cache._fetch(2010, 2020) == DATA[2010:2020]  # held: the failure is not met


def test_a_read_of_two_gaps_whose_first_fetch_fails_leaves_nothing_in_flight() -> None:
    """A read missing two separate ranges registers both as in flight; when the first
    fetch fails, the second is given up too, so no later read waits for a fetch that will
    never come."""
    cache, fetcher = made(capacity=4096, min_fetch=1)
    cache.ensure(100, 110)  # held: the read below misses [90, 100) and [110, 120)
    fetcher.fail = True
    with pytest.raises(ConnectionResetError):
        cache._fetch(90, 120)
    assert cache._flight == {}
    fetcher.fail = False
    assert cache._fetch(90, 120) == DATA[90:120]
    assert cache.waited == 0  # nothing was waited for
