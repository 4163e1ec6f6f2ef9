"""Keras 3 on any backend (JAX, PyTorch, TensorFlow) without TensorFlow: a ``keras.utils.PyDataset``
over ``h5feed.batches``.

``keras_batches(files, x="frames", y="label", **kwargs)`` starts the feed's workers at once
(their index tells the number of batches per epoch, which Keras then shows) and returns a
``PyDataset`` for ``model.fit``. Guarantees:

1. ``len(ds)`` is the plan's number of batches per epoch of this shard; Keras epoch k takes the
   ``len(ds)`` batches of h5feed epoch k, so each sample once per Keras epoch (as the plan
   says: ``shuffle``, ``seed``, ``shard``). Keras's own ``shuffle`` permutes the indices it
   asks for; the item for an index is the stream's next batch whatever the index (h5feed
   plans the order), so it changes nothing. Keras peeks at a few items to build the model
   (an "epoch" of one item, plus the JAX backend's prefetch, that it does not train on): a
   Keras epoch that ends after at most ``_GIVE_BACK`` items of ``len(ds)`` gives them back, and
   the next one starts with them. So do not set ``fit(steps_per_epoch=)`` below
   ``_GIVE_BACK``: a Keras epoch is an h5feed epoch.
2. Elements are ``(x, y)`` NumPy arrays (``x`` a dict when given several keys: a model with
   named inputs); string keys (``file``, ``video``) cannot become tensors and are refused.
   With ``shard_remainder="pad"`` they are ``(x, y, w)``, ``w`` = ``valid`` as float32
   sample weights, so the padded rows weigh nothing in the loss and ``weighted_metrics``
   (``y=None`` is then refused: Keras takes no weights without targets).
3. The feed runs epochs back to back (``epochs`` is ``fit``'s), ``deterministic`` (batches in
   plan order, so epochs do not interleave), with Keras's ``workers=1`` thread and no Keras
   multiprocessing: the decoding runs in h5feed's own ``workers`` processes.
4. ``close()`` (or the end of a ``with`` block, or garbage collection) stops the workers.
5. ``source="module:factory"``: your own map-style dataset or Keras ``Sequence``/``PyDataset``
   runs in h5feed's workers (Keras on JAX or PyTorch: no TensorFlow anywhere), and each item
   is the batch :func:`h5feed.batches` gives (a ``Sequence``'s item as it returned it, a map
   dataset's elements stacked ``batch_size`` at a time), so ``x=``/``y=`` do not apply.
   1, 3 and 4 hold as above; ``len(ds)`` is the source's batches per epoch of this shard
   (a ``Sequence``: its ``len()``). A generator source has no length: refused. So is
   ``shard_remainder="pad"``: your batch goes to Keras as it is, with no place for the
   weights that would leave the padded rows out.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from h5feed.common.elements.batch_keys import BATCH_KEYS, POSITION_KEYS, VALID_KEY
from h5feed.consumer.feed import Feed, feed_config, feed_of
from h5feed.consumer.parameters import PathsLike
from h5feed.consumer.stream import BatchStream

_STRING_KEYS = ("file", "video")
# Keras's model-building peek takes one item, the JAX backend prefetches two more: an epoch
# that ends after at most this many items trained on none of them (see guarantee 1).
_GIVE_BACK = 3


_X: Final = "frames"
_Y: Final = "label"


def keras_batches(
    files: PathsLike | None = None,
    *,
    x: str | Sequence[str] = _X,
    y: str | None = _Y,
    max_queue_size: int = 10,
    **kwargs: Any,
) -> Any:
    """A ``keras.utils.PyDataset`` of ``(batch[x], batch[y])`` (see the module docstring);
    the other keyword arguments are :func:`h5feed.batches`'s, less ``epochs`` and
    ``deterministic``. With ``source=``: the source's batches as they are (5.)."""
    taken = sorted({"epochs", "deterministic"} & set(kwargs))
    if taken:
        raise TypeError(
            f"h5feed.keras_batches sets {', '.join(taken)} itself: fit(epochs=) decides the "
            "epochs, and batches come in plan order"
        )
    source = kwargs.get("source")
    if source is not None and (x is not _X or y is not _Y):
        raise TypeError(
            "h5feed.keras_batches: x= and y= do not apply to source= (each item is your "
            "source's batch as it is)"
        )
    names = (x,) if isinstance(x, str) else tuple(x)
    wanted = [*names, *([y] if y is not None else [])] if source is None else []
    for key in wanted:
        if key in _STRING_KEYS:
            raise ValueError(f"h5feed.keras_batches: {key!r} holds strings, not a tensor")
        if key not in BATCH_KEYS + POSITION_KEYS:
            raise ValueError(f"h5feed.keras_batches: unknown key {key!r}")
    resume = kwargs.pop("resume", None)  # batches()' own keyword, not the configuration's
    # The configuration (validated, nothing started yet), asked what the rest needs.
    config = feed_config(files, {**kwargs, "epochs": None, "deterministic": True})
    pads = config.options.plan.pads
    if source is not None:
        if pads:
            raise ValueError(
                "h5feed.keras_batches(source=...) cannot take shard_remainder='pad': each item "
                "is your source's batch as it is, so Keras would count the padded rows as "
                "samples; iterate h5feed.batches(source=...) (or dataset()) and weigh them "
                "with 'valid'"
            )
        return _source_dataset(feed_of(config, resume), source, max_queue_size)
    if pads and y is None:
        raise ValueError(
            "h5feed.keras_batches: shard_remainder='pad' weighs the padded rows out with "
            "sample weights, which Keras takes only with targets: give y="
        )
    stream = feed_of(config, resume).stream()
    try:
        first = next(stream)  # the workers have read the index: the plan's length is known
        length = stream.scheduler.epoch_length
        if length is None:  # unreachable: an HDF5 iteration's first batch follows its index
            raise TypeError("h5feed.keras_batches: an HDF5 feed's index is needed")
    except BaseException:
        stream.close()
        raise
    single = x if isinstance(x, str) else None
    return _dataset_class()(stream, first, length, names, single, y, max_queue_size, pads)


def _source_dataset(feed: Feed, source: object, max_queue_size: int) -> Any:
    """keras_batches(source=...): the feed started, its first batch taken (the workers told
    the kind and length by then)."""
    stream = feed.stream()
    try:
        first = next(stream)  # the workers told the kind and length by then
        length = stream.scheduler.epoch_length
        if length is None:
            raise TypeError(
                f"h5feed.keras_batches: source {source!r} is a generator, whose "
                "epochs have no length that Keras could be told; give a map-style dataset "
                "or a Sequence/PyDataset, or iterate h5feed.batches(source=...) yourself"
            )
    except BaseException:
        stream.close()
        raise
    return _dataset_class()(stream, first, length, (), None, None, max_queue_size)


def _dataset_class() -> type:
    """The PyDataset subclass, made on first use (keras is imported only then)."""
    global _CLASS
    if _CLASS is None:
        import keras

        class FeedPyDataset(keras.utils.PyDataset):  # type: ignore[misc, name-defined]
            """See :mod:`h5feed.consumer.trainers.pydataset`."""

            def __init__(
                self,
                stream: BatchStream,
                first: dict[str, np.ndarray],
                length: int,
                names: tuple[str, ...],
                single: str | None,
                y: str | None,
                max_queue_size: int,
                weights: bool = False,
            ) -> None:
                super().__init__(
                    workers=1, use_multiprocessing=False, max_queue_size=max_queue_size
                )
                self.stream = stream
                self._pending: list[dict[str, np.ndarray]] = [first]
                self._length = length
                self._names, self._single, self._y = names, single, y
                self._weights = weights  # (x, y, valid as sample weights): guarantee 2
                self._lock = threading.Lock()  # Keras may call from its worker thread
                self._served: list[dict[str, np.ndarray]] = []  # this epoch's first items
                self._served_count = 0

            def __len__(self) -> int:
                return self._length

            def __getitem__(self, index: int) -> Any:
                with self._lock:  # the next batch of the plan, whatever ``index`` (see 1.)
                    batch = self._pending.pop(0) if self._pending else next(self.stream)
                    self._served_count += 1
                    # Only the first few are kept (to give back after a peek): keeping a
                    # whole epoch's batches would hold all their memory.
                    if self._served_count <= _GIVE_BACK:
                        self._served.append(batch)
                    else:
                        self._served.clear()
                if not self._names:  # source=: the source's batch as it is
                    return batch
                if self._single is not None:
                    x: Any = batch[self._single]
                else:
                    x = {name: batch[name] for name in self._names}
                if self._y is None:
                    return (x,)
                if self._weights:
                    return (x, batch[self._y], batch[VALID_KEY].astype(np.float32))
                return (x, batch[self._y])

            def on_epoch_end(self) -> None:
                with self._lock:
                    if self._served_count <= min(_GIVE_BACK, self._length - 1):
                        self._pending = self._served + self._pending  # a peek: give back
                    self._served, self._served_count = [], 0

            def stats(self) -> dict[str, Any]:
                return self.stream.stats()

            def close(self) -> None:
                self.stream.close()

            def __enter__(self) -> FeedPyDataset:
                return self

            def __exit__(self, *exc: object) -> None:
                self.close()

        _CLASS = FeedPyDataset
    return _CLASS


_CLASS: type | None = None
