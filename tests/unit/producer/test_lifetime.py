"""Process hygiene of local workers: they die with the trainer even mid-call, survive the
thread that started them, raise their open-files limit, and read more files than they may
hold open.

Each trainer runs as a subprocess (so it can be SIGKILLed or given its own limits); every
wait is bounded.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from conftest import wait_until_gone
from paths import REPO, SUPPORT

import h5feed
from h5feed.common.layouts import Auto, Groups
from h5feed.consumer.stream import BatchStream
from h5feed.producer.files.open_files import OpenFiles
from h5feed.producer.sample_data import write_video_file

_TESTS_DIR = str(SUPPORT)
_ROOT_DIR = str(REPO)
CLIP = {"clip_len": 4, "resize": (48, 64), "crop": (40, 40)}


def trainer(script: str) -> subprocess.Popen[str]:
    """A trainer process running ``script``; h5feed and tests/ (transforms) importable."""
    path = os.pathsep.join(p for p in (_ROOT_DIR, _TESTS_DIR, os.environ.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        env={**os.environ, "PYTHONPATH": path},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def wait_for(path: pathlib.Path, process: subprocess.Popen[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            _, err = process.communicate(timeout=10)
            pytest.fail(f"{path.name} never appeared (trainer exit {process.poll()}): {err}")
        time.sleep(0.05)


def test_a_worker_blocked_in_a_long_call_dies_within_a_second_of_a_killed_trainer(
    small_dataset: list[pathlib.Path], tmp_path: pathlib.Path
) -> None:
    """The worker's own check of its parent runs only between messages; in a transform that
    sleeps 60 s only the kernel's parent-death signal can end it."""
    marker = tmp_path / "sleeping"
    consumer = trainer(
        f"""
        import h5feed, sys
        stream = h5feed.batches({[str(p) for p in small_dataset]!r}, **{CLIP!r}, workers=1,
            transform="sample_transforms:sleeps", transform_args={{"marker": {str(marker)!r}}})
        stream = stream.stream()
        print(*stream.worker_pids, flush=True)
        next(stream)
        """
    )
    try:
        assert consumer.stdout is not None
        pids = [int(p) for p in consumer.stdout.readline().split()]
        assert len(pids) == 1
        wait_for(marker, consumer, 30)  # the worker is inside the 60 s call now
        consumer.kill()
        consumer.wait(10)
        assert wait_until_gone(pids, 1.0) == [], "a worker outlived its SIGKILLed trainer"
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait(10)


def test_workers_started_from_a_thread_that_ends_keep_running(
    small_dataset: list[pathlib.Path],
) -> None:
    """The kernel's parent-death signal fires when the *thread* that forked a worker exits
    (prctl(2)); iterations often start in short-lived tf.data threads. Workers are forked by
    h5feed's own long-lived thread, so the epoch completes after the starting thread ended."""
    started: list[tuple[BatchStream, list[int]]] = []

    def start() -> None:
        # The first batch: the workers run (and asked for the signal) while this thread lives.
        stream = h5feed.batches(small_dataset, **CLIP, shuffle=False).stream()
        started.append((stream, next(stream)["sample"].tolist()))

    thread = threading.Thread(target=start)
    thread.start()
    thread.join(60)
    assert not thread.is_alive() and len(started) == 1
    # join() returns before the kernel has finished the thread's exit, where the parent-death
    # signal is sent: wait until its task has left /proc (then any such signal has gone out).
    task = pathlib.Path(f"/proc/self/task/{thread.native_id}")
    deadline = time.monotonic() + 10
    while task.exists():
        assert time.monotonic() < deadline, f"{task} is still there 10 s after join()"
        time.sleep(0.01)
    stream, samples = started[0]
    with stream:
        samples += [s for batch in stream for s in batch["sample"].tolist()]
        stats = stream.stats()
    assert sorted(samples) == list(range(24))
    # Served by the workers the thread started: none was killed and replaced meanwhile.
    assert stats["peers_lost"] == 0 and stats["workers_replaced"] == 0, stats


def test_workers_raise_their_soft_open_files_limit_to_the_hard_one(
    small_dataset: list[pathlib.Path],
) -> None:
    consumer = trainer(
        f"""
        import resource, sys, h5feed
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, 4096))
        stream = h5feed.batches({[str(p) for p in small_dataset]!r}, **{CLIP!r}, workers=1)
        stream = stream.stream()
        next(stream)
        print(*stream.worker_pids, flush=True)
        sys.stdin.read()
        """
    )
    try:
        assert consumer.stdout is not None and consumer.stdin is not None
        (pid,) = [int(p) for p in consumer.stdout.readline().split()]
        limits = pathlib.Path(f"/proc/{pid}/limits").read_text().splitlines()
        (line,) = [row for row in limits if row.startswith("Max open files")]
        assert line.split()[3:5] == ["4096", "4096"], line
        consumer.stdin.close()
        consumer.wait(30)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait(10)


@pytest.fixture(scope="module")
def two_thousand_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """2,000 files of one one-frame video each (an 8x8 JPEG); label = the file's number."""
    import cv2

    root = tmp_path_factory.mktemp("many")
    jpeg = cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))[1].tobytes()
    paths = []
    for i in range(2000):
        path = root / f"f{i:04d}.h5"
        write_video_file(path, {"v": ([jpeg], i)})
        paths.append(str(path))
    return paths


# CPU-bound work, no waiting: 2,000 files written, indexed and opened take about 45 s alone on 2
# cores and more than twice that on a loaded machine; the limits only catch a hang.
_TWO_THOUSAND_FILES_TIMEOUT_S = 480


@pytest.mark.timeout(_TWO_THOUSAND_FILES_TIMEOUT_S)
def test_one_worker_reads_2000_files_under_a_limit_of_256_descriptors(
    two_thousand_files: list[str],
) -> None:
    """A hard limit of 256 the worker cannot raise: it keeps at most max_open_files (128)
    open, reopening on demand, and a shuffled epoch still takes every file exactly once."""
    consumer = trainer(
        f"""
        import json, resource, h5feed
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        feed = h5feed.batches({two_thousand_files!r}, clip_len=1, resize=(8, 8),
            batch_size=100, shuffle=True, workers=1, index_cache=False, max_open_files=128)
        print(json.dumps([int(x) for b in feed for x in b["label"]]))
        """
    )
    try:
        out, err = consumer.communicate(timeout=_TWO_THOUSAND_FILES_TIMEOUT_S - 120)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait(10)
    assert consumer.returncode == 0, err[-3000:]
    labels = json.loads(out)
    assert sorted(labels) == list(range(2000))
    assert labels != sorted(labels)  # shuffled across files: the LRU was exercised


def test_open_files_keeps_at_most_its_bound_open_and_reopens_with_the_same_layout(
    small_dataset: list[pathlib.Path],
) -> None:
    files = OpenFiles(max_open=2)
    try:
        first = {n: files.open(n, str(p), Auto()).index() for n, p in enumerate(small_dataset)}
        assert files.open_count == 2 and files.reopened == 0
        frames = [files.get(n).read_frames(first[n][0][0], [0, 1]) for n in (0, 3, 0, 1)]
        assert files.open_count == 2 and files.reopened == 2  # 0 (closed), then 1
        assert files.get(1).spec == Groups()  # the layout recognised at first, not re-detected
        assert all(len(f) == 2 and f[0].dtype == np.uint8 for f in frames)
        assert [a.tobytes() for a in frames[0]] == [a.tobytes() for a in frames[2]]
    finally:
        files.close()
    assert files.open_count == 0
    with pytest.raises(ValueError, match="max_open_files must be >= 1"):
        OpenFiles(0)
