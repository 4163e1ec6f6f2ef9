"""User sources (``source=``): the user's own code in real worker processes.

The sources live in ``tests/support/user_sources.py`` and ``tests/support/user_keras.py``; workers
import them
through the trainer's ``sys.path``, like a user's own package.
"""

from __future__ import annotations

import os
import pathlib
import signal
import time
from typing import Any

import numpy as np
import pytest
from paths import SUPPORT
from ports import free_port
from remote_producers import start_producer

import h5feed
from h5feed.common.elements import values as elements
from h5feed.common.elements.values import ElementSpec, RaggedArray
from h5feed.common.errors import SourceError

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Bounds for every wait: workers start (and import the user's module) within these.
FAST = {"start_timeout_s": 60.0, "unit_timeout_s": 60.0}


def numpy_batches(**kwargs: Any) -> list[Any]:
    return list(h5feed.batches(**FAST, **kwargs))


# -- elements, without processes --------------------------------------------------------


def test_pack_and_unpack_round_trip_nested_strings_and_padding() -> None:
    items = [
        {"x": (np.arange(n, dtype=np.int16), {"depth": np.float32(n)}), "s": f"é{n}"}
        for n in (1, 3, 2)
    ]
    spec = elements.infer_spec(items)
    assert [leaf.path for leaf in spec.leaves] == ["s", "x/0", "x/1/depth"]
    assert spec.leaves[1].shape == (None,)
    assert ElementSpec.from_wire(spec.to_wire()) == spec
    packed = elements.pack(spec, [elements.flatten_checked(item, spec) for item in items])
    fields = elements.unpack(spec, dict(packed), len(items))
    assert fields[0].values.tolist() == ["é1".encode(), "é3".encode(), "é2".encode()]
    assert fields[1].values.tolist() == [[0, 0, 0], [0, 1, 2], [0, 1, 0]]
    assert fields[1].lengths is not None and fields[1].lengths.tolist() == [1, 3, 2]


def test_a_field_that_does_not_fit_is_named_with_expected_and_actual() -> None:
    spec = elements.infer_spec([{"x": (np.zeros(3, np.float32), {"depth": np.zeros(2)})}])
    with pytest.raises(SourceError, match=r"field 'x/1/depth': expected float64 \[2\], got "):
        elements.flatten_checked({"x": (np.zeros(3, np.float32), {"depth": np.zeros(5)})}, spec)


@pytest.mark.parametrize(
    ("element", "message"),
    [
        ({"x": None}, "field 'x': a NoneType is not an element field"),
        ({1: np.zeros(2)}, "dict keys must be str"),
        ((np.array(["a", "b"]),), "field '0': dtype <U1 is not supported"),
        ([[1, 2], [3]], "cannot make an array of it"),
    ],
)
def test_what_is_not_an_element_is_refused_naming_the_field(element: Any, message: str) -> None:
    with pytest.raises(SourceError, match=message):
        elements.infer_spec([element])


def test_python_numbers_and_lists_take_the_declared_dtype_of_their_kind() -> None:
    spec = elements.infer_spec([{"f": np.float32(1), "ids": np.zeros(2, np.int32)}])
    f, ids = elements.flatten_checked({"f": 3, "ids": [7, 8]}, spec)
    assert isinstance(f, np.ndarray) and f.dtype == np.float32
    assert isinstance(ids, np.ndarray) and ids.dtype == np.int32
    with pytest.raises(SourceError, match="field 'f': expected float32"):
        elements.flatten_checked({"f": "3", "ids": [7, 8]}, spec)


# -- map-style --------------------------------------------------------------------------


def test_map_source_exactly_once_per_epoch_and_same_batches_with_1_2_3_workers() -> None:
    common = {"source": "user_sources:make_squares", "source_args": {"n": 23}}
    runs = {
        workers: numpy_batches(**common, batch_size=4, epochs=2, seed=5, workers=workers)
        for workers in (2, 1, 3)
    }
    two = runs[2]
    assert [len(b["i"]) for b in two] == [4, 4, 4, 4, 4, 3] * 2
    for epoch in (two[:6], two[6:]):
        seen = np.concatenate([b["i"] for b in epoch])
        assert sorted(seen.tolist()) == list(range(23))  # exactly once
    assert [b["i"].tolist() for b in two[:6]] != [b["i"].tolist() for b in two[6:]]  # reshuffled
    for b in two:
        np.testing.assert_array_equal(b["x"], np.repeat(b["i"][:, None], 3, 1).astype(np.float32))
    for workers in (1, 3):
        assert [b["i"].tolist() for b in runs[workers]] == [b["i"].tolist() for b in two]


def test_variable_length_fields_are_padded_with_lengths_and_strings_are_bytes() -> None:
    batches = numpy_batches(
        source="user_sources:Tokens", source_args={"n": 12}, batch_size=6, shuffle=False,
        workers=2,
    )  # fmt: skip
    first = batches[0]
    assert set(first) == {"tokens", "tokens_length", "label", "name"}
    assert first["tokens_length"].tolist() == [1, 2, 3, 4, 5, 1]
    assert first["tokens"].shape == (6, 5)
    assert first["tokens"][2].tolist() == [2, 3, 4, 0, 0]
    assert first["name"].tolist() == [f"item-{i}".encode() for i in range(6)]
    assert batches[1]["label"].tolist() == list(range(6, 12))


def test_ragged_in_numpy_gives_ragged_arrays() -> None:
    (batch,) = numpy_batches(
        source="user_sources:Tokens", source_args={"n": 3}, batch_size=3, shuffle=False,
        workers=1, ragged=True,
    )  # fmt: skip
    assert "tokens_length" not in batch and isinstance(batch["tokens"], RaggedArray)
    assert [r.tolist() for r in batch["tokens"].rows()] == [[0], [1, 2], [2, 3, 4]]


def test_what_the_workers_tell_is_kept_by_the_feed_not_written_into_its_config() -> None:
    feed = h5feed.batches(source="user_sources:Tokens", source_args={"n": 6}, workers=2, **FAST)
    config = feed.config
    assert feed.learnt is None  # nothing started yet
    assert len(list(feed)) == 1
    assert feed.config is config and config.spec is None
    learnt = feed.learnt
    assert learnt is not None and learnt.kind == "map"
    assert [leaf.path for leaf in learnt.spec.leaves] == ["label", "name", "tokens"]
    stream = feed.stream()  # a later iteration starts from what was learnt: no probe
    try:
        assert stream.learnt == learnt  # at once: given by the feed, not probed
        assert len(list(stream)) == 1
    finally:
        stream.close()
    assert feed.learnt is learnt


def test_a_later_element_of_another_shape_is_an_error_naming_field_and_index() -> None:
    with pytest.raises(h5feed.WorkerError) as info:
        numpy_batches(
            source="user_sources:BadShape", source_args={"n": 40, "bad": 33}, batch_size=8,
            workers=2,
        )  # fmt: skip
    text = str(info.value)
    assert "index 33" in text and "field 'x/1/depth'" in text
    assert "expected float32 [3], got float32 [4]" in text
    assert "(worker 0 of 2)" in text or "(worker 1 of 2)" in text


def test_user_code_raising_reaches_the_trainer_with_index_and_traceback() -> None:
    with pytest.raises(h5feed.WorkerError) as info:
        numpy_batches(
            source="user_sources:Raising", source_args={"n": 30, "bad": 17}, batch_size=5,
            workers=2,
        )  # fmt: skip
    text = str(info.value)
    assert "item 17 raised ValueError: cannot load item 17: corrupt record" in text
    assert "user_sources.py" in text and "__getitem__" in text  # the user's own frame


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("no_such_module_xyz:make", "cannot import module 'no_such_module_xyz'"),
        ("user_sources:no_such_factory", "'user_sources' has no attribute 'no_such_factory'"),
        ("user_sources:not_a_source", "the factory returned a int"),
    ],
)
def test_a_bad_source_is_a_clear_error(source: str, message: str) -> None:
    with pytest.raises(h5feed.WorkerError, match=message):
        numpy_batches(source=source, workers=1)


def test_bad_arguments_are_refused_before_any_process_starts() -> None:
    with pytest.raises(ValueError, match="import path"):
        h5feed.batches(source="no_colon")
    with pytest.raises(ValueError, match="msgpack-able"):
        h5feed.batches(source="user_sources:Squares", source_args={"n": object()})
    with pytest.raises(TypeError, match="clip_len"):
        h5feed.batches(source="user_sources:Squares", clip_len=4)


# -- generators -------------------------------------------------------------------------


def test_scene_generator_on_two_workers_reads_disjoint_shards(
    small_dataset: list[pathlib.Path],
) -> None:
    files = [str(p) for p in small_dataset]
    batches = numpy_batches(
        source="user_sources:SceneGenerator", source_args={"files": files, "frames": 2},
        batch_size=4, workers=2,
    )  # fmt: skip
    videos = [v for b in batches for v in b[1]["video"].tolist()]
    assert len(videos) == len(set(videos)) == 24  # 4 files x 6 videos, each once
    x = batches[0][0]
    assert x.dtype == np.uint8 and x.shape[1:] == (2, 96, 128, 3)
    assert all(b[1]["label"].dtype == np.int64 for b in batches)


def test_generator_function_epochs_and_steps_per_epoch() -> None:
    common = {"source": "user_sources:count_up", "source_args": {"n": 10}, "workers": 2}
    batches = numpy_batches(**common, batch_size=3, epochs=2)
    values = [v for b in batches for v in b["value"].tolist()]
    assert sorted(values) == sorted(list(range(10)) * 2)  # an epoch = every shard to its end
    for b in batches:  # batches are per worker
        assert len(set(b["shard"].tolist())) == 1
    steps = numpy_batches(**common, batch_size=2, epochs=3, steps_per_epoch=2)
    assert len(steps) == 6
    # shard=(1, 2) of a trainer with 2 workers: the workers are shards 2 and 3 of 4
    half = numpy_batches(**common, batch_size=5, shard=(1, 2))
    assert sorted(v for b in half for v in b["value"].tolist()) == [2, 3, 6, 7]


def test_a_generator_of_varying_element_shapes_ends_its_pass_exactly_once() -> None:
    """Issue 22's repro: each pass ends with an empty answer, which must fit the spec."""
    batches = list(
        h5feed.batches(
            source="user_sources:varlen", batch_size=4, workers=2, epochs=2,
            start_timeout_s=60.0, unit_timeout_s=10.0,
        )
    )  # fmt: skip
    ids = [i for _x, i in batches for i in i.tolist()]
    assert sorted(ids) == sorted(list(range(10)) * 2)
    for (x, lengths), i in batches:  # padded to the batch's longest, lengths beside
        assert lengths.tolist() == [3 + j % 4 for j in i.tolist()]
        assert x.shape[1:] == (max(lengths), 2)


def test_generator_raising_reaches_the_trainer_with_element_and_traceback() -> None:
    with pytest.raises(h5feed.WorkerError) as info:
        numpy_batches(
            source="user_sources:failing_generator", source_args={"n": 50, "fail_at": 9},
            batch_size=4, workers=2,
        )  # fmt: skip
    text = str(info.value)
    assert "shard 0 raised RuntimeError: sensor 9 unplugged at element #9" in text
    assert "user_sources.py" in text and "failing_generator" in text


def test_unordered_map_batches_are_still_exactly_once() -> None:
    batches = numpy_batches(
        source="user_sources:make_squares", source_args={"n": 30}, batch_size=4, workers=3,
        deterministic=False,
    )  # fmt: skip
    assert sorted(np.concatenate([b["i"] for b in batches]).tolist()) == list(range(30))


def test_a_producer_leaving_a_map_source_hands_its_units_over(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    # Remote producers import the user's module from their own environment.
    tests_dir = str(SUPPORT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("H5FEED_ALLOW_CODE", "user_sources:*")  # producers import no code unasked
    port = free_port()
    producers = [start_producer(port, tmp_path, f"p{i}") for i in range(2)]
    try:
        feed = h5feed.batches(
            source="user_sources:make_squares", source_args={"n": 40}, batch_size=2,
            workers=0, listen=f"tcp://127.0.0.1:{port}", **FAST,
        )  # fmt: skip
        seen: list[int] = []
        with feed.stream() as stream:
            for i, batch in enumerate(stream):
                seen.extend(batch["i"].tolist())
                if i == 2:
                    producers[0].send_signal(signal.SIGTERM)
            stats = stream.stats()
        assert sorted(seen) == list(range(40)), "lost or repeated items after a producer left"
        assert producers[0].wait(15) == 0
        assert [w["name"].split("-")[0] for w in stats["workers"]] == ["p1"]
    finally:
        for process in producers:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=10)


# -- TensorFlow -------------------------------------------------------------------------


def test_nested_dict_and_tuple_elements_into_tf() -> None:
    tf = pytest.importorskip("tensorflow")  # the tf extra is part of the test install
    ds = h5feed.dataset(
        source="user_sources:Nested", batch_size=4, shuffle=False, workers=2, **FAST
    )
    spec = ds.element_spec
    assert spec[0]["a"]["b"] == tf.TensorSpec((None, 2, 2), tf.int32)
    assert spec[0]["c"] == tf.TensorSpec((None,), tf.string)
    assert spec[1] == tf.TensorSpec((None,), tf.float64)
    batches = list(ds)
    assert [int(b[1].shape[0]) for b in batches] == [4, 4, 2]
    assert batches[0][0]["a"]["b"].numpy()[3].tolist() == [[3, 3], [3, 3]]
    assert batches[2][0]["c"].numpy().tolist() == [b"c8", b"c9"]


def test_output_signature_given_casts_python_numbers_and_names_a_field_that_does_not_fit() -> None:
    tf = pytest.importorskip("tensorflow")
    element = {"a": {"b": tf.TensorSpec((2, 2), tf.int32)}, "c": tf.TensorSpec((), tf.string)}
    signature = (element, tf.TensorSpec((), tf.float32))  # the source yields Python floats
    ds = h5feed.dataset(
        source="user_sources:Nested", output_signature=signature, batch_size=5, shuffle=False,
        workers=2, **FAST,
    )  # fmt: skip
    assert ds.element_spec[1] == tf.TensorSpec((None,), tf.float32)
    batches = list(ds)
    assert batches[1][1].numpy().tolist() == [2.5, 3.0, 3.5, 4.0, 4.5]
    wrong = (dict(element, a={"b": tf.TensorSpec((3, 3), tf.int32)}), signature[1])
    # dataset() peeks at the first batch (h5feed/consumer/trainers/signature.py): it raises
    # the error
    with pytest.raises(h5feed.WorkerError, match=r"field '0/a/b': expected int32 \[3, 3\]"):
        h5feed.dataset(source="user_sources:Nested", output_signature=wrong, workers=1, **FAST)


def test_the_peeked_first_iteration_continues_and_later_ones_reuse_the_learnt_spec() -> None:
    pytest.importorskip("tensorflow")
    ds = h5feed.dataset(
        source="user_sources:Squares", source_args={"n": 10}, batch_size=4, shuffle=False,
        epochs=1, workers=2, **FAST,
    )  # fmt: skip
    first = [b["i"].numpy().tolist() for b in ds]  # the peeked iteration: epoch 0, whole
    assert first == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [b["i"].numpy().tolist() for b in ds] == first  # epoch 1: unshuffled, the same
    assert ds.stats()["batches"] == 3


def test_variable_length_fields_as_padded_and_as_ragged_tensors() -> None:
    tf = pytest.importorskip("tensorflow")
    common = {"source": "user_sources:Tokens", "source_args": {"n": 7}, "shuffle": False}
    padded = h5feed.dataset(**common, batch_size=7, workers=1, **FAST)
    assert padded.element_spec["tokens"] == tf.TensorSpec((None, None), tf.int64)
    (batch,) = list(padded)
    assert batch["tokens_length"].numpy().tolist() == [1, 2, 3, 4, 5, 1, 2]
    ragged = h5feed.dataset(**common, batch_size=7, workers=2, ragged=["tokens"], **FAST)
    assert isinstance(ragged.element_spec["tokens"], tf.RaggedTensorSpec)
    (batch,) = list(ragged)
    assert batch["tokens"].to_list()[4] == [4, 5, 6, 7, 8]
    assert "tokens_length" not in batch


def test_keras_pydataset_batch_order_shuffled_each_batch_once() -> None:
    pytest.importorskip("keras")
    ds = h5feed.dataset(
        source="user_keras:Batches", source_args={"n_batches": 6, "batch": 4, "rows": 22},
        shuffle=True, seed=3, epochs=2, workers=2, **FAST,
    )  # fmt: skip
    batches = list(ds)
    assert len(batches) == 12
    firsts = [int(b[0].numpy()[0, 0]) // 4 for b in batches]
    assert sorted(firsts[:6]) == sorted(firsts[6:]) == list(range(6))  # each batch once
    assert firsts[:6] != list(range(6))  # shuffled
    sizes = sorted(int(b[0].shape[0]) for b in batches[:6])
    assert sizes == [2, 4, 4, 4, 4, 4]  # items are not re-batched
    # on_epoch_end ran in the workers between the epochs
    assert all(int(b[1].numpy()[0]) == 0 for b in batches[:6])
    assert all(int(b[1].numpy()[0]) == 1 for b in batches[6:])


def test_model_fit_on_a_source_dataset() -> None:
    keras = pytest.importorskip("keras")
    ds = h5feed.dataset(
        source="user_sources:make_squares", source_args={"n": 32}, batch_size=8, workers=2,
        **FAST,
    )  # fmt: skip
    model = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    history = model.fit(ds.map(lambda b: (b["x"] / 32.0, b["i"])), epochs=1, verbose=0)
    assert len(history.history["loss"]) == 1 and np.isfinite(history.history["loss"][0])


def test_a_keras_source_worker_replaced_mid_run_replays_on_epoch_end() -> None:
    pytest.importorskip("keras")
    feed = h5feed.batches(
        source="user_keras:Batches", source_args={"n_batches": 6, "batch": 4, "rows": 22},
        shuffle=False, epochs=4, workers=2, max_inflight_batches=2, **FAST,
    )  # fmt: skip
    got = []
    killed, killed_pid = "", 0
    stats: dict[str, Any] = {}
    with feed.stream() as stream:
        for i, (x, ended) in enumerate(stream):
            got.append((int(x[0, 0]) // 4, int(ended[0])))
            if i == 6:  # early in epoch 1: the replacement serves later epochs
                killed_pid = stream.worker_pids[0]
                killed = next(
                    w["name"] for w in stream.stats()["workers"] if w["pid"] == killed_pid
                )
                os.kill(killed_pid, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while i == 7 and stream.stats()["peers_joined"] < 1:  # until the replacement is in
                assert time.monotonic() < deadline, "no replacement joined"
                time.sleep(0.05)
            if i == 7:  # then the other one: from here on only new processes serve
                os.kill(stream.worker_pids[1], signal.SIGKILL)
            if i == 22:
                stats = stream.stats()
    assert [b for b, _ in got] == list(range(6)) * 4  # each batch once per epoch, in order
    # Whoever made a batch of epoch e had called on_epoch_end e times: the replacement too.
    assert [ended for _, ended in got] == [i // 6 for i in range(24)]
    assert stats["workers_replaced"] == 2
    [replacement] = [w for w in stats["workers"] if w["name"] == killed]
    assert replacement["pid"] != killed_pid


def test_a_generator_worker_killed_mid_epoch_restarts_its_shard_at_least_once() -> None:
    feed = h5feed.batches(
        source="user_sources:count_up", source_args={"n": 40}, batch_size=2, workers=2,
        max_inflight_batches=2, **FAST,
    )  # fmt: skip
    values: list[int] = []
    with feed.stream() as stream:
        for i, batch in enumerate(stream):
            values += batch["value"].tolist()
            if i == 3:
                os.kill(stream.worker_pids[0], signal.SIGKILL)
        stats = stream.stats()
    assert set(values) == set(range(40))  # nothing lost ...
    assert len(values) >= 40  # ... and what the lost shard had sent may come again
    assert stats["workers_replaced"] == 1


# -- the user's randomness, and copies that must agree (issue 22) ------------------------


def test_a_sequence_shuffled_unseeded_in_init_and_on_epoch_end_is_exactly_once() -> None:
    pytest.importorskip("keras")
    batches = numpy_batches(
        source="user_keras:ShuffledRows", source_args={"rows": 22, "batch": 4}, epochs=2,
        workers=2, seed=4,
    )  # fmt: skip
    assert len(batches) == 12
    epochs = (batches[:6], batches[6:])
    for epoch in epochs:
        rows = [r for _x, y in epoch for r in y.tolist()]
        assert sorted(rows) == list(range(22))  # each copy holds the same permutation
    # on_epoch_end reshuffled the rows (in every copy alike): other batches in epoch 1
    assert {frozenset(y.tolist()) for _x, y in epochs[0]} != {
        frozenset(y.tolist()) for _x, y in epochs[1]
    }


def test_per_item_augmentation_differs_between_items_and_is_the_same_for_1_and_3_workers() -> None:
    common = {"source": "user_sources:Augmented", "source_args": {"n": 12}, "seed": 9}
    runs = {w: numpy_batches(**common, batch_size=4, epochs=2, workers=w) for w in (1, 3)}
    assert len(runs[1]) == len(runs[3]) == 6
    for one, three in zip(runs[1], runs[3], strict=True):
        for key in ("i", "noise", "flip"):
            np.testing.assert_array_equal(one[key], three[key])
    noise = [
        {int(i): n.tobytes() for b in epoch for i, n in zip(b["i"], b["noise"], strict=True)}
        for epoch in (runs[1][:3], runs[1][3:])
    ]
    assert len(set(noise[0].values())) == 12  # every item its own augmentation
    assert all(noise[0][i] != noise[1][i] for i in range(12))  # and another one each epoch
    flips = [f for b in runs[1] for f in b["flip"].tolist()]
    assert 0 < sum(flips) < len(flips)  # Python's random, seeded per item too


def test_copies_that_differ_are_refused_naming_the_item() -> None:
    with pytest.raises(SourceError, match=r"item 0 at epoch 0 differs between the workers"):
        numpy_batches(
            source="user_sources:DivergentCopies", source_args={"n": 8}, batch_size=4,
            workers=2,
        )  # fmt: skip


def test_an_item_that_is_not_reproducible_is_warned_naming_it() -> None:
    with pytest.warns(h5feed.NondeterministicItemWarning, match="item 0 of source"):
        batches = numpy_batches(source="user_sources:Unreproducible", batch_size=3, workers=1)
    assert sorted(i for b in batches for i in b["i"].tolist()) == list(range(6))


# -- generators of whole batches (source_batched=True) -----------------------------------


def test_a_batch_yielding_generator_is_split_and_batched_again() -> None:
    batches = numpy_batches(
        source="user_sources:hdf5_batches", source_args={"n": 23, "batch": 5},
        source_batched=True, batch_size=4, workers=2, epochs=2,
    )  # fmt: skip
    labels = [label for _x, y in batches for label in y.tolist()]
    assert sorted(labels) == sorted(list(range(23)) * 2)  # exactly once per epoch
    assert all(1 <= len(y) <= 4 for _x, y in batches)  # h5feed's batch_size, short ones fine
    for x, y in batches:  # the rows stayed together
        assert x.shape[1:] == (2, 2, 3)
        np.testing.assert_array_equal(x[:, 0, 0, 0], y * 12)


def test_a_batch_whose_fields_differ_in_rows_is_an_error_naming_the_field() -> None:
    with pytest.raises(h5feed.WorkerError, match=r"field '1' has another first dimension"):
        numpy_batches(
            source="user_sources:hdf5_batches", source_args={"n": 10, "batch": 5, "bad": True},
            source_batched=True, batch_size=4, workers=1,
        )  # fmt: skip


def test_source_batched_on_a_map_source_is_an_error() -> None:
    with pytest.raises(h5feed.WorkerError, match="source_batched=True takes a generator"):
        numpy_batches(source="user_sources:make_squares", source_args={"n": 8},
                      source_batched=True, batch_size=4, workers=1)  # fmt: skip
