"""Nested values as trees: one walk to flatten, rebuild and map them, with paths.

A value is walked as a tree of *nodes* and *leaves*:

* a ``Mapping`` (``str`` keys) is a dict node, its entries taken in sorted key order (as
  ``tf.nest`` and Keras' ``tree`` do);
* a ``tuple`` (a namedtuple too) is a tuple node;
* a ``list`` depends on the *convention*, which says what a Python list is:

  - ``"tfdata"`` (:data:`TFDATA`, the default): a list is a **leaf**, as ``tf.data`` reads it
    (``[1, 2, 3]`` is one array);
  - ``"keras"`` (:data:`KERAS`): a list is a **list node**, as Keras reads its data
    (``(x, [y_a, y_b])`` is three leaves: the input and the labels of a two-headed model),
    except at the paths a caller names in ``array_lists`` (a list of numbers that is an
    array: :mod:`h5feed.common.elements.keras_lists` decides which);

* anything else is a leaf (arrays, numbers, strings, None, ...: this module never looks
  inside a leaf).

A *description* is a tree's structure without its leaves, made of lists and ``str`` only, so
msgpack carries it: ``["leaf"]``, ``["tuple", [sub, ...]]``, ``["list", [sub, ...]]``,
``["dict", [[key, sub], ...]]``. :func:`flatten` writes dict keys sorted; every other function
takes a description's entries in the order it lists them.

A leaf's *path* joins the dict keys and the tuple/list positions from the root to it with
``/`` (``"x/0/depth"``); a leaf at the root has the path ``""``.

Guarantees:

1. Order: leaves come depth first; a dict's entries in sorted key order, a tuple's or a list's
   in position order. Equal structures give equal descriptions and the same leaf order,
   whatever order a dict's keys were inserted in.
2. ``unflatten(*flatten(v, convention=c))`` rebuilds ``v``: the same node types and leaves
   (the very objects, not copies), except that any Mapping comes back as a ``dict`` (keys in
   sorted order) and a tuple or list subclass as a plain ``tuple``/``list``.
3. ``flatten(unflatten(d, leaves), convention=c)`` gives back ``d`` and ``leaves`` when
   ``d``'s dict keys are sorted, ``d`` has list nodes only if ``c`` is keras, and no leaf is
   itself a node under ``c``.
4. Paths are distinct within a tree when no dict key is empty or contains ``/``.
5. A description that is not one (e.g. read from the wire) raises :class:`StructureError`
   in every function that takes one, never anything else (deep nesting included); so does a
   dict key that is not a ``str``, and a value whose structure does not fit the description
   in :func:`flatten_as`. A convention other than the two raises ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final, Literal

#: What a Python list is: a leaf (``"tfdata"``) or a node (``"keras"``).
Convention = Literal["tfdata", "keras"]
TFDATA: Final = "tfdata"
KERAS: Final = "keras"
CONVENTIONS: Final = (TFDATA, KERAS)

#: A tree's structure, msgpack-able (see the module docstring).
Description = list[Any]

LEAF: Final = "leaf"
TUPLE: Final = "tuple"
LIST: Final = "list"
DICT: Final = "dict"


class StructureError(ValueError):
    """A value or description that does not fit; ``path`` is where, ``reason`` what."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path!r}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


def join(path: str, key: str | int) -> str:
    """The path of entry ``key`` (a dict key or a position) of the node at ``path``."""
    return f"{path}/{key}" if path else str(key)


def is_node(value: Any, *, convention: Convention = TFDATA) -> bool:
    """Whether ``value`` is a node (a dict, tuple or, under keras, list), not a leaf."""
    lists = _lists_are_nodes(convention)
    return isinstance(value, (Mapping, tuple)) or (lists and isinstance(value, list))


def _lists_are_nodes(convention: str) -> bool:
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown tree convention {convention!r} (one of {CONVENTIONS})")
    return convention == KERAS


# -- values -> descriptions and leaves -----------------------------------------------------


def flatten_with_paths(
    value: Any, *, convention: Convention = TFDATA, array_lists: Collection[str] = ()
) -> tuple[Description, list[tuple[str, Any]]]:
    """The description of ``value`` and its leaves with their paths, in order.
    ``array_lists``: under keras, the paths where a list is a leaf all the same (an array:
    :mod:`h5feed.common.elements.keras_lists` decides which). StructureError naming the path of a
    dict whose keys are not all ``str``."""
    lists = _lists_are_nodes(convention)
    leaves: list[tuple[str, Any]] = []

    def walk(node: Any, path: str) -> Description:
        if isinstance(node, Mapping):
            keys = list(node)
            if not all(isinstance(k, str) for k in keys):
                raise StructureError(path, f"dict keys must be str, got {keys!r:.200}")
            return [DICT, [[k, walk(node[k], join(path, k))] for k in sorted(keys)]]
        if isinstance(node, tuple) or (
            lists and isinstance(node, list) and path not in array_lists
        ):
            kind = TUPLE if isinstance(node, tuple) else LIST
            return [kind, [walk(sub, join(path, i)) for i, sub in enumerate(node)]]
        leaves.append((path, node))
        return [LEAF]

    return walk(value, ""), leaves


def flatten(
    value: Any, *, convention: Convention = TFDATA, array_lists: Collection[str] = ()
) -> tuple[Description, list[Any]]:
    """The description of ``value`` and its leaves, in order (see :func:`flatten_with_paths`)."""
    description, leaves = flatten_with_paths(value, convention=convention, array_lists=array_lists)
    return description, [leaf for _path, leaf in leaves]


def flatten_as(description: Description, value: Any) -> list[Any]:
    """The leaves of ``value``, which must have the structure ``description`` gives.

    The description decides: a dict node takes a Mapping with exactly its keys, a tuple node
    a tuple and a list node a list of its length. A leaf position takes whatever is there,
    a node included: check the leaves for that (see :func:`is_node`). StructureError naming
    the path, what was expected and what came, where the value does not fit."""
    leaves: list[Any] = []

    def walk(node: Any, shape: Description, path: str) -> None:
        kind, entries = _parts(shape, path)
        if kind == DICT:
            keys = [key for key, _sub in entries]
            if not isinstance(node, Mapping) or set(node) != set(keys):
                got = sorted(node, key=str) if isinstance(node, Mapping) else type(node).__name__
                raise StructureError(path, f"expected a dict with keys {keys}, got {got}")
            for key, sub in entries:
                walk(node[key], sub, join(path, key))
        elif kind in (TUPLE, LIST):
            sequence = tuple if kind == TUPLE else list
            if not isinstance(node, sequence) or len(node) != len(entries):
                got = _sized(kind, len(node)) if isinstance(node, sequence) else type(node).__name__
                raise StructureError(path, f"expected a {_sized(kind, len(entries))}, got a {got}")
            for i, (sub_node, sub) in enumerate(zip(node, entries, strict=True)):
                walk(sub_node, sub, join(path, i))
        else:
            leaves.append(node)

    _guarded(lambda: walk(value, description, ""))
    return leaves


# -- descriptions and leaves -> values -----------------------------------------------------


def unflatten(description: Description, leaves: Sequence[Any]) -> Any:
    """The value of structure ``description`` with ``leaves`` in order at its leaves.
    StructureError if the description is not one or the number of leaves differs."""
    expected = leaf_count(description)
    if len(leaves) != expected:
        raise StructureError("", f"the description has {expected} leaves, got {len(leaves)}")
    position = iter(leaves)

    def build(shape: Description) -> Any:
        kind, entries = shape[0], shape[1] if len(shape) == 2 else []
        if kind == DICT:
            return {key: build(sub) for key, sub in entries}
        if kind == TUPLE:
            return tuple(build(sub) for sub in entries)
        if kind == LIST:
            return [build(sub) for sub in entries]
        return next(position)

    return _guarded(lambda: build(description))


def map_with_paths(
    function: Callable[[str, Any], Any], value: Any, *, convention: Convention = TFDATA
) -> Any:
    """``value`` with each leaf replaced by ``function(path, leaf)``, called in leaf order
    (the structure rebuilt as :func:`unflatten` does)."""
    description, leaves = flatten_with_paths(value, convention=convention)
    return unflatten(description, [function(path, leaf) for path, leaf in leaves])


# -- descriptions ------------------------------------------------------------------------


def leaf_count(description: Any) -> int:
    """How many leaves ``description`` has; StructureError if it is not a description."""
    return len(leaf_paths(description))


def leaf_paths(description: Any) -> list[str]:
    """The paths of the leaves of ``description``, in order; StructureError if it is not a
    description (dict keys must be distinct ``str``)."""
    paths: list[str] = []

    def walk(shape: Any, path: str) -> None:
        kind, entries = _parts(shape, path)
        if kind == DICT:
            for key, sub in entries:
                walk(sub, join(path, key))
        elif kind in (TUPLE, LIST):
            for i, sub in enumerate(entries):
                walk(sub, join(path, i))
        else:
            paths.append(path)

    _guarded(lambda: walk(description, ""))
    return paths


def with_tuples(description: Description) -> Description:
    """``description`` with every list node made a tuple node (for ``tf.data``, whose
    structures have no lists)."""
    leaf_count(description)  # validates

    def convert(shape: Description) -> Description:
        kind, entries = shape[0], shape[1] if len(shape) == 2 else []
        if kind == DICT:
            return [DICT, [[key, convert(sub)] for key, sub in entries]]
        if kind in (TUPLE, LIST):
            return [TUPLE, [convert(sub) for sub in entries]]
        return [LEAF]

    result: Description = _guarded(lambda: convert(description))
    return result


def with_companions(
    description: Description, has_companion: Callable[[int], bool], suffix: str
) -> Description:
    """``description`` where each leaf ``i`` with ``has_companion(i)`` gets a companion leaf
    right after it: in a dict, the entry ``key + suffix`` right after the leaf's own entry;
    elsewhere the leaf becomes the pair ``(leaf, companion)``. So the leaves of the result
    are the original ones, each followed by its companion if it has one.

    ``has_companion`` is called once per leaf, in leaf order. StructureError at the leaf's
    path if ``key + suffix`` is a key of its dict already."""
    counter = iter(range(leaf_count(description)))  # validates too

    def convert(shape: Description, path: str) -> Description:
        kind, entries = shape[0], shape[1] if len(shape) == 2 else []
        if kind == DICT:
            keys = {key for key, _sub in entries}
            out: list[list[Any]] = []
            for key, sub in entries:
                if sub[0] != LEAF:
                    out.append([key, convert(sub, join(path, key))])
                    continue
                out.append([key, [LEAF]])
                if has_companion(next(counter)):
                    if key + suffix in keys:
                        raise StructureError(
                            join(path, key), f"its companion {key + suffix!r} is a key already"
                        )
                    out.append([key + suffix, [LEAF]])
            return [DICT, out]
        if kind in (TUPLE, LIST):
            return [kind, [convert(sub, join(path, i)) for i, sub in enumerate(entries)]]
        if has_companion(next(counter)):
            return [TUPLE, [[LEAF], [LEAF]]]
        return [LEAF]

    result: Description = _guarded(lambda: convert(description, ""))
    return result


def _parts(shape: Any, path: str) -> tuple[str, list[Any]]:
    """The kind and entries of one description node, checked (not its children)."""
    if isinstance(shape, list) and shape == [LEAF]:
        return LEAF, []
    if not (isinstance(shape, list) and len(shape) == 2 and isinstance(shape[1], list)):
        raise StructureError(path, f"not a tree description: {shape!r:.200}")
    kind, entries = shape
    if kind in (TUPLE, LIST):
        return kind, entries
    if kind != DICT:
        raise StructureError(path, f"not a tree description: {shape!r:.200}")
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
            raise StructureError(path, f"bad dict entry in a tree description: {entry!r:.200}")
    if len({key for key, _sub in entries}) != len(entries):
        raise StructureError(path, "a dict description repeats a key")
    return kind, entries


def _guarded(walk: Callable[[], Any]) -> Any:
    """``walk()``, with a description too deep for Python's stack as a StructureError."""
    try:
        return walk()
    except RecursionError:
        raise StructureError("", "a tree description nested too deeply") from None


def _sized(kind: str, length: int) -> str:
    """A sequence node as errors name it: "3-tuple", "list of 3"."""
    return f"{length}-tuple" if kind == TUPLE else f"list of {length}"
