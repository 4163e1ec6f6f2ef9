"""Element specs: what a user source's elements are, inferred from them and checked on each.

See :mod:`h5feed.common.elements.values` for what an element is. The tree walks are
:mod:`h5feed.common.elements.tree`'s; the ``convention`` parameter (default ``"tfdata"``) says what
a
Python list in an element is: an array (``"tfdata"``, map and generator sources) or, for keras
sources (whose items are ``(x, [y_a, y_b])`` for two heads), a list of subtrees unless it is an
array of numbers one row per sample, as :mod:`h5feed.common.elements.keras_lists` decides from the
probe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import Any, Final

import numpy as np

from h5feed.common.elements import keras_lists, tree
from h5feed.common.errors import SourceError

#: dtype of string leaves in a spec (NumPy has no variable-length string dtype we send).
STRING: Final = "string"
#: The numeric dtypes a leaf may have (those the wire allows).
NUMERIC_DTYPES: Final = frozenset(
    np.dtype(name).str
    for name in (
        "bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
        "float16", "float32", "float64",
    )
)  # fmt: skip
#: Suffix of the lengths a padded field gets next to it (in a dict) in a batch.
LENGTH_SUFFIX: Final = "_length"

#: A tree description, msgpack-able (see :mod:`h5feed.common.elements.tree`): ``["leaf"]``,
#: ``["tuple", [...]]``, ``["list", [...]]`` (keras convention), ``["dict", [[k, sub], ...]]``.
Tree = tree.Description


@dataclasses.dataclass(frozen=True, slots=True)
class LeafSpec:
    """One leaf: its path, dtype (numpy ``dtype.str`` or ``"string"``) and shape."""

    path: str
    dtype: str
    shape: tuple[int | None, ...]

    @property
    def is_string(self) -> bool:
        return self.dtype == STRING

    @property
    def variable_axes(self) -> tuple[int, ...]:
        return tuple(a for a, d in enumerate(self.shape) if d is None)

    def describe(self) -> str:
        dims = ", ".join("None" if d is None else str(d) for d in self.shape)
        dtype = STRING if self.is_string else np.dtype(self.dtype).name
        return f"{dtype} [{dims}]"


@dataclasses.dataclass(frozen=True, slots=True)
class ElementSpec:
    """The structure of every element: a tree description and its leaves, in flattening
    order. The tree carries the convention it was read with: ``"list"`` nodes appear only
    in specs of keras sources (or of an ``output_signature`` with lists)."""

    tree: Tree
    leaves: tuple[LeafSpec, ...]

    def to_wire(self) -> dict[str, Any]:
        return {
            "tree": self.tree,
            "leaves": [[leaf.path, leaf.dtype, list(leaf.shape)] for leaf in self.leaves],
        }

    @classmethod
    def from_wire(cls, value: Any) -> ElementSpec:
        """Strict: anything that is not a spec as ``to_wire`` writes it raises SourceError."""
        if not isinstance(value, dict) or set(value) != {"tree", "leaves"}:
            raise SourceError(f"bad element spec {value!r:.200}")
        leaves = value["leaves"]
        if not isinstance(leaves, list):
            raise SourceError("bad element spec: leaves must be a list")
        parsed = []
        for entry in leaves:
            if not (
                isinstance(entry, list)
                and len(entry) == 3
                and isinstance(entry[0], str)
                and (entry[1] == STRING or entry[1] in NUMERIC_DTYPES)
                and isinstance(entry[2], list)
                and all(d is None or (type(d) is int and d >= 0) for d in entry[2])
            ):
                raise SourceError(f"bad leaf in element spec: {entry!r:.200}")
            parsed.append(LeafSpec(entry[0], entry[1], tuple(entry[2])))
        try:
            count = tree.leaf_count(value["tree"])
        except tree.StructureError as exc:
            raise SourceError(f"bad element tree: {exc}") from None
        if count != len(parsed):
            raise SourceError("bad element spec: the tree and the leaves disagree")
        return cls(value["tree"], tuple(parsed))

    def wire_arrays(self) -> int:
        """How many arrays a unit of these elements takes on the wire."""
        return sum(1 if not (leaf.is_string or leaf.variable_axes) else 2 for leaf in self.leaves)


def field_name(path: str) -> str:
    """A path as error messages show it ("the element" for a leaf at the root)."""
    return f"field {path!r}" if path else "the element"


# -- leaves ------------------------------------------------------------------------------


def as_leaf(value: Any, path: str) -> np.ndarray | bytes:
    """A leaf value as a NumPy array (numeric) or bytes (string); SourceError otherwise.
    A ``torch.Tensor`` is taken as :func:`tensor_array` makes it an array."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes):
        return value
    if isinstance(value, (np.ndarray, np.generic, bool, int, float, list)):
        try:
            array = np.asarray(value)
        except (ValueError, TypeError) as exc:  # a ragged list, for one
            raise SourceError(f"{field_name(path)}: cannot make an array of it: {exc}") from exc
        if array.dtype.str in NUMERIC_DTYPES:
            return array
        if array.dtype.kind in "iu" and isinstance(value, (int, list)):
            raise SourceError(f"{field_name(path)}: integer out of the int64 range")
        raise SourceError(
            f"{field_name(path)}: dtype {array.dtype} is not supported (bool, integer and "
            "float arrays, str and bytes are; a sequence of strings is a tuple of str)"
        )
    if is_torch_tensor(value):
        return as_leaf(tensor_array(value, path), path)
    raise SourceError(
        f"{field_name(path)}: a {type(value).__name__} is not an element field (arrays, "
        "numbers, str, bytes, torch tensors, and dicts/tuples of them are)"
    )


def is_torch_tensor(value: Any) -> bool:
    """Whether ``value`` is a ``torch.Tensor`` (a subclass too), told by its class alone:
    h5feed never imports torch to look."""
    return any(
        cls.__name__ == "Tensor" and cls.__module__ == "torch" for cls in type(value).__mro__
    )


def tensor_array(tensor: Any, path: str) -> np.ndarray:
    """A CPU tensor as NumPy, as ``tensor.detach().numpy()`` makes it (the same memory: the
    caller copies it into the unit before the next element is asked for). bfloat16, which
    NumPy lacks, becomes float32 (exact: every bfloat16 is a float32). SourceError for a
    tensor not in host memory (CUDA, MPS, meta: move it with ``.cpu()`` in the dataset, or
    better never build it on the GPU in a data worker) and for dtypes NumPy lacks."""
    device = getattr(getattr(tensor, "device", None), "type", "cpu")
    if device != "cpu":
        raise SourceError(
            f"{field_name(path)}: a torch tensor on device {str(tensor.device)!r}; h5feed "
            "sends host memory: return it with .cpu() (or build it on the CPU: data "
            "workers should not touch the GPU)"
        )
    tensor = tensor.detach()
    if str(tensor.dtype) == "torch.bfloat16":
        tensor = tensor.float()
    try:
        return np.asarray(tensor.resolve_conj().resolve_neg().numpy())
    except (TypeError, RuntimeError) as exc:  # float8, quantized, sparse: no NumPy form
        raise SourceError(
            f"{field_name(path)}: a torch tensor of {tensor.dtype} "
            f"({tensor.layout!s}) has no NumPy form: {exc}"
        ) from exc


def _leaf_spec(path: str, leaf: np.ndarray | bytes) -> LeafSpec:
    if isinstance(leaf, bytes):
        return LeafSpec(path, STRING, ())
    return LeafSpec(path, leaf.dtype.str, tuple(int(d) for d in leaf.shape))


# -- flattening --------------------------------------------------------------------------


def flatten(
    element: Any,
    *,
    convention: tree.Convention = tree.TFDATA,
    array_lists: Collection[str] = (),
) -> tuple[Tree, list[np.ndarray | bytes], list[str]]:
    """The tree, the leaves and their paths of an element, inferring the structure
    (``array_lists``: see :func:`h5feed.common.elements.tree.flatten_with_paths`). SourceError
    naming
    the field that is not an element field."""
    try:
        description, pairs = tree.flatten_with_paths(
            element, convention=convention, array_lists=array_lists
        )
    except tree.StructureError as exc:
        raise SourceError(f"{field_name(exc.path)}: {exc.reason}") from None
    return description, [as_leaf(value, path) for path, value in pairs], [p for p, _ in pairs]


def infer_spec(
    elements: Sequence[Any],
    *,
    convention: tree.Convention = tree.TFDATA,
    names: Sequence[str] = (),
) -> ElementSpec:
    """The spec of the given elements (at least one): the first one's tree and dtypes; a
    dimension is ``None`` where the elements differ. Raises SourceError naming the field
    where they differ in structure, dtype or rank.

    Under keras, which lists are arrays is decided once, from all the given elements
    (:func:`h5feed.common.elements.keras_lists.decide`; ``names`` name them in its errors), and
    kept in the spec's tree: an array list is a leaf there."""
    if not elements:
        raise SourceError("no element to infer the element spec from")
    arrays: frozenset[str] = frozenset()
    if convention == tree.KERAS:
        shown = list(names) or [f"element #{i}" for i in range(len(elements))]
        arrays = keras_lists.decide(elements, shown)
    spec = _spec_of(elements[0], convention, arrays)
    for element in elements[1:]:
        spec = merge_specs(spec, _spec_of(element, convention, arrays))
    return spec


def _spec_of(element: Any, convention: tree.Convention, arrays: frozenset[str]) -> ElementSpec:
    description, leaves, paths = flatten(element, convention=convention, array_lists=arrays)
    return ElementSpec(
        description, tuple(_leaf_spec(p, v) for p, v in zip(paths, leaves, strict=True))
    )


def merge_specs(first: ElementSpec, second: ElementSpec) -> ElementSpec:
    """One spec that fits both: dimensions that differ become ``None``. SourceError if the
    trees, dtypes or ranks differ (naming the first field that does)."""
    if first.tree != second.tree:
        raise SourceError(
            f"elements differ in structure: {_paths_text(first)} vs {_paths_text(second)}"
        )
    merged = []
    for a, b in zip(first.leaves, second.leaves, strict=True):
        if a.dtype != b.dtype or len(a.shape) != len(b.shape):
            raise SourceError(
                f"{field_name(a.path)}: elements differ: {a.describe()} vs {b.describe()}"
            )
        shape = tuple(x if x == y else None for x, y in zip(a.shape, b.shape, strict=True))
        merged.append(LeafSpec(a.path, a.dtype, shape))
    return ElementSpec(first.tree, tuple(merged))


def _paths_text(spec: ElementSpec) -> str:
    return "[" + ", ".join(repr(leaf.path) for leaf in spec.leaves) + "]"


def flatten_checked(
    element: Any, spec: ElementSpec, *, convention: tree.Convention = tree.TFDATA
) -> list[np.ndarray | bytes]:
    """The leaves of ``element`` in spec order, each checked against ``spec``.

    The spec's tree decides the structure (a ``"list"`` node takes a list of its length);
    a list where the spec has a leaf is an array: any list under tfdata, a number nest only
    under keras (:func:`h5feed.common.elements.keras_lists.nest_shape`; a list of arrays there is a
    structure that does not fit). Python numbers are converted to the spec's dtype
    when it is of their kind (an int field declared float32 takes 3); arrays must have the
    spec's dtype exactly. Raises SourceError naming the path, what was expected and what
    came."""
    try:
        values = tree.flatten_as(spec.tree, element)
    except tree.StructureError as exc:
        raise SourceError(f"{field_name(exc.path)}: {exc.reason}") from None
    return [
        _check_leaf(value, leaf, convention)
        for value, leaf in zip(values, spec.leaves, strict=True)
    ]


def _check_leaf(value: Any, spec: LeafSpec, convention: tree.Convention) -> np.ndarray | bytes:
    array_list = isinstance(value, list) and keras_lists.nest_shape(value) is not None
    if tree.is_node(value, convention=convention) and not array_list:
        raise SourceError(
            f"{field_name(spec.path)}: expected {spec.describe()}, got a {type(value).__name__}"
        )
    if spec.is_string:
        if not isinstance(value, (str, bytes)):
            raise SourceError(
                f"{field_name(spec.path)}: expected a string, got {type(value).__name__}"
            )
        return as_leaf(value, spec.path)
    expected = np.dtype(spec.dtype)
    if isinstance(value, (bool, int, float)) and not isinstance(value, np.generic):
        if not _python_number_fits(value, expected):
            raise SourceError(
                f"{field_name(spec.path)}: expected {spec.describe()}, got the Python "
                f"{type(value).__name__} {value!r}"
            )
        leaf: np.ndarray | bytes = np.asarray(value, dtype=expected)
    else:
        leaf = as_leaf(value, spec.path)
        if isinstance(value, list) and isinstance(leaf, np.ndarray):
            leaf = _list_as(leaf, value, expected, spec)
    if isinstance(leaf, bytes):
        raise SourceError(f"{field_name(spec.path)}: expected {spec.describe()}, got a string")
    actual = _leaf_spec(spec.path, leaf)
    fits = leaf.dtype == expected and len(leaf.shape) == len(spec.shape)
    fits = fits and all(e is None or e == a for e, a in zip(spec.shape, actual.shape, strict=True))
    if not fits:
        raise SourceError(
            f"{field_name(spec.path)}: expected {spec.describe()}, got {actual.describe()}"
            + ("" if leaf.dtype != expected else _varying_hint(spec, actual))
        )
    return leaf


def _list_as(
    array: np.ndarray, value: list[Any], expected: np.dtype[Any], spec: LeafSpec
) -> np.ndarray:
    """A list of Python numbers takes the spec's dtype, as a Python number does."""
    kind = array.dtype.kind
    fits = (kind == "b" and expected.kind == "b") or (kind == "f" and expected.kind == "f")
    fits = fits or (kind in "iu" and expected.kind in "iuf")
    if not fits or array.dtype == expected:
        return array
    try:
        return np.asarray(value, dtype=expected)
    except (OverflowError, ValueError) as exc:
        raise SourceError(f"{field_name(spec.path)}: expected {spec.describe()}: {exc}") from exc


def _python_number_fits(value: bool | int | float, dtype: np.dtype[Any]) -> bool:
    if isinstance(value, bool):
        return dtype.kind == "b"
    if isinstance(value, int):
        return dtype.kind in "iuf" and (dtype.kind == "f" or _int_fits(value, dtype))
    return dtype.kind == "f"


def _int_fits(value: int, dtype: np.dtype[Any]) -> bool:
    info = np.iinfo(dtype)
    return int(info.min) <= value <= int(info.max)


def _varying_hint(spec: LeafSpec, actual: LeafSpec) -> str:
    if len(spec.shape) != len(actual.shape):
        return ""
    return (
        " (the spec was inferred from the first elements; if this dimension varies, pass "
        "output_signature= with None there)"
    )
