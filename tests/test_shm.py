"""Shared-memory batch slots: local workers write batches where the trainer reads them.

The slot path must give exactly the batches of the socket path, never change a batch the
trainer still holds, reuse slots once batches are dropped (also by TensorFlow), and fall back
to the socket for parts that cannot use a slot.
"""

from __future__ import annotations

import gc
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from test_producers import CLIP, free_port

import h5feed
from h5feed.consumer.slots import SlotPool
from h5feed.producer.shm import SlotError, SlotMaps, parse_slot

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


def test_parts_from_a_remote_producer_are_copied_into_the_slot(
    small_dataset: list[pathlib.Path],
) -> None:
    """A producer over TCP cannot map the trainer's memory: its rows travel over the socket
    and land in the same slot as the local worker's rows."""
    port = free_port()
    root = small_dataset[0].parent
    producer = subprocess.Popen(
        [sys.executable, "-m", "h5feed", "produce", "--data-root", str(root), "--workers", "1",
         "--name", "remote"],
        env={**os.environ, "H5FEED_CONNECT": f"tcp://127.0.0.1:{port}"},
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
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
        reference, _ = run([root / n for n in names], workers=1, shared_memory=False)
        assert as_bytes(mixed) == as_bytes(reference)
    finally:
        producer.terminate()
        producer.communicate(timeout=15)


def test_no_descriptor_is_left_open(small_dataset: list[pathlib.Path]) -> None:
    before = set(os.listdir("/proc/self/fd"))
    batches, slots = run(small_dataset)
    del batches
    gc.collect()
    assert slots > 0
    leaked = set(os.listdir("/proc/self/fd")) - before
    assert not leaked, [os.readlink(f"/proc/self/fd/{fd}") for fd in leaked if fd.isdigit()]


@pytest.mark.parametrize(
    "slot",
    [
        None,
        [1, 2, 3],
        [1, 2, 4, [0, 4]],  # position beyond the batch
        [1, 2, 4, [1, 1]],  # a row twice
        [1, -2, 4, [0]],
        [1, 2, 4, "0"],
        [1, True, 4, [0]],
    ],
)
def test_malformed_slot_fields_are_refused(slot: object) -> None:
    with pytest.raises(SlotError):
        parse_slot(slot)


def test_a_slot_that_cannot_be_opened_is_a_slot_error() -> None:
    maps = SlotMaps()
    with pytest.raises(SlotError, match="cannot open slot"):
        maps.batch_array(os.getpid(), 999_999, (1, 2))


def test_a_slot_too_small_for_the_batch_is_a_slot_error() -> None:
    pool = SlotPool(16)
    slot = pool.acquire()
    maps = SlotMaps()
    try:
        with pytest.raises(SlotError, match="holds 16 bytes"):
            maps.batch_array(os.getpid(), slot.fd, (2, 9))
        view = maps.batch_array(os.getpid(), slot.fd, (2, 8))
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
