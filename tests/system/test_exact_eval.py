"""Exact evaluation across shards (``shard_remainder="pad"``, h5feed/consumer/plan/epoch_plan.py
guarantee
3): each shard reports Σ w·loss and Σ w (``w`` = ``valid``; a Keras model whose loss has
``reduction="sum"`` and whose metrics are ``weighted_metrics``: Keras's ``metrics=`` ignores
``sample_weight``, and a mean loss divides by every row, padded ones included), and the
combined Σ/Σ is the unsharded mean. In one process (shards one after another), and under
``tf.distribute.MultiWorkerMirroredStrategy`` with 2 and 3 evaluator processes on localhost,
a custom loop combining each step with ``strategy.reduce(SUM)``."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import sys
from typing import Any

import numpy as np
import pytest
import tf_cluster
from conftest import one_file_of_tiny_videos
from exact_eval_trainer import CLIP, inputs, make_model
from paths import REPO

import h5feed

ROOT = REPO
TRAINER = ROOT / "tests" / "support" / "exact_eval_trainer.py"

VIDEOS = 17  # 2 shards: 9 + 8 (+ 1 padded row); 3 shards: 6 + 6 + 5 (+ 1)
RTOL = 1e-6


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return one_file_of_tiny_videos(tmp_path_factory.mktemp("eval"), VIDEOS)


def unsharded(model: Any, data: pathlib.Path) -> tuple[float, float, int]:
    """(mean loss, accuracy, samples) over one whole epoch, row by row in float64."""
    import keras

    losses, correct = [], []
    for batch in h5feed.batches(data, **CLIP):
        x, y, _w = inputs(batch)
        logits = model(x, training=False)
        per_row = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        losses += np.asarray(per_row, np.float64).tolist()
        correct += (np.argmax(np.asarray(logits), axis=1) == np.asarray(y)).tolist()
    return float(np.mean(losses)), float(np.mean(correct)), len(losses)


def shard_sums(model: Any, data: pathlib.Path, shard: tuple[int, int], rule: str) -> dict:
    """Σ w·loss, Σ w·correct, Σ w and the batch count of one shard, batch by batch with the
    compiled loss (reduction="sum") and weighted metric (``test_on_batch`` resets them)."""
    ds = h5feed.dataset(
        data, keys=("frames", "label", "valid"), shard=shard, shard_remainder=rule, **CLIP
    ).map(inputs)
    sums = {"loss": 0.0, "correct": 0.0, "weight": 0.0, "batches": 0}
    for x, y, w in ds:
        logs = model.test_on_batch(x, y, sample_weight=w, return_dict=True)
        weight = float(np.sum(w))
        sums["loss"] += float(logs["loss"])  # one batch: its Σ w·loss
        sums["correct"] += float(logs["sparse_categorical_accuracy"]) * weight
        sums["weight"] += weight
        sums["batches"] += 1
    return sums


@pytest.mark.parametrize("count", [2, 3])
def test_combined_weighted_sums_of_padded_shards_are_the_unsharded_mean(
    tiny: pathlib.Path, count: int
) -> None:
    model = make_model()
    mean_loss, accuracy, samples = unsharded(model, tiny)
    assert samples == VIDEOS
    shards = [shard_sums(model, tiny, (i, count), "pad") for i in range(count)]
    assert len({s["batches"] for s in shards}) == 1  # an all-reduce per step would not hang
    weight = sum(s["weight"] for s in shards)
    assert weight == VIDEOS
    np.testing.assert_allclose(sum(s["loss"] for s in shards) / weight, mean_loss, rtol=RTOL)
    np.testing.assert_allclose(sum(s["correct"] for s in shards) / weight, accuracy, rtol=RTOL)
    # Why pad: under drop the same sums cover VIDEOS - VIDEOS % count samples, another mean.
    dropped = [shard_sums(model, tiny, (i, count), "drop") for i in range(count)]
    assert not np.isclose(
        sum(s["loss"] for s in dropped) / (VIDEOS - VIDEOS % count), mean_loss, rtol=RTOL
    )


def tf_config(ports: list[int], index: int) -> str:
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})


def run_evaluators(data: pathlib.Path, out: pathlib.Path, count: int) -> list[dict]:
    """One evaluator process per worker of a ``count``-worker cluster on localhost, run
    together and bounded (tests/support/tf_cluster.py); their JSON results."""

    def commands(ports: list[int]) -> list[tf_cluster.Command]:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
        env["CUDA_VISIBLE_DEVICES"] = ""  # CPU: the tiny model needs nothing more
        args = [sys.executable, str(TRAINER), str(data)]
        return [
            ([*args, str(out / f"result{i}.json")], {**env, "TF_CONFIG": tf_config(ports, i)})
            for i in range(count)
        ]

    tf_cluster.run_cluster(commands, count, [out / f"evaluator{i}.log" for i in range(count)])
    return [json.loads((out / f"result{i}.json").read_text()) for i in range(count)]


@pytest.mark.slow
@pytest.mark.xdist_group("machine")  # 2-3 TensorFlow processes and a cluster on localhost
@pytest.mark.timeout(tf_cluster.TEST_TIMEOUT_S)
@pytest.mark.parametrize("count", [2, 3])
def test_multi_worker_mirrored_evaluation_of_padded_shards_is_exact(
    tiny: pathlib.Path, tmp_path: pathlib.Path, count: int
) -> None:
    results = run_evaluators(tiny, tmp_path, count)
    assert [r["replicas"] for r in results] == [count] * count
    for r in results:
        assert r["unsharded_samples"] == VIDEOS
    for way in ("from_function", "distribute_dataset"):
        runs = [r[way] for r in results]
        assert len({len(run["rows"]) for run in runs}) == 1, f"{way}: steps differ"
        seen = collections.Counter(s for run in runs for s in run["samples"])
        assert seen == collections.Counter(range(VIDEOS)), f"{way}: not every sample once"
        for r, run in zip(results, runs, strict=True):  # reduce(SUM): the same on every worker
            assert run["sum_weights"] == VIDEOS, way
            combined = run["sum_weighted_loss"] / run["sum_weights"]
            np.testing.assert_allclose(combined, r["unsharded_mean"], rtol=RTOL, err_msg=way)
        assert len({run["sum_weighted_loss"] for run in runs}) == 1, way
