"""h5feed.common.elements.tree: flatten / unflatten / map with paths, under both conventions."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h5feed.common.elements import tree
from h5feed.common.elements import values as elements
from h5feed.common.errors import SourceError

KEYS = st.text(alphabet="abcxyz_", min_size=1, max_size=4)
LEAVES = st.one_of(
    st.integers(-5, 5),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.none(),
    st.builds(np.arange, st.integers(0, 4)),
)


def trees(with_lists: bool) -> st.SearchStrategy[Any]:
    """Random trees of dicts, tuples and (``with_lists``) lists of nodes; under tfdata a
    list of numbers is a leaf, so lists of numbers are leaves there."""

    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        nodes = [
            st.dictionaries(KEYS, children, max_size=4),
            st.lists(children, max_size=4).map(tuple),
        ]
        if with_lists:
            nodes.append(st.lists(children, max_size=4))
        return st.one_of(*nodes)

    leaves = LEAVES if with_lists else st.one_of(LEAVES, st.lists(st.integers(), max_size=3))
    return st.recursive(leaves, extend, max_leaves=12)


def sorted_dicts(value: Any, lists: bool) -> Any:
    """``value`` with every dict in sorted key order (as unflatten builds them)."""
    if isinstance(value, dict):
        return {k: sorted_dicts(value[k], lists) for k in sorted(value)}
    if isinstance(value, tuple):
        return tuple(sorted_dicts(v, lists) for v in value)
    if lists and isinstance(value, list):
        return [sorted_dicts(v, lists) for v in value]
    return value


@pytest.mark.parametrize("convention", tree.CONVENTIONS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_flatten_then_unflatten_is_the_identity(convention: tree.Convention, data: Any) -> None:
    lists = convention == tree.KERAS
    value = data.draw(trees(with_lists=lists))
    description, leaves = tree.flatten(value, convention=convention)
    rebuilt = tree.unflatten(description, leaves)
    assert _structure(rebuilt, lists) == _structure(sorted_dicts(value, lists), lists)
    assert [id(x) for x in tree.flatten(rebuilt, convention=convention)[1]] == [
        id(x) for x in leaves
    ]  # the very leaf objects, in the same order
    # the description travels through msgpack as it is, and flattens again to itself
    assert msgpack.unpackb(msgpack.packb(description)) == description
    assert tree.flatten(rebuilt, convention=convention)[0] == description
    assert tree.leaf_count(description) == len(leaves)
    assert [id(x) for x in tree.flatten_as(description, value)] == [id(x) for x in leaves]
    paths = [p for p, _leaf in tree.flatten_with_paths(value, convention=convention)[1]]
    assert paths == tree.leaf_paths(description)
    assert len(set(paths)) == len(paths)


def _structure(value: Any, lists: bool) -> Any:
    """The structure with node types and leaf identities, comparable with ==."""
    if isinstance(value, dict):
        return ("dict", [(k, _structure(v, lists)) for k, v in value.items()])
    if isinstance(value, tuple):
        return ("tuple", [_structure(v, lists) for v in value])
    if lists and isinstance(value, list):
        return ("list", [_structure(v, lists) for v in value])
    return ("leaf", id(value))


@given(value=trees(with_lists=True))
@settings(max_examples=100, deadline=None)
def test_leaf_order_does_not_depend_on_dict_insertion_order(value: Any) -> None:
    reversed_value = _reverse_dicts(value)
    first = tree.flatten(value, convention=tree.KERAS)
    second = tree.flatten(reversed_value, convention=tree.KERAS)
    assert first[0] == second[0]
    assert [id(x) for x in first[1]] == [id(x) for x in second[1]]


def _reverse_dicts(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _reverse_dicts(value[k]) for k in reversed(list(value))}
    if isinstance(value, tuple):
        return tuple(_reverse_dicts(v) for v in value)
    if isinstance(value, list):
        return [_reverse_dicts(v) for v in value]
    return value


def test_paths_join_keys_and_positions_with_slashes_keys_sorted() -> None:
    value = {"y": [np.zeros(4), np.zeros(3)], "x": ({"depth": 1}, "s")}
    _description, pairs = tree.flatten_with_paths(value, convention=tree.KERAS)
    assert [p for p, _leaf in pairs] == ["x/0/depth", "x/1", "y/0", "y/1"]
    assert tree.flatten_with_paths(7)[1] == [("", 7)]  # a leaf at the root


def test_a_list_is_a_leaf_under_tfdata_and_structure_under_keras() -> None:
    item = (np.zeros((2, 5)), [np.zeros((2, 4)), np.zeros((2, 3))])
    tf_description, tf_leaves = tree.flatten(item, convention=tree.TFDATA)
    assert tf_description == ["tuple", [["leaf"], ["leaf"]]]
    assert tf_leaves[1] is item[1]
    keras_description, keras_leaves = tree.flatten(item, convention=tree.KERAS)
    assert keras_description == ["tuple", [["leaf"], ["list", [["leaf"], ["leaf"]]]]]
    assert [leaf.shape for leaf in keras_leaves] == [(2, 5), (2, 4), (2, 3)]
    assert not tree.is_node([1, 2]) and tree.is_node([1, 2], convention=tree.KERAS)
    rebuilt = tree.unflatten(keras_description, keras_leaves)
    assert isinstance(rebuilt, tuple) and isinstance(rebuilt[1], list)
    assert tree.unflatten(tree.with_tuples(keras_description), keras_leaves)[1][1] is item[1][1]
    assert isinstance(tree.unflatten(tree.with_tuples(keras_description), keras_leaves)[1], tuple)
    with pytest.raises(ValueError, match="unknown tree convention"):
        tree.flatten(item, convention="torch")  # type: ignore[arg-type]


def test_map_with_paths_calls_in_leaf_order_and_keeps_the_structure() -> None:
    seen: list[str] = []

    def record(path: str, leaf: Any) -> Any:
        seen.append(path)
        return f"{path}={leaf}"

    out = tree.map_with_paths(record, {"b": [1, 2], "a": (3,)}, convention=tree.KERAS)
    assert seen == ["a/0", "b/0", "b/1"]
    assert out == {"a": ("a/0=3",), "b": ["b/0=1", "b/1=2"]}
    assert tree.map_with_paths(record, {"b": [1, 2]}) == {"b": "b=[1, 2]"}  # tfdata: a leaf


@pytest.mark.parametrize(
    ("description", "value", "path", "message"),
    [
        (["tuple", [["leaf"], ["leaf"]]], (1,), "", "^expected a 2-tuple, got a 1-tuple$"),
        (["tuple", [["leaf"], ["leaf"]]], [1, 2], "", "expected a 2-tuple, got a list"),
        (["list", [["leaf"], ["leaf"]]], (1, 2), "", "expected a list of 2, got a tuple"),
        (["dict", [["x", ["list", [["leaf"]]]]]], {"x": [1, 2]}, "x", "list of 1, got a list of 2"),
        (["dict", [["a", ["leaf"]]]], {"b": 1}, "", r"a dict with keys \['a'\], got \['b'\]"),
        (["tuple", [["leaf"], ["dict", []]]], (1, 2), "1", "expected a dict with keys .*, got int"),
        (["dict", [["a", ["leaf"]]]], {"a": 1, 2: 3}, "", r"keys \['a'\], got \[2, 'a'\]"),
    ],
)  # fmt: skip
def test_flatten_as_names_the_path_that_does_not_fit(
    description: tree.Description, value: Any, path: str, message: str
) -> None:
    with pytest.raises(tree.StructureError, match=message) as info:
        tree.flatten_as(description, value)
    assert info.value.path == path


@pytest.mark.parametrize(
    "description",
    [
        [],
        ["leaf", []],
        ["set", []],
        ["tuple", "ab"],
        ["dict", [["a"]]],
        ["dict", [[1, ["leaf"]]]],
        ["dict", [["a", ["leaf"]], ["a", ["leaf"]]]],
        ["list", [["tuple", [["nope"]]]]],
        "leaf",
    ],
)
def test_a_bad_description_is_a_structure_error(description: Any) -> None:
    with pytest.raises(tree.StructureError):
        tree.leaf_count(description)
    with pytest.raises(tree.StructureError):
        tree.unflatten(description, [])


def test_a_description_nested_too_deeply_is_a_structure_error() -> None:
    deep: list[Any] = ["leaf"]
    for _ in range(5000):
        deep = ["tuple", [deep]]
    with pytest.raises(tree.StructureError, match="too deeply"):
        tree.leaf_count(deep)


def test_with_companions_puts_each_companion_right_after_its_leaf() -> None:
    description, _leaves = tree.flatten({"x": 1, "y": (2, 3)})
    out = tree.with_companions(description, lambda i: i != 1, "_n")
    assert out == [
        "dict",
        [
            ["x", ["leaf"]],
            ["x_n", ["leaf"]],
            ["y", ["tuple", [["leaf"], ["tuple", [["leaf"]] * 2]]]],
        ],
    ]
    assert tree.unflatten(out, ["x", "xn", "y0", "y1", "y1n"]) == {
        "x": "x", "x_n": "xn", "y": ("y0", ("y1", "y1n"))
    }  # fmt: skip
    clash, _ = tree.flatten({"x": 1, "x_n": 2})
    with pytest.raises(tree.StructureError) as info:
        tree.with_companions(clash, lambda i: i == 0, "_n")
    assert info.value.path == "x"


# -- the element functions under the keras convention ------------------------------------


def test_keras_items_with_lists_of_labels_infer_check_and_batch() -> None:
    items = [
        (np.zeros((n, 5), np.float32), [np.zeros((n, 4), np.float32), np.ones((n, 3), np.int64)])
        for n in (8, 2)
    ]
    with pytest.raises(SourceError, match="field '1': cannot make an array of it"):
        elements.infer_spec(items)  # tf.data reading: the list of labels is one array
    spec = elements.infer_spec(items, convention="keras")
    assert spec.tree == ["tuple", [["leaf"], ["list", [["leaf"], ["leaf"]]]]]
    assert [leaf.path for leaf in spec.leaves] == ["0", "1/0", "1/1"]
    assert elements.ElementSpec.from_wire(msgpack.unpackb(msgpack.packb(spec.to_wire()))) == spec
    leaves = elements.flatten_checked(items[1], spec, convention="keras")
    assert [np.shape(leaf) for leaf in leaves] == [(2, 5), (2, 4), (2, 3)]
    batch = elements.build_batch(spec, leaves, lambda i: None)
    assert isinstance(batch, tuple) and isinstance(batch[1], list) and len(batch[1]) == 2
    with pytest.raises(SourceError, match=r"field '1': expected a list of 2, got a tuple"):
        elements.flatten_checked((items[0][0], tuple(items[0][1])), spec, convention="keras")
    leaf_spec = elements.infer_spec([(np.zeros(2), np.zeros(3))], convention="keras")
    with pytest.raises(SourceError, match=r"field '1': expected float64 \[3\], got a list"):
        elements.flatten_checked((np.zeros(2), [np.zeros(3)]), leaf_spec, convention="keras")
    # a list of numbers where the spec has a leaf is that array (the probe decided so)
    (_, listed) = elements.flatten_checked((np.zeros(2), [1, 2, 3]), leaf_spec, convention="keras")
    assert isinstance(listed, np.ndarray) and listed.dtype == np.float64 and listed.shape == (3,)
    # under tf.data the same list is an array of the declared kind
    (_, ids) = elements.flatten_checked((np.zeros(2), [1.0, 2.0, 3.0]), leaf_spec)
    assert isinstance(ids, np.ndarray) and ids.shape == (3,)


def test_length_names_that_would_hide_a_field_are_refused() -> None:
    spec = elements.infer_spec([{"x": np.zeros(n), "x_length": 1} for n in (1, 2)])
    with pytest.raises(SourceError, match=r"field 'x' varies in length.*'x_length'"):
        elements.check_length_names(spec, lambda i: spec.leaves[i].variable_axes != ())
    elements.check_length_names(spec, lambda i: False)
