"""``h5feed.dataset(source=...)`` / ``h5feed.batches(source=...)``: the user's code in the workers.

Batches (NumPy, or tf.data with the same structure): the user's element tree with every leaf
stacked along a new first axis — except for keras sources, whose items are batches already and
are passed on as they are. A leaf with a dimension that varies between elements is zero-padded
to the batch's largest, with its lengths beside it (``x`` -> ``x_length`` in a dict; elsewhere
the leaf becomes the pair ``(x, lengths)``), or, with ``ragged=``, given as a
``tf.RaggedTensor`` (NumPy: :class:`h5feed.common.elements.RaggedArray`). Strings are
``tf.string`` (NumPy: object arrays of bytes).
"""

from __future__ import annotations

import dataclasses
import sys
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from h5feed.common import elements
from h5feed.common.elements import STRING, ElementSpec, LeafSpec, RaggedArray
from h5feed.common.errors import SourceError
from h5feed.consumer.api import Feed
from h5feed.consumer.options import FeedOptions
from h5feed.consumer.source_coordinator import KERAS, SourceCoordinator
from h5feed.consumer.source_options import SOURCE_KEYS, Learnt, SourceConfig
from h5feed.consumer.stream import BatchStream

if TYPE_CHECKING:
    # tf_signature (below, unchanged; it moves to tf_elements.py) reads ``config.source.spec``,
    # ``.kind``, ``.is_ragged`` and ``config.options``: the signature module gives it the
    # source config together with what the workers told (the config itself holds no kind).
    from h5feed.consumer.signature import SourceSignatureInput as FeedConfig


def make_source_config(files: Any, kwargs: Mapping[str, Any]) -> SourceConfig:
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
        ragged = _ragged_paths(signature, ragged)
    options = {k: v for k, v in kwargs.items() if k in option_names}
    options["index_cache"] = None
    return SourceConfig(
        source=kwargs["source"],
        args=dict(kwargs.get("source_args") or {}),
        ragged=ragged if isinstance(ragged, bool) else tuple(ragged),
        steps_per_epoch=kwargs.get("steps_per_epoch"),
        spec=spec,
        sys_path=tuple(p for p in sys.path if isinstance(p, str)),
        options=FeedOptions(**options),
    )


def learnt_of(stream: BatchStream) -> Learnt | None:
    """What the workers of ``stream`` told of its source, once its handshake has finished;
    None before (or for an HDF5 stream). The one place that reads it off the coordinator."""
    coordinator = stream.coordinator
    if not isinstance(coordinator, SourceCoordinator):
        return None
    kind, spec = coordinator.kind, coordinator.spec
    return Learnt(kind, spec) if kind is not None and spec is not None else None


class SourceFeed(Feed):
    """A :class:`Feed` of a user source.

    Guarantees: the configuration never changes. What the workers tell (kind and element
    spec) is :attr:`learnt`, kept by the feed once an iteration's handshake has finished;
    every iteration started after that gives its workers that spec (no probe), so its batches
    have the same structure as the ones before (and as the tf.data signature).
    """

    config: SourceConfig

    def __init__(self, config: SourceConfig) -> None:
        super().__init__(config)
        self._learnt: Learnt | None = None
        self._learning: weakref.ref[BatchStream] | None = None  # the iteration that probes

    @property
    def learnt(self) -> Learnt | None:
        """The source's kind and element spec, once an iteration's workers told them; then
        never changed. None before."""
        self._remember()
        return self._learnt

    def _remember(self) -> None:
        """Keep what the probing iteration's workers told, once they told it."""
        stream = self._learning() if self._learning is not None else None
        if self._learnt is None and stream is not None:
            self._learnt = learnt_of(stream)

    def _known(self) -> Learnt | None:
        return self.learnt

    def _started(self, stream: BatchStream) -> None:
        if self._learnt is None:
            self._learning = weakref.ref(stream)

    def _keep_stats(self, stats: dict[str, Any]) -> None:
        self._remember()  # an iteration that ends tells what it learnt before it goes
        super()._keep_stats(stats)


# -- TensorFlow ----------------------------------------------------------------------------


def spec_from_signature(signature: Any) -> ElementSpec:
    """An element spec from a ``tf.TensorSpec`` tree (dicts, tuples; RaggedTensorSpec: a
    leaf whose ragged dimensions vary)."""
    import tensorflow as tf

    leaves: list[LeafSpec] = []

    def walk(node: Any, path: str) -> list[Any]:
        if isinstance(node, Mapping):
            return [
                "dict",
                [[str(k), walk(node[k], f"{path}/{k}" if path else str(k))] for k in sorted(node)],
            ]
        if isinstance(node, tuple):
            return [
                "tuple",
                [walk(sub, f"{path}/{i}" if path else str(i)) for i, sub in enumerate(node)],
            ]
        if isinstance(node, (tf.TensorSpec, tf.RaggedTensorSpec)):
            dtype = STRING if node.dtype == tf.string else np.dtype(node.dtype.as_numpy_dtype).str
            if dtype != STRING and dtype not in elements.NUMERIC_DTYPES:
                raise SourceError(f"{elements.field_name(path)}: dtype {node.dtype} not supported")
            leaves.append(LeafSpec(path, dtype, tuple(node.shape.as_list())))
            return ["leaf"]
        raise SourceError(
            f"output_signature: {elements.field_name(path)} is a {type(node).__name__}; "
            "use dicts, tuples, tf.TensorSpec and tf.RaggedTensorSpec"
        )

    tree = walk(signature, "")
    return ElementSpec(tree, tuple(leaves))


def _ragged_paths(signature: Any, ragged: Any) -> Any:
    """``ragged`` plus the paths of RaggedTensorSpec leaves of the signature."""
    import tensorflow as tf

    if ragged is True:
        return True
    found = list(ragged) if ragged else []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, Mapping):
            for k in node:
                walk(node[k], f"{path}/{k}" if path else str(k))
        elif isinstance(node, tuple):
            for i, sub in enumerate(node):
                walk(sub, f"{path}/{i}" if path else str(i))
        elif isinstance(node, tf.RaggedTensorSpec):
            found.append(path)

    walk(signature, "")
    return tuple(found) if found else False


def tf_signature(config: FeedConfig) -> Any:
    """The tf.data element signature of a source feed whose spec and kind are known."""
    import tensorflow as tf

    source = config.source
    if source is None or source.spec is None:
        raise SourceError("the source's element spec is not known yet")
    spec = source.spec
    keras = source.kind == KERAS
    rows = config.options.batch_size if config.options.drop_remainder else None

    def dtype(leaf: LeafSpec) -> Any:
        return tf.string if leaf.is_string else tf.as_dtype(np.dtype(leaf.dtype))

    leaf_specs: list[Any] = []
    for leaf in spec.leaves:
        if keras:
            leaf_specs.append(tf.TensorSpec(leaf.shape, dtype(leaf)))
        elif leaf.variable_axes and source.is_ragged(leaf.path):
            leaf_specs.append(tf.RaggedTensorSpec((rows, *leaf.shape), dtype(leaf), 1, tf.int64))
        else:
            leaf_specs.append(tf.TensorSpec((rows, *leaf.shape), dtype(leaf)))

    def lengths(i: int) -> Any:
        leaf = spec.leaves[i]
        if keras or not leaf.variable_axes or source.is_ragged(leaf.path):
            return None
        k = len(leaf.variable_axes)
        return tf.TensorSpec((rows,) if k == 1 else (rows, k), tf.int64)

    return elements.build_batch(spec, leaf_specs, lengths)


def to_tf(batch: Any) -> Any:
    """A batch tree with its RaggedArray leaves as ``tf.RaggedTensor``."""
    import tensorflow as tf

    if isinstance(batch, RaggedArray):
        return tf.RaggedTensor.from_tensor(batch.values, lengths=batch.lengths)
    if isinstance(batch, dict):
        return {k: to_tf(v) for k, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(to_tf(v) for v in batch)
    return batch
