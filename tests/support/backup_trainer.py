"""A trainer run as a subprocess by tests/system/test_backup_restore.py (not a test module).

``python tests/support/backup_trainer.py CONFIG.json RUN``: trains a tiny model with ``model.fit``
on
``h5feed.dataset(..., resume=backup_dir)`` with ``h5feed.BackupAndRestore`` (unless
``"reference"``: then a plain, uninterrupted ``fit``). Its train step appends one line per
batch it trains to ``log`` (run, Keras's epoch, the batch's plan epoch and index, its sample
ids and a hash of its frames) before the weights are updated, and SIGKILLs this process at
the ``kill[RUN]``-th batch it trains, if that is given. A run that completes writes
``result-RUN.json``: where it started, Keras's steps, the "ran out of data" warnings, the
epochs it ran, and the final weights' hash.

For the preemption drill (tests/system/test_preemption.py, tools/preemption_drill.py):
``"save_on_sigterm": true`` makes the callback ``BackupAndRestore(..., save_on_sigterm=True)``
(the SIGTERM comes from outside, at a step the caller picks from the log), and
``"step_sleep_s"`` slows each step down, so an epoch lasts long enough to be signalled in.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import signal
import sys
import time
import warnings
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

import h5feed
from h5feed.consumer.position.resume import read_position

config: dict[str, Any] = json.loads(pathlib.Path(sys.argv[1]).read_text())
run = int(sys.argv[2])
kills: list[int | None] = config.get("kill", [])
kill_at = kills[run] if run < len(kills) else None
backup_dir: str = config["backup_dir"]
workers: int = config["workers"][min(run, len(config["workers"]) - 1)]
step_sleep_s: float = config.get("step_sleep_s", 0.0)

tf.config.experimental.enable_op_determinism()  # same batches, same weights: compared
keras.utils.set_random_seed(0)
log = os.open(config["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
trained = 0
keras_epoch = [-1]


def record(epoch: np.ndarray, batch: np.ndarray, sample: np.ndarray, frames: np.ndarray) -> Any:
    global trained
    line = {
        "run": run,
        "keras_epoch": keras_epoch[0],
        "epoch": int(epoch[0]),
        "batch": int(batch[0]),
        "samples": sample.tolist(),
        "frames": hashlib.sha1(np.ascontiguousarray(frames).tobytes()).hexdigest(),
    }
    os.write(log, (json.dumps(line) + "\n").encode())  # one write: whole lines only
    trained += 1
    time.sleep(step_sleep_s)
    if trained == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    return np.int64(0)


class Net(keras.Model):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.pool = keras.layers.GlobalAveragePooling3D()
        self.dense = keras.layers.Dense(4)

    def call(self, frames: Any) -> Any:
        return self.dense(self.pool(tf.cast(frames, "float32") / 255.0))

    def train_step(self, data: Any) -> Any:
        x, y = data
        mark = tf.numpy_function(
            record, [x["epoch"], x["batch"], x["sample"], x["frames"]], tf.int64, stateful=True
        )
        with tf.control_dependencies([mark]):
            frames = tf.identity(x["frames"])
        return super().train_step((frames, y))


class KerasEpoch(keras.callbacks.Callback):  # type: ignore[misc]
    def on_train_begin(self, logs: Any = None) -> None:
        self.steps = self.params.get("steps")

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        keras_epoch[0] = epoch


model = Net()
model(np.zeros((1, config["clip_len"], 16, 16, 3), np.uint8))  # built: BackupAndRestore
model.compile(
    keras.optimizers.Adam(0.01),
    keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    steps_per_execution=config["steps_per_execution"],
    jit_compile=False,  # the train step calls back into Python
)
reference = config.get("reference", False)
start = None if reference else read_position(backup_dir)
ds = h5feed.dataset(
    config["files"],
    keys=("frames", "label", "sample", "epoch", "batch"),
    resume=None if reference else backup_dir,
    workers=workers,
    index_cache=config.get("index_cache", True),
    **config["args"],
)
epoch_cb = KerasEpoch()
callbacks = [epoch_cb]
if not reference:
    callbacks.append(
        h5feed.BackupAndRestore(
            backup_dir, dataset=ds, save_freq=config["save_freq"],
            save_on_sigterm=config.get("save_on_sigterm", False),
        )
    )  # fmt: skip
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    history = model.fit(
        ds.map(lambda b: (b, b["label"])), epochs=config["epochs"], callbacks=callbacks, verbose=0
    )
weights = hashlib.sha1(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
result = {
    "start": None if start is None else [start["epoch"], start["batch"]],
    "steps": epoch_cb.steps,
    "ran_out": sum("ran out of data" in str(w.message) for w in caught),
    "epochs": len(history.history["loss"]),
    "weights": weights,
    "backup_left": os.path.exists(backup_dir),
}
with open(os.path.join(os.path.dirname(config["log"]), f"result-{run}.json"), "w") as out:
    json.dump(result, out)
