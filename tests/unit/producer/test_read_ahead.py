"""The read-ahead of object storage's bytes (h5feed/producer/files/read_ahead.py), in process:
a range cache in front of a fetcher of bytes. What it shows: a clip's plan is fetched on a
read-ahead thread (its heap collections found from its descriptors), and the read then asks
nothing; without a plan, only the ranges a video's latest read touched are fetched ahead, and
only those not held; a plan that raises falls back to those; at most MAX_PENDING fetches are
queued or in flight; a path is never read ahead. (Against a real S3 server, through a counting
proxy: tests/system/test_object_storage.py; every layout's plan against h5py's own reads:
test_clip_bytes.py.)"""

from __future__ import annotations

import json
import pathlib
import threading
import time
import weakref
from collections.abc import Iterator

import pytest

from h5feed.common.config import ClipSpec
from h5feed.common.layouts import Groups
from h5feed.common.object_urls import BENCH_ENV, BENCH_SCHEME
from h5feed.common.protocol.messages import Row
from h5feed.producer.files import read_ahead
from h5feed.producer.files.clip_bytes import ClipBytes
from h5feed.producer.files.range_cache import RangeCache
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset
from h5feed.producer.worker.clips import ClipMaker
from h5feed.producer.worker.code_policy import NOTHING

URL = "s3://bucket/file.h5"
HEAP = 4096
#: An object of 16 KiB: two descriptors at 100 pointing at a heap collection at HEAP (its
#: header says 1,024 bytes), the rest filler.
DATA = bytearray(16384)
DATA[100:132] = b"".join(
    (10).to_bytes(4, "little") + HEAP.to_bytes(8, "little") + (i + 1).to_bytes(4, "little")
    for i in range(2)
)
DATA[HEAP : HEAP + 16] = b"GCOL\1\0\0\0" + (1024).to_bytes(8, "little")


class Fetcher:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int, str]] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, start: int, stop: int) -> bytes:
        self.calls.append((start, stop, threading.current_thread().name))
        assert self.gate.wait(30)
        return bytes(DATA[start:stop])


@pytest.fixture()
def source(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[read_ahead.Source, Fetcher]]:
    """The only open URL file of this process (files earlier tests left open are hidden:
    :func:`read_ahead.reach` looks at every open one)."""
    monkeypatch.setattr(read_ahead, "_SOURCES", weakref.WeakValueDictionary())
    fetcher = Fetcher()
    cache = RangeCache(fetcher, len(DATA), capacity=8192, min_fetch=64)
    cache.settle()
    made = read_ahead.Source(URL, cache)
    read_ahead.register(made)
    try:
        yield made, fetcher
    finally:
        fetcher.gate.set()
        read_ahead.release(made)


def settled(fetcher: Fetcher, count: int) -> list[tuple[int, int, str]]:
    deadline = time.monotonic() + 30
    while len(fetcher.calls) < count and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)  # nothing more follows
    return fetcher.calls


def test_a_plans_descriptors_and_their_heap_collection_are_fetched_ahead(
    source: tuple[read_ahead.Source, Fetcher],
) -> None:
    made, fetcher = source
    plan = ClipBytes(ranges=((96, 140),), descriptors=((100, 132),))
    assert read_ahead.ahead(URL, "v", lambda: plan, key=(0, 1)) == 1
    calls = settled(fetcher, 2)
    assert [(a, b) for a, b, _t in calls] == [(96, 140), (HEAP, HEAP + 1024)]
    assert all(t.startswith("h5feed-read-ahead") for _a, _b, t in calls)
    assert made.cache._fetch(HEAP + 16, HEAP + 26) == bytes(DATA[HEAP + 16 : HEAP + 26])
    assert len(fetcher.calls) == 2  # the read asked nothing
    assert read_ahead.ahead("/data/file.h5", "v", lambda: plan) == 0  # a path: never


def test_reach_is_as_many_clips_as_fit_in_half_the_smallest_cache(
    source: tuple[read_ahead.Source, Fetcher],
) -> None:
    """Clips are read ahead as far as their bytes stay in the cache until read: more would
    drop bytes fetched ahead before their clip is cut (each fetched twice)."""
    made, _fetcher = source
    assert read_ahead.reach() == read_ahead.FIRST_REACH  # no clip's bytes known yet
    made.fetch_plan(ClipBytes(ranges=((96, 140),), descriptors=((100, 132),)))
    assert made.clip_bytes == 44 + 1024  # its rows, then the collection they point at
    assert read_ahead.reach() == read_ahead.MIN_REACH  # 4,096 bytes hold 3 such clips
    made.clip_bytes = 512
    assert read_ahead.reach() == 8192 // 2 // 512
    made.clip_bytes = 64  # 64 clips would fit: capped
    assert read_ahead.reach() == read_ahead.MAX_REACH


def test_without_a_plan_a_videos_latest_read_is_fetched_ahead_once_dropped(
    source: tuple[read_ahead.Source, Fetcher],
) -> None:
    made, fetcher = source
    for _read in range(2):  # remembered from the second read on
        with read_ahead.recording(URL, "v"):
            made.touch(2000, 100)
            made.touch(2150, 10)  # within a minimum fetch of the first: one range
    assert made.wanted("v") == ((2000, 2160),)
    assert read_ahead.ahead(URL, "v") == 1
    settled(fetcher, 1)
    assert fetcher.calls[-1][:2] == (2000, 2160)
    assert made.wanted("v") == ()  # held now: nothing to fetch
    assert read_ahead.ahead(URL, "never read") == 1  # submitted, fetches nothing
    assert len(settled(fetcher, 1)) == 1


def test_a_plan_that_raises_falls_back_to_the_learnt_ranges(
    source: tuple[read_ahead.Source, Fetcher],
) -> None:
    made, fetcher = source
    for _read in range(2):
        with read_ahead.recording(URL, "v"):
            made.touch(3000, 50)

    def refused() -> ClipBytes:
        raise KeyError("the clip's own read says why, by name")

    assert read_ahead.ahead(URL, "v", refused) == 1
    assert [(a, b) for a, b, _t in settled(fetcher, 1)] == [(3000, 3050)]


def test_at_most_max_pending_fetches_are_queued_or_in_flight(
    source: tuple[read_ahead.Source, Fetcher],
) -> None:
    _made, fetcher = source
    fetcher.gate.clear()  # every fetch ahead stays in flight
    count = read_ahead.MAX_PENDING + 8
    plans = [ClipBytes(ranges=((5000 + 64 * i, 5010 + 64 * i),)) for i in range(count)]
    submitted = sum(
        read_ahead.ahead(URL, "v", lambda plan=plan: plan, key=i) for i, plan in enumerate(plans)
    )
    assert submitted == read_ahead.MAX_PENDING  # the rest refused while all are pending
    assert read_ahead.ahead(URL, "v", lambda: plans[0], key=0) == 0  # the same clip: once
    fetcher.gate.set()


def test_a_done_fetch_is_neither_pending_nor_in_the_way(
    source: tuple[read_ahead.Source, Fetcher],
) -> None:
    """A clip fetched already may be fetched ahead again (its bytes may have been dropped),
    and done fetches make room for new ones: only those queued or in flight count."""
    made, fetcher = source
    count = read_ahead.MAX_PENDING
    plans = [ClipBytes(ranges=((5000 + 64 * i, 5010 + 64 * i),)) for i in range(count)]
    assert sum(read_ahead.ahead(URL, "v", lambda p=p: p, key=i) for i, p in enumerate(plans))
    settled(fetcher, count)  # every one done: none pending any more
    assert read_ahead.ahead(URL, "v", lambda: plans[0], key=0) == 1  # the same clip again
    assert read_ahead.ahead(URL, "v", lambda: plans[1], key="new") == 1  # room was made
    assert made.ahead == count + 2


_EXITING = """
import time
from h5feed.producer.files import read_ahead

def slow(start, end):
    time.sleep(30)  # a request that hangs to its timeout
    return b"x" * (end - start)

from h5feed.producer.files.clip_bytes import ClipBytes
from h5feed.producer.files.range_cache import RangeCache
cache = RangeCache(slow, 1 << 20, capacity=1 << 20, min_fetch=64)
source = read_ahead.Source("s3://bucket/file.h5", cache)
read_ahead.register(source)
submitted = sum(
    read_ahead.ahead(source.url, "v", lambda n=n: ClipBytes(((64 * n, 64 * n + 8),)), key=n)
    for n in range(read_ahead.MAX_PENDING)
)
print(submitted, flush=True)
"""


@pytest.mark.processes
def test_a_process_exiting_with_fetches_in_flight_does_not_wait_for_them() -> None:
    """A worker leaving with read-ahead in flight (requests that may take a request's whole
    timeout) and pending exits at once: pending fetches are cancelled, those in flight are
    left behind (daemon threads), not joined."""
    import subprocess
    import sys
    import time

    child = subprocess.Popen(
        [sys.executable, "-c", _EXITING], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # its fetches are submitted: from here, it exits
        began = time.monotonic()
        child.wait(timeout=120)
        waited = time.monotonic() - began
    finally:
        child.kill()
        child.communicate(timeout=30)
    assert line.strip() == str(read_ahead.MAX_PENDING), child.stderr
    assert child.returncode == 0
    assert waited < 10, f"the exit waited {waited:.1f} s for fetches ahead"


def test_a_units_rows_and_those_of_the_units_waiting_behind_it_are_read_ahead(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker making a unit of a URL's file fetches ahead what its next rows read, the
    rows of the units waiting behind it included (``upcoming``), each clip once: through
    fsspec (the bench's filesystem over local files, no latency), the real reader and cache."""
    spec = SampleSpec(files=1, videos_per_file=8, min_frames=8, max_frames=10, height=24,
                      width=32, seed=4)  # fmt: skip
    [path] = make_sample_dataset(tmp_path / "data", spec)
    monkeypatch.setenv(BENCH_ENV, json.dumps({"root": str(tmp_path), "latency_ms": 0}))
    url = f"{BENCH_SCHEME}://data/{path.name}"
    maker = ClipMaker(ClipSpec(clip_len=2, resize=(24, 32)), Groups(), NOTHING)
    try:
        maker.open_and_index(0, url, None)
        source = read_ahead._SOURCES[url]
        rows = [Row(v, 0, v, 1, 0.5, 0.5, False, v) for v in range(8)]
        maker.produce(rows[:2])
        assert source.ahead == 2  # its own two rows
        maker.produce(rows[2:4], upcoming=rows[4:7])
        assert source.ahead == 2 + 5  # its two and the three waiting
    finally:
        maker.close()
