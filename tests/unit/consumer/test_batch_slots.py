"""BatchSlots on its own: when an HDF5 iteration has a slot pool, which batch gets a slot and
which worker may write into it (the slots at work: tests/unit/producer/test_shm.py)."""

from __future__ import annotations

import socket

import pytest
from fake_peers import hdf_config, make_peer

from h5feed.consumer.core.slots import supported
from h5feed.consumer.hdf5.batch_slots import BatchSlots, shares_memory

needs_memfd = pytest.mark.skipif(not supported(), reason="anonymous memory files are Linux-only")


def test_a_local_worker_or_one_on_this_host_shares_memory_and_no_other() -> None:
    assert shares_memory(make_peer("l", local=True))
    assert shares_memory(make_peer("h", host=socket.gethostname()))
    assert not shares_memory(make_peer("r"))  # another host


@pytest.mark.parametrize(
    "options",
    [
        {"crop": (8, 8), "shared_memory": False},  # turned off
        {"shared_memory": True},  # the frame size depends on the stored frames
        {"crop": (8, 8), "transform": "json:loads", "shared_memory": True},  # a transform's shape
    ],
)
def test_no_pool_where_a_clips_size_is_not_known_before_decoding_or_it_is_off(
    options: dict[str, object],
) -> None:
    assert BatchSlots.for_iteration(hdf_config(["a.h5"], **options), "job") is None


@needs_memfd
def test_a_batch_gets_a_slot_only_when_a_worker_may_write_into_it() -> None:
    config = hdf_config(["a.h5"], crop=(8, 6), clip_len=2, batch_size=4, shared_memory=True)
    slots = BatchSlots.for_iteration(config, "job")
    assert slots is not None
    try:
        assert slots.clip_shape == (2, 8, 6, 3) and slots.pool.nbytes == 4 * 2 * 8 * 6 * 3
        assert slots.for_batch([make_peer("r")]) is None and slots.size == 0
        assert slots.for_batch([make_peer("r"), make_peer("l", local=True)]) is not None
        assert slots.size == 1
        assert slots.part_nbytes(3) == 3 * 2 * 8 * 6 * 3  # three rows of the four
    finally:
        slots.close()
