"""What a Python list in a keras item is: an array or structure, decided once from the probe.

Keras reads a list in ``(x, [y_a, y_b])`` as structure (two labels). Seed-era code also
gives labels *as* Python lists: ``(x, [wlabels[i*B:(i+1)*B], glabels[i*B:(i+1)*B]])`` with
each ``*labels`` a list of lists of ints, one row per sample. Read as structure all the way
down, every int becomes a leaf and a shorter last batch changes the tree. So under the keras
convention a list is read as follows (``B`` is the item's *batch size*, see
:func:`batch_size`):

* an **array** when it is a *number nest* (a list of Python or NumPy numbers, or of number
  nests, all of one shape: a rectangular nest of numbers) whose length is ``B``;
* **structure** otherwise (a list of arrays, of dicts or tuples, of rows that differ in
  length, a nest of another length, or any list when the item has no batch size).

A number nest of length ``B`` whose second dimension is ``B`` too reads **both ways**: an
array ``[B, B, ...]``, or ``B`` heads of ``[B, ...]`` each (two 2-wide one-hot heads with
``B = 2``). No guess then: :func:`decide` takes the readings of every probed item (a keras
source probes its first and last batch) and keeps, for each list, the reading that all of
them allow. None left is an error (the items differ); two left is an error naming the list
and saying how to make it plain (``np.asarray`` for an array, a tuple for structure).

The decision lives in the element spec's tree (an array list is a leaf there, a structure
list a ``"list"`` node), so later batches, a shorter last one included, are never read
again by these rules: the spec's tree decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np

from h5feed.common.elements import tree
from h5feed.common.errors import SourceError

ARRAY: Final = "array"
STRUCTURE: Final = "structure"
_BOTH: Final = frozenset({ARRAY, STRUCTURE})

#: Depth past which a nest of lists is not read as a number nest (bounded work, no
#: RecursionError from an item built to be deep).
MAX_NEST_DEPTH: Final = 32


def nest_shape(value: Any) -> tuple[int, ...] | None:
    """The shape of ``value`` if it is a number nest (see the module docstring), else None.
    A bare number is a nest of shape ``()``; so it is not a list, only its entries may be."""
    return _shape(value, 0)


def _shape(value: Any, depth: int) -> tuple[int, ...] | None:
    if isinstance(value, list):
        if depth >= MAX_NEST_DEPTH:
            return None
        if not value:
            return (0,)
        first = _shape(value[0], depth + 1)
        if first is None:
            return None
        for entry in value[1:]:
            if _shape(entry, depth + 1) != first:
                return None
        return (len(value), *first)
    if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
        return ()
    return None


def batch_size(item: Any) -> int | None:
    """The batch size of a keras item: the first dimension of its ``x`` (``item[0]`` when
    the item is a tuple, else the item), where ``x``'s first leaf decides when ``x`` is a
    dict, tuple or list of inputs (a number nest is one input). None when it has none."""
    x = item[0] if isinstance(item, tuple) and item else item
    return _first_dimension(x, 0)


def _first_dimension(value: Any, depth: int) -> int | None:
    if depth >= MAX_NEST_DEPTH:
        return None
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple) and shape and isinstance(shape[0], int):
        return shape[0]
    if isinstance(value, Mapping):
        keys = sorted(k for k in value if isinstance(k, str))
        return _first_dimension(value[keys[0]], depth + 1) if keys else None
    if isinstance(value, list):
        nest = nest_shape(value)
        if nest is not None:
            return nest[0]
    if isinstance(value, (tuple, list)) and value:
        return _first_dimension(value[0], depth + 1)
    return None


def readings(value: Any, batch: int | None) -> frozenset[str]:
    """How one list may be read in an item of batch size ``batch``."""
    shape = nest_shape(value)
    if batch is None or shape is None or len(shape) == 0 or shape[0] != batch:
        return frozenset({STRUCTURE})
    if len(shape) >= 2 and shape[1] == batch:
        return _BOTH
    return frozenset({ARRAY})


def decide(items: Sequence[Any], names: Sequence[str]) -> frozenset[str]:
    """The paths of the lists of ``items`` (the probed items, named ``names`` in errors) to
    read as arrays; every other list is structure. SourceError naming the list's path where
    the items allow no common reading, or two."""
    sizes = [batch_size(item) for item in items]
    arrays: set[str] = set()

    def walk(nodes: list[Any], path: str) -> None:
        """``nodes``: the value at ``path`` in each item that has one there."""
        lists = [(i, node) for i, node in nodes if isinstance(node, list)]
        if not lists:
            for key, subs in _children(nodes):
                walk(subs, tree.join(path, key))
            return
        allowed = set(_BOTH)
        for i, node in lists:
            allowed &= readings(node, sizes[i])
        if not allowed:
            where = ", ".join(f"{names[i]}: {sorted(readings(n, sizes[i]))[0]}" for i, n in lists)
            raise SourceError(f"{_field(path)}: a list read differently by the items ({where})")
        if allowed == _BOTH:
            i, node = lists[0]
            shape = nest_shape(node) or ()
            raise SourceError(
                f"{_field(path)}: a list that reads both ways in {names[i]}: an array "
                f"{list(shape)} of batch size {sizes[i]}, or {shape[0]} fields of "
                f"{list(shape[1:])} each; make it plain: np.asarray(...) for an array, a "
                "tuple for separate fields (e.g. the labels of several heads)"
            )
        if ARRAY in allowed:
            arrays.add(path)
            return
        for key, subs in _children(nodes):
            walk(subs, tree.join(path, key))

    walk(list(enumerate(items)), "")
    return frozenset(arrays)


def _children(nodes: list[tuple[int, Any]]) -> list[tuple[str | int, list[tuple[int, Any]]]]:
    """The entries of the nodes at one path, by key or position, each with the items that
    have it (a difference in structure is left to the spec's merge, which names it)."""
    found: dict[str | int, list[tuple[int, Any]]] = {}
    for i, node in nodes:
        if isinstance(node, Mapping):
            for key in node:
                if isinstance(key, str):
                    found.setdefault(key, []).append((i, node[key]))
        elif isinstance(node, (tuple, list)):
            for position, sub in enumerate(node):
                found.setdefault(position, []).append((i, sub))
    return list(found.items())


def _field(path: str) -> str:
    return f"field {path!r}" if path else "the element"
