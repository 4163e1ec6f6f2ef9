"""``h5feed.dataset(source=...)`` / ``h5feed.batches(source=...)``: the user's code in the workers.

Batches (NumPy, or tf.data with the same structure): the user's element tree with every leaf
stacked along a new first axis — except for keras sources, whose items are batches already and
are passed on as they are (a list in a keras item, e.g. the labels ``[y_a, y_b]`` of
``(x, [y_a, y_b])`` for two heads, is a list of fields: tf.data gives it as a tuple). A leaf
with a dimension that varies between elements is zero-padded to the batch's largest, with its
lengths beside it (``x`` -> ``x_length`` in a dict; elsewhere the leaf becomes the pair
``(x, lengths)``), or, with ``ragged=``, given as a ``tf.RaggedTensor`` (NumPy:
:class:`h5feed.common.elements.RaggedArray`). Strings are ``tf.string`` (NumPy: object arrays
of bytes). The TensorFlow conversions are in :mod:`h5feed.consumer.tf_elements`.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from h5feed.common.config import ClipSpec
from h5feed.consumer.api import Feed, feed_dataset
from h5feed.consumer.options import FeedConfig, FeedOptions
from h5feed.consumer.plan import Cursor
from h5feed.consumer.source_options import SOURCE_KEYS, SourceConfig
from h5feed.consumer.stream import BatchStream
from h5feed.consumer.tf_elements import ragged_paths, spec_from_signature, tf_signature, to_tf

if TYPE_CHECKING:
    import tensorflow as tf


def make_source_config(files: Any, kwargs: Mapping[str, Any]) -> FeedConfig:
    """The configuration of a source feed; TypeError for arguments that do not apply."""
    if files is not None:
        raise TypeError("h5feed: give either files or source=, not both")
    option_names = {f.name for f in dataclasses.fields(FeedOptions)}
    not_here = {"clips_per_video", "clip_start", "index_cache", "data_root"}
    unknown = set(kwargs) - set(SOURCE_KEYS) - option_names
    unknown |= set(kwargs) & not_here
    if unknown:
        raise TypeError(f"h5feed: arguments {sorted(unknown)} do not apply to source=")
    ragged = kwargs.get("ragged", False)
    signature = kwargs.get("output_signature")
    spec = spec_from_signature(signature) if signature is not None else None
    if signature is not None:
        ragged = ragged_paths(signature, ragged)
    source = SourceConfig(
        source=kwargs["source"],
        args=dict(kwargs.get("source_args") or {}),
        ragged=ragged if isinstance(ragged, bool) else tuple(ragged),
        steps_per_epoch=kwargs.get("steps_per_epoch"),
        spec=spec,
        given_spec=spec is not None,
        sys_path=tuple(p for p in sys.path if isinstance(p, str)),
    )
    options = {k: v for k, v in kwargs.items() if k in option_names}
    options["index_cache"] = None
    return FeedConfig((), ClipSpec(), FeedOptions(**options), source)


class SourceFeed(Feed):
    """A :class:`Feed` of a user source. The first iteration learns the source's kind and
    element spec from the workers; every later iteration uses that same spec."""

    def __init__(self, config: FeedConfig) -> None:
        super().__init__(config)
        self._learning: BatchStream | None = None

    def stream(self) -> BatchStream:
        self._remember()
        stream = super().stream()
        self._learning = stream
        return stream

    def learn(self) -> None:
        """Start the workers once, without planning a batch, to learn the source's kind and
        element spec (a TensorFlow signature needs them before the first batch)."""
        stream = BatchStream(self.config, Cursor(0, 0), 0)
        self._learning = stream
        try:
            for _ in stream:
                pass
        finally:
            stream.close()
        self._remember()

    def _remember(self) -> None:
        stream, source = self._learning, self.config.source
        learnt = stream.learnt if stream is not None else None
        if learnt is None or source is None or source.kind is not None:
            return
        source = dataclasses.replace(source, spec=learnt.spec, kind=learnt.kind)
        self.config = dataclasses.replace(self.config, source=source)
        self._learning = None


def source_dataset(feed: SourceFeed, prefetch: int | None) -> tf.data.Dataset:
    """The tf.data.Dataset of a source feed (see :func:`h5feed.dataset`)."""
    feed.learn()
    signature = tf_signature(feed.config)

    def generate() -> Iterator[Any]:
        stream = feed.stream()
        try:
            for batch in stream:
                yield to_tf(batch)  # ragged tensors; lists (keras sources) as tuples
        finally:
            stream.close()

    return feed_dataset(feed, generate, signature, prefetch)
