"""The read-ahead of object storage's blocks (h5feed/producer/files/read_ahead.py), in process:
a block cache's fetch in front of a fetcher of bytes. What it shows: only blocks a recorded
read touched are fetched ahead, and only those not cached; a block fetched ahead is taken
without a fetch of its own; a fetch ahead that fails is fetched again as without read-ahead;
at most MAX_PENDING blocks are pending; a path is never read ahead. (Against a real S3 server,
through a counting proxy: tests/system/test_object_storage.py.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from h5feed.producer.files import read_ahead

URL = "s3://bucket/file.h5"
DATA = bytes(range(256)) * 4  # 1 KiB: 256 blocks of 4 bytes


class Cache:
    """What read_ahead uses of fsspec's BlockCache: ``blocksize`` and ``fetcher``."""

    blocksize = 4

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []  # (start, thread name)
        self.fail_ahead = False
        self.gate = threading.Event()
        self.gate.set()
        self.fetcher = self.fetch

    def fetch(self, start: int, end: int) -> bytes:
        name = threading.current_thread().name
        self.calls.append((start, name))
        if name.startswith("h5feed-read-ahead"):
            assert self.gate.wait(30)
            if self.fail_ahead:
                raise ConnectionResetError("cut short")
        return DATA[start:end]


@pytest.fixture()
def source() -> Iterator[tuple[read_ahead.Source, Cache]]:
    cache = Cache()
    made = read_ahead.Source(URL, cache, max_blocks=2)
    read_ahead.register(made)
    try:
        yield made, cache
    finally:
        cache.gate.set()
        read_ahead.release(made)


def learn(source: read_ahead.Source, video: str, position: int, size: int) -> None:
    for _read in range(2):  # remembered from the second read on
        with read_ahead.recording(URL, video):
            source.touch(position, size)


def ahead_calls(cache: Cache) -> list[int]:
    return [start for start, name in cache.calls if name.startswith("h5feed-read-ahead")]


def test_a_learnt_videos_uncached_blocks_are_fetched_ahead_and_taken(
    source: tuple[read_ahead.Source, Cache],
) -> None:
    made, cache = source
    learn(made, "v", 0, 8)  # blocks 0 and 1
    assert read_ahead.ahead(URL, "v") == 0  # both cached still: nothing asked
    made.touch(16, 8)  # blocks 4 and 5: 0 and 1 dropped from the cache
    assert made.wanted("v") == (0, 1)
    assert read_ahead.ahead(URL, "v") == 2
    assert cache.fetcher(0, 4) == DATA[0:4] and cache.fetcher(4, 8) == DATA[4:8]
    assert sorted(ahead_calls(cache)) == [0, 4] and made.taken == 2
    assert [s for s, n in cache.calls if not n.startswith("h5feed-read-ahead")] == []
    assert read_ahead.ahead(URL, "never read") == 0
    assert read_ahead.ahead("/data/file.h5", "v") == 0  # a path: never


def test_a_fetch_ahead_that_fails_is_fetched_again_as_without_read_ahead(
    source: tuple[read_ahead.Source, Cache],
) -> None:
    made, cache = source
    cache.fail_ahead = True
    learn(made, "v", 0, 4)
    made.touch(40, 8)
    assert read_ahead.ahead(URL, "v") == 1
    assert cache.fetcher(0, 4) == DATA[0:4]  # the same bytes, fetched on this thread
    assert made.taken == 0
    assert (0, threading.current_thread().name) in cache.calls


def test_at_most_max_pending_blocks_are_fetched_ahead(
    source: tuple[read_ahead.Source, Cache],
) -> None:
    made, cache = source
    cache.gate.clear()  # every fetch ahead stays in flight
    videos = [f"v{i}" for i in range(read_ahead.MAX_PENDING + 3)]
    for i, video in enumerate(videos):
        learn(made, video, 400 + 4 * i, 4)  # one block each
    made.touch(0, 8)
    submitted = sum(read_ahead.ahead(URL, video) for video in videos)
    assert submitted == read_ahead.MAX_PENDING  # the rest refused while all are in flight
    cache.gate.set()


_EXITING = """
import time, types
from h5feed.producer.files import read_ahead

def slow(start, end):
    time.sleep(30)  # a request that hangs to its timeout
    return b"x" * (end - start)

cache = types.SimpleNamespace(blocksize=4, fetcher=slow)
source = read_ahead.Source("s3://bucket/file.h5", cache, 4)
read_ahead.register(source)
submitted = sum(read_ahead._POOL.submit(source, n) for n in range(read_ahead.MAX_PENDING))
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
