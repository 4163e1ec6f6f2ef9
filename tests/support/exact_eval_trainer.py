"""One evaluator process under MultiWorkerMirroredStrategy, run by tests/system/test_exact_eval.py
(its
own process: the multi-worker cluster must be set before TensorFlow starts).

``python tests/support/exact_eval_trainer.py DATA_DIR OUT_JSON``, with ``TF_CONFIG`` set: evaluates
a
tiny fixed model on this worker's shard of one epoch (``shard_remainder="pad"``; the shard
from ``TF_CONFIG``) in a custom loop, each step's Σ w·loss and Σ w combined across the workers
with ``strategy.reduce(SUM)`` (``w`` = ``valid``), and writes the combined sums, this
worker's valid sample ids and steps, and the unsharded mean loss this process computes over
the whole epoch with NumPy batches (no shard) and the same model. Every collective op has a
timeout: a worker with a batch more fails instead of hanging.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

import h5feed

#: Shared with the test: tiny clips, one worker, the same plan in every process.
CLIP: dict[str, Any] = {
    "clip_len": 2, "resize": (8, 8), "workers": 1, "batch_size": 4, "shuffle": True, "seed": 5,
}  # fmt: skip
CLASSES = 3
_COLLECTIVE_TIMEOUT_S = 120


def make_model() -> Any:
    """The same weights in every process (seeded), loss summed over the batch."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.layers.Input((2, 8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(CLASSES)]
    )
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
    model.compile(loss=loss, weighted_metrics=["sparse_categorical_accuracy"])
    return model


def inputs(batch: Any) -> tuple[Any, Any, Any]:
    """(x, y, w) of an h5feed batch: frames in [0, 1], label mod CLASSES, valid as weight."""
    import tensorflow as tf  # lazy: the test imports this module without starting TF

    x = tf.cast(batch["frames"], tf.float32) / 255.0
    y = tf.math.floormod(tf.cast(batch["label"], tf.int64), CLASSES)
    return x, y, tf.cast(batch["valid"], tf.float32)


def evaluate(strategy: Any, model: Any, dist: Any) -> dict[str, Any]:
    """One pass of a custom loop over ``dist``: each step's Σ w·loss and Σ w, combined across
    the workers with ``strategy.reduce(SUM)`` (a collective: a worker with a step more would
    wait here until the timeout), and this worker's valid sample ids and rows per step."""
    import tensorflow as tf

    @tf.function
    def step(batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        x, y, w = inputs(batch)
        # Keras leaves the loss of an empty batch unreduced (shape [0]): summed, it is 0.
        # (experimental_distribute_dataset splits a worker's batch among its replicas, so a
        # batch of one row gives one of them nothing.)
        loss = tf.reduce_sum(model.loss(y, model(x, training=False), sample_weight=w))
        return loss, tf.reduce_sum(w)

    total_loss = total_weight = 0.0
    samples: list[int] = []
    rows: list[int] = []
    for batch in dist:
        loss, weight = strategy.run(step, args=(batch,))
        total_loss += float(strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None))
        total_weight += float(strategy.reduce(tf.distribute.ReduceOp.SUM, weight, axis=None))
        valids = strategy.experimental_local_results(batch["valid"])
        ids = strategy.experimental_local_results(batch["sample"])
        for valid, sample in zip(valids, ids, strict=True):
            samples += [int(s) for s in sample.numpy()[valid.numpy()]]
            rows.append(len(sample))
    return {
        "sum_weighted_loss": total_loss,
        "sum_weights": total_weight,
        "samples": samples,
        "rows": rows,
    }


def main() -> None:
    import keras
    import tensorflow as tf

    data, out = sys.argv[1:3]
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=_COLLECTIVE_TIMEOUT_S)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    with strategy.scope():
        model = make_model()
    keys = ("frames", "label", "sample", "valid")
    result: dict[str, Any] = {"replicas": strategy.num_replicas_in_sync}
    # Each input pipeline its shard, per-replica batches of 2 (h5feed.distribute).
    per_pipeline = {k: v for k, v in CLIP.items() if k != "batch_size"}
    replicas = strategy.num_replicas_in_sync
    dist = h5feed.distribute(
        strategy, data, global_batch_size=2 * replicas, keys=keys, shard_remainder="pad",
        **per_pipeline,
    )  # fmt: skip
    result["from_function"] = evaluate(strategy, model, dist)
    # The shard TF_CONFIG gives dataset(), batches of 4 split among the replicas.
    ds = h5feed.dataset(data, keys=keys, shard_remainder="pad", **CLIP)
    result["distribute_dataset"] = evaluate(
        strategy, model, strategy.experimental_distribute_dataset(ds)
    )
    # The unsharded mean, here with NumPy batches (dataset() would take TF_CONFIG's shard).
    losses = []
    for batch in h5feed.batches(data, **CLIP):
        x, y, _w = inputs(batch)
        logits = model(x, training=False)
        per_row = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        losses += np.asarray(per_row, np.float64).tolist()
    result["unsharded_mean"] = float(np.mean(losses))
    result["unsharded_samples"] = len(losses)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
