"""A unit of elements on the wire and in a batch: packing (worker), unpacking and batching
(consumer). See :mod:`h5feed.common.elements.values` for the wire layout."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from h5feed.common.elements import tree
from h5feed.common.elements.specs import LENGTH_SUFFIX, ElementSpec, field_name
from h5feed.common.errors import SourceError

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
        # No element (a pass that ended): the fixed dimensions keep their size, so that the
        # consumer's check of the empty array against the spec holds.
        empty = np.asarray([d or 0 for d in leaf.shape], np.int64)
        biggest = shapes.max(axis=0) if n else empty
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
    """A field batched without padding (``ragged=``): ``values`` zero-padded to the batch's
    largest and ``lengths`` ``[n]``, the size of each element along its one varying
    dimension ``axis`` (of the element: 0 is ``values``' second). Row ``i`` is
    ``values[i]`` cut to ``lengths[i]`` on that axis: ``values[i, :lengths[i]]`` for axis 0,
    ``values[i, :, :lengths[i]]`` for a [C, T, H, W] clip whose T varies.
    ``h5feed.dataset()`` turns it into a ``tf.RaggedTensor`` ragged at that dimension."""

    values: np.ndarray
    lengths: np.ndarray
    axis: int = 0

    def rows(self) -> list[np.ndarray]:
        """Each element cut to its length: a list of ``n`` arrays, views of ``values``."""
        rows = []
        for i, n in enumerate(self.lengths.tolist()):
            cut: list[Any] = [i, *[slice(None)] * self.axis, slice(0, int(n))]
            rows.append(self.values[tuple(cut)])
        return rows


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
    ``companion`` is called once per leaf, in leaf order. A ``"list"`` node of the spec (a
    keras source's) comes back as a ``list``. SourceError where a ``<key>_length`` would
    hide a field (see :func:`check_length_names`). Used both for the values and (in
    ``h5feed.dataset``) for the TensorFlow signature."""
    extras = [companion(i) for i in range(len(spec.leaves))]
    description = _with_lengths(spec, lambda i: extras[i] is not None)
    flat: list[Any] = []
    for leaf, extra in zip(leaves, extras, strict=True):
        flat.append(leaf)
        if extra is not None:
            flat.append(extra)
    return tree.unflatten(description, flat)


def check_length_names(spec: ElementSpec, padded: Callable[[int], bool]) -> None:
    """SourceError when a padded field's ``<key>_length`` would hide a field of the dict."""
    _with_lengths(spec, padded)


def _with_lengths(spec: ElementSpec, padded: Callable[[int], bool]) -> tree.Description:
    tree.leaf_count(spec.tree)  # a bad tree raises here, not as a clash below
    try:
        return tree.with_companions(spec.tree, padded, LENGTH_SUFFIX)
    except tree.StructureError as exc:
        name = exc.path.rsplit("/", 1)[-1] + LENGTH_SUFFIX
        raise SourceError(
            f"{field_name(exc.path)} varies in length, and its lengths would be {name!r}, "
            "which the element already has; rename it or use ragged="
        ) from None


def nbytes(fields: Sequence[Field]) -> int:
    """Bytes of the numeric values of a batch (strings counted by their length)."""
    total = 0
    for field in fields:
        if field.values.dtype == object:
            total += sum(len(v) for v in field.values.tolist())
        else:
            total += field.values.nbytes
    return total
