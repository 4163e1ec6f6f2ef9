"""A keras PyDataset for a two-headed model, ``(x, [y_a, y_b])`` with labels 4 and 3 wide:
Keras reads the list as two labels (lists are structure), and so does h5feed for keras
sources, end to end through real workers (``tests/support/user_keras_heads.py``)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import h5feed
from h5feed.common.elements import tree

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")  # the tf extra is part of the test install
keras = pytest.importorskip("keras")

from user_keras_heads import TwoHeads  # noqa: E402

# Bounds for every wait: workers start (and import keras) within these.
FAST = {"start_timeout_s": 60.0, "unit_timeout_s": 60.0}
SOURCE = "user_keras_heads:TwoHeads"


def two_headed_model() -> Any:
    inputs = keras.Input((5,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    outputs = [keras.layers.Dense(4, name="a")(hidden), keras.layers.Dense(3, name="b")(hidden)]
    model = keras.Model(inputs, outputs)
    model.compile("adam", ["mse", "mse"])
    return model


def test_numpy_batches_keep_the_list_of_two_labels_4_and_3_wide() -> None:
    args = {"n_batches": 5, "batch": 4, "last": 2}
    batches = list(
        h5feed.batches(source=SOURCE, source_args=args, shuffle=False, workers=2, **FAST)
    )
    expected = TwoHeads(**args)
    assert len(batches) == 5
    for b, (x, labels) in enumerate(batches):
        assert isinstance(labels, list) and len(labels) == 2
        y_a, y_b = labels
        rows = 2 if b == 4 else 4
        assert x.shape == (rows, 5) and y_a.shape == (rows, 4) and y_b.shape == (rows, 3)
        want_x, (want_a, want_b) = expected[b]
        np.testing.assert_array_equal(x, want_x)  # batch b, not re-batched
        np.testing.assert_array_equal(y_a, want_a)
        np.testing.assert_array_equal(y_b, want_b)


def test_the_keras_convention_reads_an_item_as_keras_own_tree_does() -> None:
    item = TwoHeads(n_batches=2, batch=3)[0]
    description, leaves = tree.flatten(item, convention="keras")
    assert description == ["tuple", [["leaf"], ["list", [["leaf"], ["leaf"]]]]]
    assert [leaf.shape for leaf in leaves] == [(3, 5), (3, 4), (3, 3)]
    assert keras.tree.flatten(item) and all(
        leaf is other for leaf, other in zip(leaves, keras.tree.flatten(item), strict=True)
    )


def test_a_two_headed_model_trains_through_h5feed_dataset_for_two_epochs() -> None:
    # (Keras 3's own TensorFlow path, model.fit(TwoHeads(...)), refuses this item: its
    # tf.data signature keeps the list. h5feed gives tf.data a tuple.)
    args = {"n_batches": 4, "batch": 8}
    ds = h5feed.dataset(source=SOURCE, source_args=args, epochs=2, workers=2, **FAST)
    x_spec, labels_spec = ds.element_spec
    assert x_spec == tf.TensorSpec((None, 5), tf.float32)
    # tf.data has no lists: the list of labels is a tuple in the signature and the batches
    assert labels_spec == (tf.TensorSpec((None, 4)), tf.TensorSpec((None, 3)))
    model = two_headed_model()
    history = model.fit(ds, epochs=2, steps_per_epoch=4, verbose=0)
    losses = history.history["loss"]
    assert len(losses) == 2 and all(np.isfinite(losses))
    assert {"a_loss", "b_loss"} <= set(history.history)  # one loss per head


def test_an_item_whose_list_of_labels_differs_is_an_error_naming_the_field() -> None:
    with pytest.raises(h5feed.WorkerError) as info:
        list(
            h5feed.batches(
                source=SOURCE, source_args={"n_batches": 6, "batch": 2, "one_label": 3},
                shuffle=False, workers=1, **FAST,
            )
        )  # fmt: skip
    text = str(info.value)
    assert "batch 3" in text and "field '1': expected a list of 2, got a list of 1" in text


# -- seed-era labels: Python lists of lists of ints (tests/support/user_keras_lists.py)
# --------------

LISTS = "user_keras_lists:from_csv"


def test_list_labels_4_and_4_wide_are_two_arrays_down_to_a_last_batch_of_one() -> None:
    # (heads 4 + 3 go end to end in the training test below; both widths, and the lists
    # that read both ways, in tests/unit/common/test_keras_lists.py)
    from user_keras_lists import from_csv

    narrow = 4
    args = {"rows": 9, "batch": 4, "wide": 4, "narrow": narrow}  # batches of 4, 4 and 1
    batches = list(h5feed.batches(source=LISTS, source_args=args, shuffle=False, workers=1, **FAST))
    expected = from_csv(**args)
    assert [x.shape[0] for x, _labels in batches] == [4, 4, 1]
    for b, (x, labels) in enumerate(batches):
        assert isinstance(labels, list) and len(labels) == 2  # never one [2, B, 4] array
        want_x, (want_w, want_g) = expected[b]
        np.testing.assert_array_equal(x, want_x)
        assert labels[0].dtype == np.int64 and labels[0].shape == (len(want_w), 4)
        assert labels[1].shape == (len(want_g), narrow)
        np.testing.assert_array_equal(labels[0], np.asarray(want_w))
        np.testing.assert_array_equal(labels[1], np.asarray(want_g))


def test_the_seed_era_sequence_unchanged_trains_a_two_headed_model() -> None:
    args = {"rows": 30, "batch": 8}  # the last batch has 6 rows
    ds = h5feed.dataset(source=LISTS, source_args=args, epochs=2, workers=2, **FAST)
    x_spec, labels_spec = ds.element_spec
    assert x_spec == tf.TensorSpec((None, 5), tf.float32)
    assert labels_spec == (tf.TensorSpec((None, 4), tf.int64), tf.TensorSpec((None, 3), tf.int64))
    inputs = keras.Input((5,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    outputs = [
        keras.layers.Dense(4, activation="softmax", name="w")(hidden),
        keras.layers.Dense(3, activation="softmax", name="g")(hidden),
    ]
    model = keras.Model(inputs, outputs)
    model.compile("adam", ["categorical_crossentropy", "categorical_crossentropy"])
    history = model.fit(ds, epochs=2, steps_per_epoch=4, verbose=0)
    assert len(history.history["loss"]) == 2 and all(np.isfinite(history.history["loss"]))
    assert {"w_loss", "g_loss"} <= set(history.history)
