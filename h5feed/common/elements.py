"""Elements of user sources: trees of arrays, numbers and strings, flattened for the wire.

Shared by the workers (which flatten, check and pack the elements a user's source yields) and
the consumer (which unpacks, checks and batches them). No TensorFlow here.

An *element* is a tree: a ``dict`` (``str`` keys, taken in sorted order, as ``tf.nest`` does)
or a ``tuple`` of subtrees, or a *leaf*. A leaf is a NumPy array (bool, integer or float
dtype), a NumPy scalar, a Python ``bool``/``int``/``float`` (as NumPy makes them: bool, int64,
float64), a ``list`` of numbers (an array, as in ``tf.data``), or a ``str``/``bytes`` (a
string; str is UTF-8 encoded). Anything else is refused with an :class:`SourceError` naming the
field. A field's *path* joins keys and tuple positions with ``/``, e.g. ``x/0/depth``.

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

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import numpy as np

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

# A tree description, msgpack-able: ["leaf"], ["tuple", [sub, ...]], ["dict", [[key, sub], ...]]
Tree = list[Any]


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
    """The structure of every element: a tree and its leaves, in flattening order."""

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
        if _count_leaves(value["tree"]) != len(parsed):
            raise SourceError("bad element spec: the tree and the leaves disagree")
        return cls(value["tree"], tuple(parsed))

    def wire_arrays(self) -> int:
        """How many arrays a unit of these elements takes on the wire."""
        return sum(1 if not (leaf.is_string or leaf.variable_axes) else 2 for leaf in self.leaves)


def _count_leaves(tree: Any) -> int:
    if not isinstance(tree, list) or not tree or not isinstance(tree[0], str):
        raise SourceError(f"bad element tree {tree!r:.200}")
    kind = tree[0]
    if kind == "leaf" and len(tree) == 1:
        return 1
    if kind == "tuple" and len(tree) == 2 and isinstance(tree[1], list):
        return sum(_count_leaves(sub) for sub in tree[1])
    if kind == "dict" and len(tree) == 2 and isinstance(tree[1], list):
        for entry in tree[1]:
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
                raise SourceError(f"bad dict entry in element tree {entry!r:.200}")
        return sum(_count_leaves(sub) for _key, sub in tree[1])
    raise SourceError(f"bad element tree {tree!r:.200}")


def _join(path: str, key: object) -> str:
    return f"{path}/{key}" if path else str(key)


def field_name(path: str) -> str:
    """A path as error messages show it ("the element" for a leaf at the root)."""
    return f"field {path!r}" if path else "the element"


# -- leaves ------------------------------------------------------------------------------


def as_leaf(value: Any, path: str) -> np.ndarray | bytes:
    """A leaf value as a NumPy array (numeric) or bytes (string); SourceError otherwise."""
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
    raise SourceError(
        f"{field_name(path)}: a {type(value).__name__} is not an element field (arrays, "
        "numbers, str, bytes, and dicts/tuples of them are)"
    )


def _leaf_spec(path: str, leaf: np.ndarray | bytes) -> LeafSpec:
    if isinstance(leaf, bytes):
        return LeafSpec(path, STRING, ())
    return LeafSpec(path, leaf.dtype.str, tuple(int(d) for d in leaf.shape))


# -- flattening --------------------------------------------------------------------------


def flatten(element: Any) -> tuple[Tree, list[np.ndarray | bytes], list[str]]:
    """The tree, the leaves and their paths of an element, inferring the structure."""
    leaves: list[np.ndarray | bytes] = []
    paths: list[str] = []

    def walk(node: Any, path: str) -> Tree:
        if isinstance(node, Mapping):
            keys = list(node)
            if not all(isinstance(k, str) for k in keys):
                raise SourceError(f"{field_name(path)}: dict keys must be str, got {keys!r:.200}")
            return ["dict", [[k, walk(node[k], _join(path, k))] for k in sorted(keys)]]
        if isinstance(node, tuple):
            return ["tuple", [walk(sub, _join(path, i)) for i, sub in enumerate(node)]]
        leaves.append(as_leaf(node, path))
        paths.append(path)
        return ["leaf"]

    tree = walk(element, "")
    return tree, leaves, paths


def infer_spec(elements: Sequence[Any]) -> ElementSpec:
    """The spec of the given elements (at least one): the first one's tree and dtypes; a
    dimension is ``None`` where the elements differ. Raises SourceError naming the field
    where they differ in structure, dtype or rank."""
    if not elements:
        raise SourceError("no element to infer the element spec from")
    tree, leaves, paths = flatten(elements[0])
    spec = ElementSpec(tree, tuple(_leaf_spec(p, v) for p, v in zip(paths, leaves, strict=True)))
    for element in elements[1:]:
        other_tree, other_leaves, other_paths = flatten(element)
        other = ElementSpec(
            other_tree,
            tuple(_leaf_spec(p, v) for p, v in zip(other_paths, other_leaves, strict=True)),
        )
        spec = merge_specs(spec, other)
    return spec


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


def flatten_checked(element: Any, spec: ElementSpec) -> list[np.ndarray | bytes]:
    """The leaves of ``element`` in spec order, each checked against ``spec``.

    Python numbers are converted to the spec's dtype when it is of their kind (an int field
    declared float32 takes 3); arrays must have the spec's dtype exactly. Raises SourceError
    naming the path, what was expected and what came."""
    leaves: list[np.ndarray | bytes] = []
    specs = iter(spec.leaves)

    def walk(node: Any, tree: Tree, path: str) -> None:
        kind = tree[0]
        if kind == "dict":
            keys = [k for k, _sub in tree[1]]
            if not isinstance(node, Mapping) or sorted(node) != keys:
                got = sorted(node) if isinstance(node, Mapping) else type(node).__name__
                raise SourceError(
                    f"{field_name(path)}: expected a dict with keys {keys}, got {got}"
                )
            for key, sub in tree[1]:
                walk(node[key], sub, _join(path, key))
        elif kind == "tuple":
            if not isinstance(node, tuple) or len(node) != len(tree[1]):
                got = f"{len(node)}-tuple" if isinstance(node, tuple) else type(node).__name__
                raise SourceError(
                    f"{field_name(path)}: expected a {len(tree[1])}-tuple, got a {got}"
                )
            for i, (sub_node, sub) in enumerate(zip(node, tree[1], strict=True)):
                walk(sub_node, sub, _join(path, i))
        else:
            leaves.append(_check_leaf(node, next(specs)))

    walk(element, spec.tree, "")
    return leaves


def _check_leaf(value: Any, spec: LeafSpec) -> np.ndarray | bytes:
    if isinstance(value, (Mapping, tuple)):
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


# -- packing a unit for the wire (worker side) -------------------------------------------


def pack(
    spec: ElementSpec, elements: Sequence[Sequence[np.ndarray | bytes]]
) -> list[tuple[str, np.ndarray]]:
    """The arrays of a unit: ``elements`` are checked leaf lists (see :func:`flatten_checked`).
    See the module docstring for the layout."""
    arrays: list[tuple[str, np.ndarray]] = []
    n = len(elements)
    for i, leaf in enumerate(spec.leaves):
        values = [element[i] for element in elements]
        if leaf.is_string:
            encoded = [v if isinstance(v, bytes) else b"" for v in values]
            arrays.append((str(i), np.frombuffer(b"".join(encoded), np.uint8)))
            arrays.append((f"{i}.len", np.asarray([len(v) for v in encoded], np.int64)))
            continue
        numeric = [np.asarray(v) for v in values]
        if not leaf.variable_axes:
            stacked = np.empty((n, *[d or 0 for d in leaf.shape]), np.dtype(leaf.dtype))
            for row, value in enumerate(numeric):
                stacked[row] = value
            arrays.append((str(i), stacked))
            continue
        shapes = np.asarray([v.shape for v in numeric], np.int64).reshape(n, len(leaf.shape))
        biggest = shapes.max(axis=0) if n else np.zeros(len(leaf.shape), np.int64)
        padded = np.zeros((n, *biggest.tolist()), np.dtype(leaf.dtype))
        for row, value in enumerate(numeric):
            region: tuple[int | slice, ...] = (row, *[slice(0, d) for d in value.shape])
            padded[region] = value
        arrays.append((str(i), padded))
        arrays.append((f"{i}.shape", shapes))
    return arrays


# -- unpacking and batching (consumer side) ----------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Field:
    """One leaf of a batch of ``n`` elements: ``values`` (stacked, zero-padded where the
    elements differ in size; an object array of bytes for strings) and, for a leaf with
    ``None`` dimensions, ``lengths``: int64 ``[n]`` (one such dimension) or ``[n, k]``."""

    values: np.ndarray
    lengths: np.ndarray | None


@dataclasses.dataclass(frozen=True, slots=True)
class RaggedArray:
    """A field batched without padding (``ragged=``): ``values`` zero-padded ``[n, max, ...]``
    and ``lengths`` ``[n]``; row ``i`` is ``values[i, :lengths[i]]``. ``h5feed.dataset()``
    turns it into a ``tf.RaggedTensor``."""

    values: np.ndarray
    lengths: np.ndarray

    def rows(self) -> list[np.ndarray]:
        return [self.values[i, : int(n)] for i, n in enumerate(self.lengths.tolist())]


def unpack(spec: ElementSpec, arrays: Mapping[str, np.ndarray], n: int) -> list[Field]:
    """The fields of a unit of ``n`` elements, checked strictly against ``spec``; raises
    ValueError (a malformed part) when anything does not fit."""
    if set(arrays) != set(_wire_names(spec)):
        raise ValueError(f"arrays {sorted(arrays)} do not match the element spec")
    fields = []
    for i, leaf in enumerate(spec.leaves):
        data = arrays[str(i)]
        if leaf.is_string:
            lengths = arrays[f"{i}.len"]
            if (
                data.dtype != np.uint8
                or data.ndim != 1
                or lengths.dtype != np.int64
                or lengths.shape != (n,)
                or (lengths < 0).any()
                or int(lengths.sum()) != data.shape[0]
            ):
                raise ValueError(f"{field_name(leaf.path)}: bad string arrays")
            ends = np.cumsum(lengths).tolist()
            raw = data.tobytes()
            strings = np.empty(n, dtype=object)
            strings[:] = [
                raw[end - size : end] for end, size in zip(ends, lengths.tolist(), strict=True)
            ]
            fields.append(Field(strings, None))
            continue
        if data.dtype.str != leaf.dtype or data.ndim != len(leaf.shape) + 1 or len(data) != n:
            raise ValueError(f"{field_name(leaf.path)}: array of {data.dtype} {data.shape}")
        fixed_ok = all(d is None or d == a for d, a in zip(leaf.shape, data.shape[1:], strict=True))
        if not fixed_ok:
            raise ValueError(f"{field_name(leaf.path)}: shape {data.shape[1:]}")
        if not leaf.variable_axes:
            fields.append(Field(data, None))
            continue
        shapes = arrays[f"{i}.shape"]
        if (
            shapes.dtype != np.int64
            or shapes.shape != (n, len(leaf.shape))
            or (shapes < 0).any()
            or (shapes > np.asarray(data.shape[1:], np.int64)).any()
        ):
            raise ValueError(f"{field_name(leaf.path)}: bad shapes array")
        for axis, size in enumerate(leaf.shape):
            if size is not None and n and (shapes[:, axis] != size).any():
                raise ValueError(f"{field_name(leaf.path)}: bad shapes array")
        var = list(leaf.variable_axes)
        lengths = shapes[:, var[0]] if len(var) == 1 else shapes[:, var]
        fields.append(Field(data, np.ascontiguousarray(lengths)))
    return fields


def _wire_names(spec: ElementSpec) -> list[str]:
    names = []
    for i, leaf in enumerate(spec.leaves):
        names.append(str(i))
        if leaf.is_string:
            names.append(f"{i}.len")
        elif leaf.variable_axes:
            names.append(f"{i}.shape")
    return names


def build_batch(
    spec: ElementSpec,
    leaves: Sequence[Any],
    companion: Callable[[int], Any | None],
) -> Any:
    """The batch tree: the spec's tree with ``leaves[i]`` at leaf ``i``. Where
    ``companion(i)`` is not None (the lengths of a padded field), it goes beside the leaf:
    as ``<key>_length`` in a dict, else the leaf becomes the pair ``(leaf, lengths)``.
    Used both for the values and (in ``h5feed.dataset``) for the TensorFlow signature."""
    counter = iter(range(len(spec.leaves)))

    def walk(tree: Tree) -> Any:
        kind = tree[0]
        if kind == "dict":
            out: dict[str, Any] = {}
            for key, sub in tree[1]:
                if sub[0] == "leaf":
                    i = next(counter)
                    out[key] = leaves[i]
                    extra = companion(i)
                    if extra is not None:
                        out[key + LENGTH_SUFFIX] = extra
                else:
                    out[key] = walk(sub)
            return out
        if kind == "tuple":
            return tuple(walk(sub) for sub in tree[1])
        i = next(counter)
        extra = companion(i)
        return leaves[i] if extra is None else (leaves[i], extra)

    return walk(spec.tree)


def check_length_names(spec: ElementSpec, padded: Callable[[int], bool]) -> None:
    """SourceError when a padded field's ``<key>_length`` would hide a field of the dict."""
    counter = iter(range(len(spec.leaves)))

    def walk(tree: Tree, path: str) -> None:
        if tree[0] == "dict":
            keys = {k for k, _sub in tree[1]}
            for key, sub in tree[1]:
                if sub[0] == "leaf":
                    if padded(next(counter)) and key + LENGTH_SUFFIX in keys:
                        raise SourceError(
                            f"{field_name(_join(path, key))} varies in length, and its lengths "
                            f"would be {key + LENGTH_SUFFIX!r}, which the element already has; "
                            "rename it or use ragged="
                        )
                else:
                    walk(sub, _join(path, key))
        elif tree[0] == "tuple":
            for i, sub in enumerate(tree[1]):
                walk(sub, _join(path, i))
        else:
            next(counter)

    walk(spec.tree, "")


def nbytes(fields: Sequence[Field]) -> int:
    """Bytes of the numeric values of a batch (strings counted by their length)."""
    total = 0
    for field in fields:
        if field.values.dtype == object:
            total += sum(len(v) for v in field.values.tolist())
        else:
            total += field.values.nbytes
    return total
