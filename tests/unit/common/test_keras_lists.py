"""Lists in keras items: an array when a rectangular nest of numbers one row per sample,
structure otherwise; decided once from the probed items and kept in the spec
(:mod:`h5feed.common.elements.keras_lists`). Pure functions here; the end-to-end runs through real
workers are in ``tests/system/test_keras_heads.py``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from h5feed.common.elements import keras_lists
from h5feed.common.elements import values as elements
from h5feed.common.errors import SourceError


def one_hot(rows: int, width: int) -> list[list[int]]:
    return [[int(k == r % width) for k in range(width)] for r in range(rows)]


def item(rows: int, wide: int = 4, narrow: int = 3) -> tuple[np.ndarray, list[Any]]:
    """The seed-era item: ``(batch_x, [wlabels, glabels])``, labels lists of lists of ints."""
    return np.zeros((rows, 5), np.float32), [one_hot(rows, wide), one_hot(rows, narrow)]


def spec_of(*items: Any) -> elements.ElementSpec:
    names = [f"batch {i}" for i in range(len(items))]
    return elements.infer_spec(items, convention="keras", names=names)


def test_nest_shape_and_batch_size() -> None:
    assert keras_lists.nest_shape([[1, 2.0], [np.int8(3), True]]) == (2, 2)
    assert keras_lists.nest_shape([]) == (0,)
    assert keras_lists.nest_shape([[1, 2], [3]]) is None  # not rectangular
    assert keras_lists.nest_shape([np.zeros(2)]) is None  # a list of arrays is structure
    assert keras_lists.nest_shape(["a"]) is None
    deep: Any = 1
    for _ in range(keras_lists.MAX_NEST_DEPTH + 5):
        deep = [deep]
    assert keras_lists.nest_shape(deep) is None  # bounded, no RecursionError
    assert keras_lists.batch_size(item(6)) == 6
    assert keras_lists.batch_size(({"b": np.zeros(2), "a": np.zeros((3, 1))}, 1)) == 3
    assert keras_lists.batch_size(([np.zeros((5, 2)), np.zeros((5, 1))],)) == 5
    assert keras_lists.batch_size(([[1, 2], [3, 4], [5, 6]], [0, 1, 0])) == 3
    assert keras_lists.batch_size((3.0, [1])) is None


def test_the_seed_era_item_has_two_int_arrays_not_one_leaf_per_int() -> None:
    spec = spec_of(item(8), item(3))  # first batch and a shorter last one
    assert spec.tree == ["tuple", [["leaf"], ["list", [["leaf"], ["leaf"]]]]]
    assert [(leaf.path, leaf.shape) for leaf in spec.leaves] == [
        ("0", (None, 5)), ("1/0", (None, 4)), ("1/1", (None, 3)),
    ]  # fmt: skip
    assert spec.leaves[1].dtype == np.dtype(np.int64).str
    leaves = elements.flatten_checked(item(1), spec, convention="keras")  # a last batch of 1
    assert [np.shape(leaf) for leaf in leaves] == [(1, 5), (1, 4), (1, 3)]
    np.testing.assert_array_equal(leaves[1], [[1, 0, 0, 0]])


def test_two_heads_of_equal_width_are_two_arrays_never_one() -> None:
    spec = spec_of(item(8, 4, 4), item(1, 4, 4))  # a [2, 8, 4] nest is not 8 long
    assert [leaf.path for leaf in spec.leaves] == ["0", "1/0", "1/1"]
    assert [leaf.shape for leaf in spec.leaves] == [(None, 5), (None, 4), (None, 4)]


def test_the_spec_decides_later_batches_not_the_rules() -> None:
    # batch size 2 with heads 2 + 2 reads both ways on its own; the first batch said heads
    first, last = item(8, 2, 2), item(2, 2, 2)
    spec = spec_of(first, last)
    assert [leaf.path for leaf in spec.leaves] == ["0", "1/0", "1/1"]
    leaves = elements.flatten_checked(last, spec, convention="keras")
    assert [np.shape(leaf) for leaf in leaves] == [(2, 5), (2, 2), (2, 2)]
    # a label given as one list of numbers per sample is an array, decided once
    sparse = spec_of((np.zeros((4, 5)), [0, 1, 2, 3]), (np.zeros((1, 5)), [2]))
    assert spec.tree != sparse.tree and sparse.tree == ["tuple", [["leaf"], ["leaf"]]]
    (_, labels) = elements.flatten_checked((np.zeros((3, 5)), [1, 1]), sparse, convention="keras")
    assert isinstance(labels, np.ndarray) and labels.shape == (2,)


def test_a_list_that_reads_both_ways_is_an_error_naming_its_path() -> None:
    with pytest.raises(SourceError) as info:
        spec_of(item(2, 3, 3), item(2, 3, 3))  # 2 heads 3 wide, batch size 2
    text = str(info.value)
    assert "field '1': a list that reads both ways in batch 0" in text
    assert "an array [2, 2, 3] of batch size 2, or 2 fields of [2, 3] each" in text
    assert "np.asarray(...)" in text and "a tuple" in text
    nested = ({"x": np.zeros((2, 3))}, {"y": [[[0, 1], [1, 0]], [[1, 0], [0, 1]]]})
    with pytest.raises(SourceError, match=r"field '1/y': a list that reads both ways"):
        spec_of(nested)
    # made plain, each way: a tuple of two heads, or one array
    plain = spec_of((np.zeros((2, 5)), (one_hot(2, 3), one_hot(2, 3))))
    assert [leaf.shape for leaf in plain.leaves] == [(2, 5), (2, 3), (2, 3)]
    array = spec_of((np.zeros((2, 5)), np.asarray([one_hot(2, 3), one_hot(2, 3)])))
    assert [leaf.shape for leaf in array.leaves] == [(2, 5), (2, 2, 3)]


def test_probed_items_that_read_a_list_differently_are_an_error() -> None:
    array_rows = (np.zeros((4, 5)), one_hot(4, 2))  # 4 rows of 2: an array
    heads = (np.zeros((2, 5)), [np.zeros((2, 1)), np.zeros((2, 1))])  # a list of arrays
    with pytest.raises(SourceError) as info:
        spec_of(array_rows, heads)
    assert "field '1': a list read differently by the items" in str(info.value)
    assert "batch 0: array" in str(info.value) and "batch 1: structure" in str(info.value)


def test_lists_without_a_batch_size_stay_structure_as_keras_reads_them() -> None:
    spec = spec_of((1.0, [2.0, 3.0]))
    assert spec.tree == ["tuple", [["leaf"], ["list", [["leaf"], ["leaf"]]]]]
