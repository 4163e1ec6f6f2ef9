"""Elements of user sources: trees of arrays, numbers and strings, flattened for the wire.

Shared by the workers (which flatten, check and pack the elements a user's source yields) and
the consumer (which unpacks, checks and batches them). No TensorFlow here. This module only
re-exports: the specs and checks are in :mod:`h5feed.common.elements.specs`, the wire and
batches in :mod:`h5feed.common.elements.batches`, the tree walks in
:mod:`h5feed.common.elements.tree`.

An *element* is a tree: a ``dict`` (``str`` keys, taken in sorted order, as ``tf.nest`` does)
or a ``tuple`` of subtrees, or a *leaf*. A leaf is a NumPy array (bool, integer or float
dtype), a NumPy scalar, a Python ``bool``/``int``/``float`` (as NumPy makes them: bool, int64,
float64), a ``list`` of numbers (an array, as in ``tf.data``), a ``torch.Tensor`` in host
memory (as ``tensor.detach().numpy()`` gives it, bfloat16 as float32; told by its class, torch
is never imported here; CUDA tensors are refused), or a ``str``/``bytes`` (a string; str is
UTF-8 encoded). Anything else is refused with an :class:`SourceError` naming the
field. A field's *path* joins keys and tuple positions with ``/``, e.g. ``x/0/depth``.

The *convention* (keyword ``convention=`` of :func:`infer_spec`, :func:`flatten_checked`,
:func:`flatten`) says what a Python list is: ``"tfdata"`` (the default; map and generator
sources): a leaf, an array, as above; ``"keras"`` (keras sources): a list of subtrees, as
Keras reads ``(x, [y_a, y_b])`` for a two-headed model. A keras spec's tree then has
``["list", [...]]`` nodes, and :func:`build_batch` rebuilds them as lists.

An :class:`ElementSpec` fixes the tree and, per leaf, the dtype and the shape, where ``None``
marks a dimension that varies between elements. Every element is checked against it:
:func:`flatten_checked` raises :class:`SourceError` naming the path, the expected and the
actual dtype/shape.

Wire layout of a unit of ``n`` elements (arrays of a DATA message, leaf ``i`` in spec order):

* fixed-shape numeric leaf: ``"i"`` = the elements stacked, ``[n, *shape]``;
* numeric leaf with a ``None`` dimension: ``"i"`` = the elements zero-padded to the unit's
  largest, ``[n, *max]``, and ``"i.shape"`` = int64 ``[n, ndim]``, each element's own shape;
* string leaf: ``"i"`` = uint8, the elements' bytes one after another, and ``"i.len"`` = int64
  ``[n]``, each element's byte length.
"""

from __future__ import annotations

from h5feed.common.elements.batches import (
    Field,
    RaggedArray,
    build_batch,
    check_length_names,
    nbytes,
    pack,
    unpack,
)
from h5feed.common.elements.specs import (
    LENGTH_SUFFIX,
    NUMERIC_DTYPES,
    STRING,
    ElementSpec,
    LeafSpec,
    Tree,
    as_leaf,
    field_name,
    flatten,
    flatten_checked,
    infer_spec,
    merge_specs,
)
from h5feed.common.elements.tree import KERAS, TFDATA, Convention

__all__ = [
    "KERAS",
    "LENGTH_SUFFIX",
    "NUMERIC_DTYPES",
    "STRING",
    "TFDATA",
    "Convention",
    "ElementSpec",
    "Field",
    "LeafSpec",
    "RaggedArray",
    "Tree",
    "as_leaf",
    "build_batch",
    "check_length_names",
    "field_name",
    "flatten",
    "flatten_checked",
    "infer_spec",
    "merge_specs",
    "nbytes",
    "pack",
    "unpack",
]
