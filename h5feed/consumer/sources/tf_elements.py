"""User sources' element trees in TensorFlow: signatures in, signatures and tensors out.

TensorFlow is imported inside each function only (importing this module does not import it).

Lists: ``tf.data`` structures have no lists (a list in an ``output_signature`` or a yielded
value is refused or read as a tensor). So every ``"list"`` node of an element spec (a keras
source's ``(x, [y_a, y_b])``) is a **tuple** in the signature and in the yielded batches:
``(x, (y_a, y_b))``, which Keras takes for the labels of a multi-output model as it takes the
list. NumPy batches (``h5feed.batches``) keep the list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from h5feed.common.elements import tree
from h5feed.common.elements import values as elements
from h5feed.common.elements.batch_keys import SAMPLE_KEY, VALID_KEY
from h5feed.common.elements.values import STRING, ElementSpec, LeafSpec, RaggedArray
from h5feed.common.errors import SourceError
from h5feed.consumer.sources.kinds import kind_class

if TYPE_CHECKING:
    from h5feed.consumer.sources.options import Learnt, SourceConfig


def spec_from_signature(signature: Any) -> ElementSpec:
    """An element spec from a ``tf.TensorSpec`` tree: dicts (``str`` keys), tuples and lists
    (a list is structure here: a spec is the only leaf; it matches a list in the elements),
    with ``tf.TensorSpec`` / ``tf.RaggedTensorSpec`` leaves (RaggedTensorSpec: a leaf whose
    ragged dimensions vary). SourceError naming the field that is none of these."""
    import tensorflow as tf

    try:
        description, pairs = tree.flatten_with_paths(signature, convention=tree.KERAS)
    except tree.StructureError as exc:
        raise SourceError(
            f"output_signature: {elements.field_name(exc.path)}: {exc.reason}"
        ) from None
    leaves: list[LeafSpec] = []
    for path, node in pairs:
        if not isinstance(node, (tf.TensorSpec, tf.RaggedTensorSpec)):
            raise SourceError(
                f"output_signature: {elements.field_name(path)} is a {type(node).__name__}; "
                "use dicts, tuples, tf.TensorSpec and tf.RaggedTensorSpec"
            )
        dtype = STRING if node.dtype == tf.string else np.dtype(node.dtype.as_numpy_dtype).str
        if dtype != STRING and dtype not in elements.NUMERIC_DTYPES:
            raise SourceError(f"{elements.field_name(path)}: dtype {node.dtype} not supported")
        leaves.append(LeafSpec(path, dtype, tuple(node.shape.as_list())))
    return ElementSpec(description, tuple(leaves))


def ragged_paths(signature: Any, ragged: Any) -> Any:
    """``ragged`` (True, False or paths) plus the paths of the signature's
    ``tf.RaggedTensorSpec`` leaves: True, a tuple of paths, or False if there are none."""
    import tensorflow as tf

    if ragged is True:
        return True
    found = list(ragged) if ragged else []
    _description, pairs = tree.flatten_with_paths(signature, convention=tree.KERAS)
    found.extend(path for path, node in pairs if isinstance(node, tf.RaggedTensorSpec))
    return tuple(found) if found else False


def tf_signature(source: SourceConfig, learnt: Learnt) -> Any:
    """The tf.data element signature of a source feed, from the kind and element spec its
    workers told: the batch tree of :func:`h5feed.common.elements.values.build_batch`, with list
    nodes as tuples."""
    import tensorflow as tf

    spec = learnt.spec
    whole = kind_class(learnt.kind).whole_batches  # keras: items are batches already
    rows = source.options.plan.batch_size if source.options.plan.drop_remainder else None

    def dtype(leaf: LeafSpec) -> Any:
        return tf.string if leaf.is_string else tf.as_dtype(np.dtype(leaf.dtype))

    leaf_specs: list[Any] = []
    for leaf in spec.leaves:
        if whole:
            leaf_specs.append(tf.TensorSpec(leaf.shape, dtype(leaf)))
        elif leaf.variable_axes and source.is_ragged(leaf.path):
            ragged_rank = leaf.variable_axes[0] + 1  # the uniform dimensions before it too
            leaf_specs.append(
                tf.RaggedTensorSpec((rows, *leaf.shape), dtype(leaf), ragged_rank, tf.int64)
            )
        else:
            leaf_specs.append(tf.TensorSpec((rows, *leaf.shape), dtype(leaf)))

    def lengths(i: int) -> Any:
        leaf = spec.leaves[i]
        if whole or not leaf.variable_axes or source.is_ragged(leaf.path):
            return None
        k = len(leaf.variable_axes)
        return tf.TensorSpec((rows,) if k == 1 else (rows, k), tf.int64)

    tuples = ElementSpec(tree.with_tuples(spec.tree), spec.leaves)
    signature = elements.build_batch(tuples, leaf_specs, lengths)
    if source.options.plan.pads:  # a padded map source's dicts: see sources/padding.py
        signature = {
            **signature,
            SAMPLE_KEY: tf.TensorSpec((rows,), tf.int64),
            VALID_KEY: tf.TensorSpec((rows,), tf.bool),
        }
    return signature


def to_tf(batch: Any) -> Any:
    """A batch tree as ``tf.data`` takes it: RaggedArray leaves as ``tf.RaggedTensor``,
    lists as tuples (everything else as it is)."""

    def convert(leaf: Any) -> Any:
        return ragged_tensor(leaf) if isinstance(leaf, RaggedArray) else leaf

    description, leaves = tree.flatten(batch, convention=tree.KERAS)
    return tree.unflatten(tree.with_tuples(description), [convert(leaf) for leaf in leaves])


def ragged_tensor(leaf: RaggedArray) -> Any:
    """``leaf`` as a ``tf.RaggedTensor`` ragged at its varying dimension: the dimensions
    before it (uniform, e.g. the C of a [C, T, H, W] clip) become uniform row partitions, so
    ``rt[i, c]`` has ``lengths[i]`` rows."""
    import tensorflow as tf

    values, lengths = leaf.values, leaf.lengths
    uniform = values.shape[1 : 1 + leaf.axis]
    copies = int(np.prod(uniform)) if uniform else 1
    flat = values.reshape(len(values) * copies, *values.shape[1 + leaf.axis :])
    result = tf.RaggedTensor.from_tensor(flat, lengths=np.repeat(lengths, copies))
    for size in reversed(uniform):
        result = tf.RaggedTensor.from_uniform_row_length(result, size)
    return result
