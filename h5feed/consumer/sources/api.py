"""``h5feed.dataset(source=...)`` / ``h5feed.batches(source=...)``: the user's code in the workers.

Batches (NumPy, or tf.data with the same structure): the user's element tree with every leaf
stacked along a new first axis — except for keras sources, whose items are batches already and
are passed on as they are. A leaf with a dimension that varies between elements is zero-padded
to the batch's largest, with its lengths beside it (``x`` -> ``x_length`` in a dict; elsewhere
the leaf becomes the pair ``(x, lengths)``), or, with ``ragged=``, given as a
``tf.RaggedTensor`` (NumPy: :class:`h5feed.common.elements.values.RaggedArray`). Strings are
``tf.string`` (NumPy: object arrays of bytes).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from h5feed.consumer.config.groups import FeedOptions, check_main_path
from h5feed.consumer.sources.options import SOURCE_KEYS, SourceConfig
from h5feed.consumer.sources.scheduler import check_ragged
from h5feed.consumer.sources.tf_elements import ragged_paths, spec_from_signature


def make_source_config(files: Any, kwargs: Mapping[str, Any]) -> SourceConfig:
    """The configuration of a source feed; TypeError for arguments that do not apply."""
    if files is not None:
        raise TypeError("h5feed: give either files or source=, not both")
    # A source feed has no data group (DataOptions: HDF5 files' clips, index, bad frames).
    unknown = set(kwargs) - set(SOURCE_KEYS) - set(FeedOptions.names())
    if unknown:
        raise TypeError(f"h5feed: arguments {sorted(unknown)} do not apply to source=")
    ragged = kwargs.get("ragged", False)
    signature = kwargs.get("output_signature")
    spec = spec_from_signature(signature) if signature is not None else None
    if signature is not None:
        ragged = ragged_paths(signature, ragged)
    feed_options = FeedOptions.of(kwargs)
    if isinstance(kwargs["source"], str):
        check_main_path("source", kwargs["source"], feed_options)
    config = SourceConfig(
        source=kwargs["source"],
        args=dict(kwargs.get("source_args") or {}),
        ragged=ragged if isinstance(ragged, bool) else tuple(ragged),
        steps_per_epoch=kwargs.get("steps_per_epoch"),
        batched=kwargs.get("source_batched", False),
        shards_start_alike=kwargs.get("shards_start_alike", False),
        spec=spec,
        sys_path=tuple(p for p in sys.path if isinstance(p, str)),
        options=feed_options,
    )
    for leaf in spec.leaves if spec is not None else ():  # else: once the workers tell it
        check_ragged(leaf, config)
    return config
