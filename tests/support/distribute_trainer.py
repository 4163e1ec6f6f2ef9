"""A trainer process under tf.distribute, run by tests/system/test_distribute.py (its own process:
the
logical CPU devices and the multi-worker cluster must be set before TensorFlow starts).

``python tests/support/distribute_trainer.py mirrored|multiworker DATA_DIR OUT_JSON``: records, for
each
way of feeding the strategy, the (epoch, sample) of every row each replica received, and the
number of steps Keras ``fit`` ran per epoch; writes them as JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import tensorflow as tf

import h5feed

CLIP = {"clip_len": 2, "resize": (16, 16), "workers": 1, "seed": 3}
KEYS = ("frames", "label", "sample", "epoch")


def rows(strategy: tf.distribute.Strategy, dist: Any, epochs: int) -> list[list[int]]:
    """(replica, epoch, sample) of every row, iterating ``dist`` once per epoch; each step
    all-reduces across replicas (so a worker with a batch more would hang here)."""

    @tf.function
    def step(batch: dict[str, tf.Tensor]) -> tf.Tensor:
        count = tf.shape(batch["sample"])[0]
        ctx = tf.distribute.get_replica_context()
        return ctx.all_reduce("sum", count)  # type: ignore[union-attr]

    seen: list[list[int]] = []
    for _ in range(epochs):
        for batch in dist:
            strategy.run(step, args=(batch,))
            samples = strategy.experimental_local_results(batch["sample"])
            epochs_of = strategy.experimental_local_results(batch["epoch"])
            for replica, (ss, es) in enumerate(zip(samples, epochs_of, strict=True)):
                seen += [[replica, int(e), int(s)] for e, s in zip(es, ss, strict=True)]
    return seen


def fit_steps(strategy: tf.distribute.Strategy, ds: tf.data.Dataset) -> list[int]:
    """Keras 3 ``fit`` for 2 epochs under ``strategy``: the steps each epoch ran."""
    import keras

    class Steps(keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.per_epoch: list[int] = []
            self.count = 0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.count += 1

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.per_epoch.append(self.count)
            self.count = 0

    with strategy.scope():
        model = keras.Sequential(
            [keras.layers.Input((2, 16, 16, 3)), keras.layers.Flatten(), keras.layers.Dense(2)]
        )
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    steps = Steps()
    data = ds.map(lambda b: (tf.cast(b["frames"], tf.float32) / 255.0, b["label"] % 2))
    model.fit(data, epochs=2, callbacks=[steps], verbose=0)
    return steps.per_epoch


def main() -> None:
    mode, data, out = sys.argv[1:4]
    result: dict[str, Any] = {}
    if mode == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2
        )
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    else:  # multiworker: TF_CONFIG from the test, one replica per process
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    dist = h5feed.distribute(strategy, data, global_batch_size=4, keys=KEYS, **CLIP)
    result["from_function"] = rows(strategy, dist, epochs=2)
    ds = h5feed.dataset(data, batch_size=4, keys=KEYS, **CLIP)  # multiworker: TF_CONFIG's shard
    result["distribute_dataset"] = rows(
        strategy, strategy.experimental_distribute_dataset(ds), epochs=2
    )
    if mode == "mirrored":
        # Under MultiWorkerMirroredStrategy Keras 3 fit fails upstream ("Attempt to convert a
        # value (PerReplica...) to a Tensor", keras#20585): such trainers use a custom loop
        # with strategy.run, as rows() does.
        result["fit_steps"] = fit_steps(strategy, h5feed.dataset(data, batch_size=4, **CLIP))
    result["replicas"] = strategy.num_replicas_in_sync
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
