"""The tf.data element signature of a feed: one way for HDF5 files and user sources.

``h5feed.dataset()`` needs the signature before tf.data asks for an element. Where the
configuration alone tells it, nothing starts early: an HDF5 feed without a transform gives
``frames`` uint8 [B, clip_len, H, W, 3] (H, W from ``crop``, else ``resize``, else None) and
its other keys. Where it does not (an HDF5 ``transform``, whose output decides the frames'
shape and dtype; any ``source``, whose workers tell its kind and element spec),
:func:`feed_signature` starts the feed's first iteration and peeks at its first batch.

Guarantees of the peek:

1. The peeked iteration is the feed's first (it takes its epoch numbers as any iteration
   does), and no batch of it is lost or repeated: :meth:`FirstIteration.batches` yields the
   peeked batch, then the rest; ``dataset()`` gives that to the dataset's first ``iter()``.
   Every later ``iter()`` starts an iteration of its own.
2. What fails before the first batch (a bad import path, a worker's error, an element that
   does not fit the given ``output_signature``) is raised by ``dataset()`` itself, and the
   peeked iteration is closed.
3. HDF5 with a transform: ``frames`` has the first batch's shape (after the batch axis) and
   dtype; the workers check every later sample against them. Source: the signature is
   ``tf_signature`` of the kind and element spec the workers told (``Feed.learnt``);
   every later iteration gives its workers that spec, so every batch fits the signature. An
   iteration that ends before its first batch still tells a source's spec (its first
   ``iter()`` then yields nothing); with an HDF5 transform it is an error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from h5feed.common.elements.batch_keys import BATCH_KEYS, VALID_KEY
from h5feed.common.errors import H5FeedError, SourceError
from h5feed.common.system.memory import TensorFlowBuffers
from h5feed.consumer.inputs import input_of
from h5feed.consumer.options import FeedConfig, HdfConfig
from h5feed.consumer.sources.options import Learnt, SourceConfig
from h5feed.consumer.sources.tf_elements import tf_signature, to_tf
from h5feed.consumer.stream import BatchStream

if TYPE_CHECKING:
    from h5feed.consumer.feed import Feed


@dataclasses.dataclass(frozen=True, slots=True)
class FirstIteration:
    """A feed's first iteration, started to learn the signature, and its first batch (None:
    the iteration ended without one)."""

    stream: BatchStream
    first: Any | None

    def batches(self) -> Iterator[Any]:
        """The whole iteration: the peeked batch, then the rest of the stream."""
        if self.first is None:
            return self.stream
        return itertools.chain([self.first], self.stream)


def peek(feed: Feed) -> FirstIteration:
    """Start ``feed``'s next iteration and take its first batch; what the iteration raises
    before it is raised here, with the iteration closed."""
    stream = feed.stream()
    try:
        return FirstIteration(stream, next(stream, None))
    except BaseException:
        stream.close()
        raise


def feed_signature(
    feed: Feed, keys: Sequence[str] = BATCH_KEYS
) -> tuple[Any, FirstIteration | None]:
    """The tf.data signature of ``feed``'s batches (an HDF5 feed's with ``keys``), and the
    first iteration when it had to be started to learn it (see the module docstring)."""
    return feed.input.visit(_FeedSignature(feed, tuple(keys)))


@contextlib.contextmanager
def _closed_on_error(iteration: FirstIteration) -> Iterator[None]:
    """The peeked iteration is closed if what it told does not make a signature."""
    try:
        yield
    except BaseException:
        iteration.stream.close()
        raise


@dataclasses.dataclass(frozen=True, slots=True)
class _FeedSignature:
    """:func:`feed_signature` for each input kind (its input object chooses)."""

    feed: Feed
    keys: tuple[str, ...]

    def hdf5(self, config: HdfConfig) -> tuple[Any, FirstIteration | None]:
        if config.clip.transform is None:  # the clip spec tells it: nothing starts early
            return hdf5_signature(config, None, self.keys), None
        iteration = peek(self.feed)
        with _closed_on_error(iteration):
            if iteration.first is None:
                raise H5FeedError(
                    "the first iteration ended before its first batch, so the shape and dtype "
                    f"of transform {config.clip.transform!r} are unknown"
                )
            return hdf5_signature(config, iteration.first, self.keys), iteration

    def source(self, config: SourceConfig) -> tuple[Any, FirstIteration | None]:
        iteration = peek(self.feed)
        with _closed_on_error(iteration):
            learnt = self.feed.learnt
            if learnt is None:
                raise SourceError(f"the workers did not tell the element spec of {config.source!r}")
            return source_signature(config, learnt), iteration


def hdf5_signature(
    config: HdfConfig, first: Mapping[str, np.ndarray] | None, keys: Sequence[str] = BATCH_KEYS
) -> dict[str, Any]:
    """The signature of an HDF5 feed's elements with ``keys``; ``frames`` from the clip
    spec, or from ``first`` (a batch) when given; ``file``/``video`` strings, ``valid`` bool,
    the rest int64."""
    import tensorflow as tf

    clip, options = config.clip, config.options
    rows = options.plan.batch_size if options.plan.drop_remainder else None
    if first is None:
        height, width = clip.frame_shape
        frames = tf.TensorSpec((rows, clip.clip_len, height, width, 3), tf.uint8)
    else:
        sample = first["frames"]
        frames = tf.TensorSpec((rows, *sample.shape[1:]), tf.as_dtype(sample.dtype))
    dtypes = {"file": tf.string, "video": tf.string, VALID_KEY: tf.bool}
    return {
        key: frames if key == "frames" else tf.TensorSpec((rows,), dtypes.get(key, tf.int64))
        for key in keys
    }


def source_signature(config: SourceConfig, learnt: Learnt) -> Any:
    """The signature of a source feed's batches, from the kind and spec its workers told."""
    return tf_signature(config, learnt)


def element_maker(
    config: FeedConfig, signature: Any, keys: Sequence[str] = BATCH_KEYS
) -> Callable[[Any], Any]:
    """What turns a batch of the stream into a tf.data element of ``signature``: an HDF5
    batch keeps ``keys``; a source batch gives its RaggedArrays as ``tf.RaggedTensor`` and
    its lists (a keras item's ``[y_a, y_b]``) as tuples, as the signature has them. Large
    unaligned arrays (frames that came over the socket) are copied once to an aligned buffer
    here, reused once TensorFlow lets go
    (:class:`h5feed.common.system.memory.TensorFlowBuffers`)."""
    return input_of(config).visit(_ElementMaker(tuple(keys)))


@dataclasses.dataclass(frozen=True, slots=True)
class _ElementMaker:
    """:func:`element_maker` for each input kind (its input object chooses)."""

    keys: tuple[str, ...]

    def hdf5(self, config: HdfConfig) -> Callable[[Any], Any]:
        buffers, keys = TensorFlowBuffers(), self.keys  # this dataset's: reused across batches
        return lambda batch: {key: buffers.copy(batch[key]) for key in keys}

    def source(self, config: SourceConfig) -> Callable[[Any], Any]:
        return to_tf


def elements_of(batches: Iterable[Any], element: Callable[[Any], Any]) -> Iterator[Any]:
    """``element(batch)`` for each of ``batches``, each batch dropped before its element is
    yielded: while TensorFlow holds the element (and until it asks for the next one), the
    generator holds nothing but it.

    Why: a batch that came over the socket is a view of ZeroMQ's receive buffer. Held across
    the ``yield``, that buffer cannot be reused for the next message, so ZeroMQ's allocator
    maps fresh memory and the kernel faults it in page by page (measured over loopback: ~300
    page faults per 4.8 MB batch in ZeroMQ's I/O thread; trainer CPU 0.30 -> 0.22 ms per
    clip once dropped). The element keeps what it shares (shared-memory slots, aligned
    arrays) alive on its own."""
    for batch in batches:
        out = element(batch)
        del batch  # the generator's frame must not keep the received buffer while suspended
        yield out
