"""Shared-memory batch slots: local workers write batches where the trainer reads them.

The slot path must give exactly the batches of the socket path, never change a batch the
trainer still holds, reuse slots once batches are dropped (also by TensorFlow), and fall back
to the socket for parts that cannot use a slot.
"""

from __future__ import annotations

import gc
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from ports import free_port
from remote_producers import CLIP

import h5feed
from h5feed.common.config import ClipSpec
from h5feed.common.layouts import Groups
from h5feed.common.protocol.messages import SlotRef
from h5feed.consumer.core.slots import SlotPool
from h5feed.producer.worker.hdf5_job import Hdf5Job
from h5feed.producer.worker.shm import SlotError, SlotMaps
from h5feed.producer.worker.stats import WorkerCounters

KW = {**CLIP, "flip": True, "batch_size": 4, "workers": 2}


def run(files: list[pathlib.Path], **kwargs: object) -> tuple[list[dict[str, np.ndarray]], int]:
    """Every batch of one iteration (kept, not copied) and the slots the iteration made."""
    stream = h5feed.batches(files, **{**KW, **kwargs}).stream()  # type: ignore[arg-type]
    with stream:
        batches = list(stream)
        slots = stream.stats()["shared_memory_slots"]
    return batches, slots


def as_bytes(batches: list[dict[str, np.ndarray]]) -> list[tuple[list[int], bytes]]:
    return [(b["sample"].tolist(), b["frames"].tobytes()) for b in batches]


def test_slot_batches_equal_socket_batches_even_when_all_are_kept(
    small_dataset: list[pathlib.Path],
) -> None:
    kept, slots = run(small_dataset, epochs=2)
    socket_batches, no_slots = run(small_dataset, epochs=2, shared_memory=False)
    assert no_slots == 0
    # Every batch was kept, so no slot could be reused: one per batch, contents intact.
    assert slots == len(kept) > 4
    assert as_bytes(kept) == as_bytes(socket_batches)
    assert all(b["frames"].flags.c_contiguous for b in kept)


def test_slots_are_reused_once_batches_are_dropped(small_dataset: list[pathlib.Path]) -> None:
    stream = h5feed.batches(small_dataset, **KW, epochs=4).stream()  # type: ignore[arg-type]
    with stream:
        count = sum(1 for _ in stream)
        slots = stream.stats()["shared_memory_slots"]
    budget = max(4, 2 * KW["workers"])  # type: ignore[call-overload]
    assert count == 4 * 6  # 24 videos, batches of 4, 4 epochs
    assert 0 < slots <= budget + 2  # in flight + the one the loop holds + one being released


def test_tensorflow_releases_slots_after_use(small_dataset: list[pathlib.Path]) -> None:
    ds = h5feed.dataset(small_dataset, **KW, epochs=4)  # type: ignore[arg-type]
    iterator = iter(ds)
    taken = [next(iterator)["frames"].numpy().sum() for _ in range(20)]
    slots = ds.stats()["shared_memory_slots"]
    del iterator
    assert len(taken) == 20
    # tf.data's prefetch buffer holds a few more batches than the budget; without release
    # every batch would need a slot of its own (20+).
    assert 0 < slots <= 14, slots


def test_a_tensor_keeps_its_batch_while_later_batches_arrive(
    small_dataset: list[pathlib.Path],
) -> None:
    ds = h5feed.dataset(small_dataset, **KW, epochs=2, shuffle=False)  # type: ignore[arg-type]
    reference = as_bytes(run(small_dataset, epochs=2, shuffle=False, shared_memory=False)[0])
    iterator = iter(ds)
    first = next(iterator)
    copy_at_arrival = first["frames"].numpy().tobytes()
    rest = [next(iterator)["frames"].numpy().tobytes() for _ in range(10)]
    gc.collect()
    assert first["frames"].numpy().tobytes() == copy_at_arrival == reference[0][1]
    assert rest == [frames for _samples, frames in reference[1:11]]


def test_without_a_known_frame_size_batches_come_over_the_socket(
    small_dataset: list[pathlib.Path],
) -> None:
    batches, slots = run(small_dataset, clip_len=4, resize=None, crop=None)
    assert slots == 0
    assert len(batches) == 6 and batches[0]["frames"].shape == (4, 4, 96, 128, 3)


@pytest.mark.parametrize("namespace", ["same", "own"])
def test_a_producer_service_on_this_host_writes_into_the_slots_or_falls_back(
    small_dataset: list[pathlib.Path], namespace: str, tmp_path: pathlib.Path
) -> None:
    """A producer service on the trainer's host maps the slots like a local worker. One in a
    PID namespace of its own (as in a container: the trainer's pid is not its process there)
    cannot: its rows come over the socket and are copied into the same slot as the local
    worker's rows. Either way the batches equal the socket path's."""
    port = free_port()
    root = small_dataset[0].parent
    prefix = ["unshare", "--pid", "--fork", "--mount-proc"] if namespace == "own" else []
    log = tmp_path / "producer.log"
    with open(log, "wb") as err:
        producer = subprocess.Popen(
            [*prefix, sys.executable, "-m", "h5feed", "produce", "--data-root", str(root),
             "--workers", "1", "--name", "remote"],
            # DEBUG: its worker logs when it is up (below)
            env={**os.environ, "H5FEED_CONNECT": f"tcp://127.0.0.1:{port}",
                 "H5FEED_LOG_LEVEL": "DEBUG"},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            start_new_session=True,  # its own process group: `unshare` does not pass signals on
        )  # fmt: skip
    try:
        # Both must deliver: the producer's worker must join within the stream's join grace,
        # which a loaded machine's imports can outlast; so the stream starts once it is up.
        deadline = time.monotonic() + 60
        while "open files limit" not in log.read_text():
            assert producer.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"no worker up in 60 s:\n{log.read_text()}"
            time.sleep(0.05)
        names = [p.name for p in small_dataset]
        stream = h5feed.batches(
            names, **{**KW, "workers": 1}, data_root=str(root), listen=f"tcp://127.0.0.1:{port}",
            join_grace_s=3.0, start_timeout_s=30,
        ).stream()  # type: ignore[arg-type]  # fmt: skip
        with stream:
            mixed = list(stream)
            stats = stream.stats()
        hosts = {w["name"]: w["clips"] for w in stats["workers"]}
        assert len(hosts) == 2 and all(hosts.values()), hosts  # both delivered
        assert stats["shared_memory_slots"] > 0
        # Parts that came over the socket for a batch in a slot: the producer's, if it
        # could not map the slots; none if it could.
        copied = stats["parts_copied_into_slots"]
        assert (copied > 0) if namespace == "own" else (copied == 0), copied
        reference, _ = run([root / n for n in names], workers=1, shared_memory=False)
        assert as_bytes(mixed) == as_bytes(reference)
    finally:
        os.killpg(producer.pid, signal.SIGTERM)
        producer.wait(timeout=15)


def test_no_descriptor_is_left_open(small_dataset: list[pathlib.Path]) -> None:
    before = set(os.listdir("/proc/self/fd"))
    batches, slots = run(small_dataset)
    del batches
    gc.collect()
    assert slots > 0
    leaked = set(os.listdir("/proc/self/fd")) - before
    assert not leaked, [os.readlink(f"/proc/self/fd/{fd}") for fd in leaked if fd.isdigit()]


# A malformed slot (positions out of range or repeated, a bool for an int...) never gets
# here: decoding the UNIT refuses it (tests/unit/common/test_messages.py).


def slot_ref(fd: int, batch_rows: int) -> SlotRef:
    """A slot of this process, as a UNIT of one row names it."""
    return SlotRef(os.getpid(), fd, batch_rows, (0,))


def test_a_slot_that_cannot_be_opened_is_a_slot_error() -> None:
    maps = SlotMaps()
    with pytest.raises(SlotError, match="cannot open slot"):
        maps.batch_array(slot_ref(999_999, 1), (2,), "job1")


def test_a_descriptor_that_is_not_this_jobs_slot_is_refused(tmp_path: pathlib.Path) -> None:
    """In another PID namespace the trainer's pid may be another process whose descriptor
    of that number is any file: the worker checks the slot's name before mapping it."""
    other_jobs = SlotPool(16, "job2")
    with open(tmp_path / "plain", "wb") as plain:
        plain.write(b"\0" * 16)
        plain.flush()
        maps = SlotMaps()
        try:
            with pytest.raises(SlotError, match="not a slot of job job1"):
                maps.batch_array(slot_ref(plain.fileno(), 2), (8,), "job1")
            with pytest.raises(SlotError, match="not a slot of job job1"):
                maps.batch_array(slot_ref(other_jobs.acquire().fd, 2), (8,), "job1")
        finally:
            maps.close()
            other_jobs.close()


def test_a_slot_too_small_for_the_batch_is_a_slot_error() -> None:
    pool = SlotPool(16, "job1")
    slot = pool.acquire()
    maps = SlotMaps()
    try:
        with pytest.raises(SlotError, match="holds 16 bytes"):
            maps.batch_array(slot_ref(slot.fd, 2), (9,), "job1")
        view = maps.batch_array(slot_ref(slot.fd, 2), (8,), "job1")
        view[:] = 7  # written through /proc by "another process": seen in the pool's mapping
        assert bytes(slot.memory[:16]) == b"\x07" * 16
        del view
    finally:
        maps.close()
        pool.close()


def test_a_leased_slot_returns_only_when_every_view_is_gone() -> None:
    pool = SlotPool(64)
    slot = pool.acquire()
    array = pool.lease(slot, (4, 16))
    view = array[1:]
    del array
    gc.collect()
    assert pool.acquire() is not slot  # still held through the view
    del view
    gc.collect()
    assert pool.acquire() is slot
    pool.close()


def test_a_slot_of_a_job_whose_id_merely_starts_like_this_one_is_refused() -> None:
    """The name is compared whole: ``h5feed-job1x`` is not a slot of job ``job1``."""
    pool = SlotPool(16, "job1x")
    maps = SlotMaps()
    try:
        with pytest.raises(SlotError, match="not a slot of job job1"):
            maps.batch_array(slot_ref(pool.acquire().fd, 2), (8,), "job1")
    finally:
        maps.close()
        pool.close()


def test_a_descriptor_that_is_not_a_slot_is_refused_before_it_is_opened() -> None:
    """A socket (like a FIFO or a device) is refused by its link name, never opened: opening
    it through /proc would fail (ENXIO) or act; the refusal names what it is."""
    with socket.socket() as other:
        maps = SlotMaps()
        with pytest.raises(SlotError, match=r"is 'socket:\[\d+\]', not a slot of job job1"):
            maps.batch_array(slot_ref(other.fileno(), 1), (2,), "job1")


def test_a_refused_slot_sends_rows_over_the_socket_for_that_job_only() -> None:
    """One job's unusable slot (counted, named in the log) turns slots off for that job;
    the next job maps its slots again."""
    spec, layout = ClipSpec.of(clip_len=1, resize=(2, 2)), Groups()
    counters = WorkerCounters(None, "w0")
    first = Hdf5Job("job1", spec, layout, counters=counters)
    second = Hdf5Job("job2", spec, layout, counters=counters)
    pools = [SlotPool(12, "job1"), SlotPool(12, "job2")]
    bad, good_first, good_second = SlotPool(12, "other"), pools[0].acquire(), pools[1].acquire()
    try:
        assert first.target(slot_ref(bad.acquire().fd, 1)) is None
        assert counters.values["slots_refused"] == 1
        assert first.target(slot_ref(good_first.fd, 1)) is None  # this job: off
        target = second.target(slot_ref(good_second.fd, 1))
        assert target is not None and target[0].shape == (1, 1, 2, 2, 3)
        del target
    finally:
        for job in (first, second):
            job.close()
        for pool in (*pools, bad):
            pool.close()


def test_a_slot_held_for_a_live_writer_returns_only_once_it_is_gone() -> None:
    pool = SlotPool(4096, "held")
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        slot = pool.acquire()
        pool.hold_until_gone(slot, writer.pid)
        pool.release(slot)  # its batch is done, but the writer may still write
        assert pool.held_back == 1
        assert pool.acquire() is not slot  # a new slot instead
        writer.kill()
        writer.wait(10)
        assert pool.held_back == 0
        assert pool.acquire() is slot  # back in the pool once its writer has ended
    finally:
        if writer.poll() is None:
            writer.kill()
        pool.close()
