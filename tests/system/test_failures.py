"""Every failure mode, each on its own: bad input, a worker that raises, exits, dies, hangs;
malformed messages; shutdown paths. Nothing may hang: each test bounds its wait."""

from __future__ import annotations

import gc
import hashlib
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import cv2
import numpy as np
import pytest
import zmq
from conftest import own_worker_pids, wait_until_gone
from paths import SUPPORT

import h5feed
from h5feed.common.errors import (
    DataError,
    H5FeedError,
    PoisonUnitError,
    WorkerDiedError,
    WorkerError,
    WorkerTimeoutError,
)
from h5feed.common.protocol import wire
from h5feed.consumer.stream import BatchStream
from h5feed.producer.sample_data import write_video_file

CLIP = {"clip_len": 4, "resize": (48, 64), "crop": (40, 40)}


def jpeg(value: int) -> bytes:
    return cv2.imencode(".jpg", np.full((48, 64, 3), value, np.uint8))[1].tobytes()


@pytest.fixture()
def corrupt_file(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "corrupt.h5"
    frames = [jpeg(10 * i) for i in range(6)]
    bad = list(frames)
    bad[3] = b"this is not a jpeg"
    write_video_file(path, {"video_000": (frames, 0), "video_001": (bad, 1)})
    return path


def test_bad_frame_names_file_video_and_frame_with_the_worker_traceback(
    corrupt_file: pathlib.Path,
) -> None:
    feed = h5feed.batches(corrupt_file, clip_len=6, batch_size=1, shuffle=False, workers=1)
    with pytest.raises(WorkerError) as caught:
        list(feed)
    message = str(caught.value)
    assert str(corrupt_file) in message
    assert "'video_001'" in message and "frame 3" in message
    assert "Traceback" in message and "decode" in message  # the worker's own traceback
    assert caught.value.error_type == "FrameError"  # a DataError: on_error="skip" would skip it
    assert wait_until_gone(own_worker_pids()) == []


def test_batches_before_the_bad_frame_arrive_then_the_error(corrupt_file: pathlib.Path) -> None:
    """One worker, so that the batch before the bad one is made (and sent) before the error:
    the trainer ends the run at the first error it receives, so with several workers an error
    can overtake a batch still being made by another worker (1 run in 10 on two workers)."""
    stream = h5feed.batches(
        corrupt_file, clip_len=6, batch_size=1, shuffle=False, workers=1
    ).stream()
    first = next(stream)
    assert first["video"].tolist() == [b"video_000"]
    with pytest.raises(WorkerError):
        next(stream)
    with pytest.raises(StopIteration):  # after the error the stream is over, not stuck
        next(stream)


def test_missing_label_names_file_and_video(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "nolabel.h5"
    write_video_file(path, {"video_000": ([jpeg(1)] * 4, None)})
    with pytest.raises(WorkerError, match=r"video_000.*nolabel\.h5|nolabel\.h5.*video_000"):
        list(h5feed.batches(path, clip_len=2, workers=1))


def test_not_an_hdf5_file_is_named(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "garbage.h5"
    path.write_bytes(b"not hdf5 at all" * 100)
    with pytest.raises(WorkerError, match=r"garbage\.h5"):
        list(h5feed.batches(path, clip_len=2, workers=1))


def test_missing_path_fails_at_once(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere"):
        h5feed.batches(tmp_path / "nowhere.h5")


def test_an_empty_directory_or_list_fails_at_once(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match="holds no HDF5 file: searched recursively"):
        h5feed.batches(tmp_path, clip_len=2)
    with pytest.raises(ValueError, match="the list of files is empty"):
        h5feed.batches([], clip_len=2)  # was accepted, then waited unit_timeout_s for no index


@pytest.mark.parametrize(
    ("batch_size", "error"),
    [(2, WorkerError), (1, DataError)],
    ids=["within-a-batch-the-worker-sees-it", "across-batches-the-consumer-sees-it"],
)
def test_frames_of_different_sizes_without_resize_are_an_error(
    tmp_path: pathlib.Path, batch_size: int, error: type[Exception]
) -> None:
    path = tmp_path / "sizes.h5"
    small = cv2.imencode(".jpg", np.zeros((32, 32, 3), np.uint8))[1].tobytes()
    write_video_file(path, {"video_000": ([jpeg(1)] * 3, 0), "video_001": ([small] * 3, 1)})
    feed = h5feed.batches(path, clip_len=2, batch_size=batch_size, shuffle=False, workers=1)
    with pytest.raises(error, match=r"(?s)resize.*sizes\.h5.*video_001"):
        list(feed)


def _stream_mid_epoch(dataset: list[pathlib.Path], **kwargs: object):  # type: ignore[no-untyped-def]
    stream = h5feed.batches(
        dataset, **CLIP, batch_size=2, workers=2, epochs=None, **kwargs
    ).stream()
    next(stream)
    return stream


@pytest.fixture()
def importable_transforms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers import ``sample_transforms`` by path: put tests/ on their PYTHONPATH."""
    tests = str(SUPPORT)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p)
    )


def _epoch_with(
    dataset: list[pathlib.Path], during: Callable[[BatchStream, int], None], **kwargs: object
) -> tuple[list[int], dict[str, Any], list[int]]:
    """One epoch (batch_size 2) with ``during(stream, i)`` called after each batch: the
    sample ids taken, the final stats, and every worker pid seen."""
    feed = h5feed.batches(dataset, **CLIP, batch_size=2, workers=2, seed=4, **kwargs)
    samples: list[int] = []
    pids: set[int] = set()
    with feed.stream() as stream:
        for i, batch in enumerate(stream):
            samples += batch["sample"].tolist()
            pids |= set(stream.worker_pids)
            during(stream, i)
        stats = stream.stats()
    return samples, stats, sorted(pids)


def test_a_killed_worker_is_replaced_and_the_epoch_arrives_exactly_once(
    small_dataset: list[pathlib.Path],
) -> None:
    def kill_one(stream: BatchStream, i: int) -> None:
        if i == 1:
            os.kill(stream.worker_pids[0], signal.SIGKILL)

    samples, stats, pids = _epoch_with(small_dataset, kill_one)
    assert sorted(samples) == list(range(24))
    assert stats["workers_replaced"] == 1 and stats["peers_lost"] == 1
    assert len(pids) == 3  # the two first, and the replacement
    assert wait_until_gone(pids) == []


def test_a_worker_that_leaves_with_sigterm_is_replaced(small_dataset: list[pathlib.Path]) -> None:
    def term_one(stream: BatchStream, i: int) -> None:
        if i == 1:
            os.kill(stream.worker_pids[1], signal.SIGTERM)  # it says BYE, exit code 0

    samples, stats, pids = _epoch_with(small_dataset, term_one)
    assert sorted(samples) == list(range(24))
    assert stats["workers_replaced"] == 1
    assert wait_until_gone(pids) == []


def test_a_worker_that_dies_on_every_start_ends_the_iteration_naming_its_exit(
    small_dataset: list[pathlib.Path], importable_transforms: None
) -> None:
    feed = h5feed.batches(
        small_dataset, **CLIP, workers=1, max_restarts=1, transform="sample_transforms:exits"
    )
    began = time.monotonic()
    with pytest.raises(WorkerDiedError, match=r"died 2 times within 60 s \(max_restarts=1\)"):
        list(feed)
    assert time.monotonic() - began < 30
    assert wait_until_gone(own_worker_pids()) == []


def test_a_worker_that_hangs_on_every_start_is_reported_as_hung_not_crashed(
    small_dataset: list[pathlib.Path], importable_transforms: None, tmp_path: pathlib.Path
) -> None:
    feed = h5feed.batches(
        small_dataset, **CLIP, workers=1, max_restarts=1, unit_timeout_s=2.0,
        transform="sample_transforms:sleeps", transform_args={"marker": str(tmp_path / "m")},
    )  # fmt: skip
    began = time.monotonic()
    with pytest.raises(WorkerTimeoutError, match=r"hung 2 times within 60 s \(max_restarts=1\)"):
        list(feed)
    assert time.monotonic() - began < 60
    assert wait_until_gone(own_worker_pids()) == []


def test_a_sample_that_kills_every_worker_making_it_ends_the_iteration_naming_it(
    small_dataset: list[pathlib.Path], importable_transforms: None, tmp_path: pathlib.Path
) -> None:
    # The poison: sample 5's clip, as a run without the transform gives it (same plan).
    common = {**CLIP, "batch_size": 1, "workers": 2, "seed": 3, "shuffle": False}
    clean = list(h5feed.batches(small_dataset, **common))
    (target,) = [b["frames"][0] for b in clean if int(b["sample"][0]) == 5]
    digest = hashlib.sha256(np.ascontiguousarray(target).tobytes()).hexdigest()
    deaths = tmp_path / "deaths"
    feed = h5feed.batches(
        small_dataset,
        **common,
        transform="sample_transforms:kills_itself_on",
        transform_args={"digest": digest, "deaths": str(deaths)},
    )  # default max_unit_attempts=3, max_restarts=3
    with pytest.raises(PoisonUnitError) as info:
        list(feed)
    text = str(info.value)
    assert "died 3 times (max_unit_attempts=3)" in text
    assert len(info.value.samples) == 1 and "(sample 5 of epoch 0)" in info.value.samples[0]
    assert ".h5 video '" in info.value.samples[0] and "frames " in info.value.samples[0]
    assert len(deaths.read_text().split()) == 3  # three processes made it, each one died
    feed.close()
    assert wait_until_gone(own_worker_pids()) == []


def test_kept_workers_killed_between_iterations_are_replaced_not_raised(
    small_dataset: list[pathlib.Path],
) -> None:
    # max_restarts=0: any crash-loop death would raise; the victims delivered first.
    feed = h5feed.batches(small_dataset, **CLIP, batch_size=4, workers=2, max_restarts=0)
    for _iteration in range(3):
        with feed.stream() as stream:
            samples = [s for batch in stream for s in batch["sample"].tolist()]
            delivered = [w["pid"] for w in stream.stats()["workers"] if w["count"] > 0]
        assert sorted(samples) == list(range(24)) and delivered
        for pid in delivered:  # kept workers die between iterations (an OOM killer)
            os.kill(pid, signal.SIGKILL)
        assert wait_until_gone(delivered) == []
    feed.close()
    assert wait_until_gone(own_worker_pids()) == []


def test_a_stopped_worker_is_lost_by_liveness_killed_and_replaced(
    small_dataset: list[pathlib.Path],
) -> None:
    stopped: list[int] = []

    def stop_one(stream: BatchStream, i: int) -> None:
        if i == 1:
            stopped.append(stream.worker_pids[0])
            os.kill(stopped[0], signal.SIGSTOP)  # alive, silent: no heartbeat answers

    try:
        samples, stats, pids = _epoch_with(
            small_dataset, stop_one, peer_timeout_s=2.0, unit_timeout_s=120.0
        )
    finally:
        for pid in stopped:  # only if the test failed before the consumer killed it
            if wait_until_gone([pid], 0.1):
                os.kill(pid, signal.SIGCONT)
    assert sorted(samples) == list(range(24))
    assert stats["workers_replaced"] == 1  # by liveness: unit_timeout_s is 120 s
    assert wait_until_gone(pids) == []


def test_a_worker_stuck_in_its_transform_is_lost_by_its_deadline(
    small_dataset: list[pathlib.Path], tmp_path: pathlib.Path, importable_transforms: None
) -> None:
    marker = str(tmp_path / "stuck-once")
    samples, stats, pids = _epoch_with(
        small_dataset,
        lambda stream, i: None,
        transform="sample_transforms:sleeps_once",
        transform_args={"marker": marker},
        unit_timeout_s=3.0,
    )
    assert os.path.exists(marker)  # one call hung (and answered heartbeats all along)
    assert sorted(samples) == list(range(24))
    assert stats["workers_replaced"] == 1
    assert wait_until_gone(pids) == []


def test_malformed_messages_are_dropped_and_counted(small_dataset: list[pathlib.Path]) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, batch_size=4, workers=2, seed=3)
    expected = sorted(s for b in feed for s in b["sample"].tolist())
    context = zmq.Context()
    rogue = context.socket(zmq.DEALER)
    rogue.setsockopt(zmq.LINGER, 0)
    try:
        with feed.stream() as stream:
            rogue.connect(stream.address)
            rogue.send_multipart([b"garbage", b"more garbage"])
            version = bytes([wire.PROTOCOL_VERSION])  # a positive fixint
            rogue.send_multipart(
                [b"\x95\xa6h5feed" + version + b"\xa4data\x80\x90"]
            )  # a data message of this version without fields
            got = sorted(s for b in stream for s in b["sample"].tolist())
            stats = stream.stats()
    finally:
        rogue.close()
        context.term()
    assert got == expected
    assert stats["malformed_messages"] == 2


def test_break_stops_the_workers(small_dataset: list[pathlib.Path]) -> None:
    stream = h5feed.batches(small_dataset, **CLIP, epochs=None).stream()
    for _ in stream:
        break
    pids = stream.worker_pids
    stream.close()
    assert wait_until_gone(pids, 5) == []


def test_abandoned_stream_is_collected_and_its_workers_stop(
    small_dataset: list[pathlib.Path],
) -> None:
    stream = h5feed.batches(small_dataset, **CLIP, epochs=None).stream()
    next(stream)
    pids = stream.worker_pids
    del stream
    gc.collect()
    assert wait_until_gone(pids, 10) == []


@pytest.mark.parametrize("busy", [False, True], ids=["workers-idle", "workers-busy"])
def test_workers_exit_when_the_consumer_process_is_killed(
    small_dataset: list[pathlib.Path], busy: bool
) -> None:
    # Busy: the consumer keeps taking batches, so workers are mid-unit or mid-send when it
    # dies, and a send to a socket that is gone must not block them forever.
    script = textwrap.dedent(
        f"""
        import h5feed, sys
        files = {[str(p) for p in small_dataset]!r}
        stream = h5feed.batches(files, clip_len=4, epochs=None).stream()
        next(stream)
        print(*stream.worker_pids, flush=True)
        if {busy!r}:
            for _ in stream:
                pass
        sys.stdin.read()
        """
    )
    consumer = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert consumer.stdout is not None
        pids = [int(p) for p in consumer.stdout.readline().split()]
        assert len(pids) == 2 and wait_until_gone(pids, 0.5) == pids
        consumer.kill()
        consumer.wait(10)
        assert wait_until_gone(pids, 10) == [], "orphan workers outlived a killed consumer"
    finally:
        if consumer.poll() is None:
            consumer.kill()


@pytest.mark.parametrize("epochs", [1, None])
def test_an_empty_epoch_is_an_error_not_a_silent_end_or_a_spin(
    small_dataset: list[pathlib.Path], epochs: int | None
) -> None:
    # 24 videos, batch 32 with drop_remainder: no batch at all in any epoch
    feed = h5feed.batches(
        small_dataset, **CLIP, batch_size=32, drop_remainder=True, epochs=epochs, workers=1
    )
    with pytest.raises(H5FeedError, match="an epoch has no batch: 24 samples"):
        list(feed)
