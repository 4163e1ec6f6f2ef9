"""Aligned copies for TensorFlow in reused buffers (h5feed.common.system.memory.TensorFlowBuffers):
a batch that crossed the socket in one part is unaligned; h5feed.dataset copies it once into
a buffer that is reused only when nothing, TensorFlow's tensors included, holds it."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import numpy as np
import pytest

from h5feed.common.system.memory import TensorFlowBuffers, aligned_empty, is_aligned

SHAPE = (4, 8, 64, 64, 3)  # 393 KiB: above the size that is copied


def unaligned(fill: int) -> np.ndarray:
    """An array of SHAPE whose data starts one byte past an aligned address."""
    raw = np.empty(int(np.prod(SHAPE)) + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + 1
    array = raw[start : start + int(np.prod(SHAPE))].reshape(SHAPE)
    array[...] = fill
    assert not is_aligned(array)
    return array


def test_aligned_small_and_object_arrays_are_handed_over_as_they_are() -> None:
    buffers = TensorFlowBuffers()
    aligned = aligned_empty(SHAPE)
    small = unaligned(1)[:1, :1]  # a few KiB: TensorFlow's own copy costs little
    names = np.array([b"a", b"b"], dtype=object)
    for array in (aligned, small, names):
        assert buffers.copy(array) is array


def test_an_unaligned_array_is_copied_aligned_and_its_buffer_reused_once_dropped() -> None:
    buffers = TensorFlowBuffers()
    first = buffers.copy(unaligned(7))
    assert is_aligned(first) and first.shape == SHAPE and (first == 7).all()
    first_address = first.ctypes.data
    view = first[2:]  # a view keeps the buffer
    del first
    gc.collect()
    second = buffers.copy(unaligned(9))
    second_address = second.ctypes.data
    assert second_address != first_address and (view == 7).all()  # not reused while held
    del view, second
    gc.collect()
    third = buffers.copy(unaligned(11))
    assert third.ctypes.data in {first_address, second_address}  # a dropped one, reused
    assert (third == 11).all()


def test_batches_tensorflow_still_holds_never_change() -> None:
    tf = pytest.importorskip("tensorflow")  # the tf extra is part of the test install
    buffers = TensorFlowBuffers()

    def batches(first: int) -> tf.data.Dataset:
        def made() -> Iterator[np.ndarray]:
            for fill in range(first, first + 6):
                yield buffers.copy(unaligned(fill))

        return tf.data.Dataset.from_generator(
            made, output_signature=tf.TensorSpec(SHAPE, tf.uint8)
        ).prefetch(2)

    held = list(batches(0))  # as tf.data's consumers keep elements
    gc.collect()
    later = [int(t.numpy()[0, 0, 0, 0, 0]) for t in batches(100)]  # buffers freed meanwhile
    assert later == list(range(100, 106))
    assert [int(t.numpy().min()) for t in held] == [int(t.numpy().max()) for t in held]
    assert [int(t.numpy()[-1, -1, -1, -1, -1]) for t in held] == list(range(6))


def test_the_generator_drops_each_received_batch_before_tensorflow_gets_its_element() -> None:
    # A received batch is a view of ZeroMQ's buffer: held while the generator is suspended,
    # that buffer cannot be reused for the next message (see signature.elements_of).
    from h5feed.consumer.trainers.signature import elements_of

    buffers = TensorFlowBuffers()
    received: list[weakref.ref[np.ndarray]] = []

    def arriving(fill: int) -> dict[str, np.ndarray]:
        frames = unaligned(fill)
        received.append(weakref.ref(frames))
        return {"frames": frames}

    # map() keeps no reference to what it returned, as the stream keeps none to its batches.
    elements = elements_of(map(arriving, range(3)), lambda batch: buffers.copy(batch["frames"]))
    first = next(elements)  # the generator is now suspended after handing this one over
    gc.collect()
    assert received[0]() is None, "the received batch outlives the hand-off"
    assert is_aligned(first) and (first == 0).all()  # the element keeps its own copy
    assert [int(e[0, 0, 0, 0, 0]) for e in elements] == [1, 2]
