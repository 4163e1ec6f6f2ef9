"""``h5feed.BackupAndRestore``: Keras's ``BackupAndRestore`` that also resumes the data.

Keras's callback restores the weights mid-epoch but restarts the epoch's data at its first
batch, and a second kill in a resumed epoch saves epoch 0 (its counter starts at 0 in every
``fit``). This one saves the model as Keras does (``model.save_weights``, optimizer included)
and h5feed's position at the same moments, and restores both.

Guarantees:

1. The position is what the model trained on: Keras's step count (``on_train_batch_end``'s
   step, with ``steps_per_execution`` the last step of the execution, never more than the
   epoch has), not what tf.data prefetched. An epoch's end is the next epoch's batch 0.
2. A save is one commit: the weights go to the one of two files (``h5feed-a`` / ``h5feed-b``
   ``.weights.h5``) the current position does not name, then the position (epoch, batch,
   fingerprint, that weights file) is written atomically. A kill at any moment leaves a
   position and the weights it names, saved together: resuming trains each batch of the
   uninterrupted run exactly once from that checkpoint on.
3. Restoring sets Keras's initial epoch and its own epoch counter to the saved epoch, so a
   second kill inside a resumed epoch saves that epoch, not 0.
   The position also holds the epoch's length, so a dataset resumed where its index is not
   remembered (``index_cache=False``, a fresh machine) still tells Keras the full length;
   without it Keras would take the shorter resumed epoch's length for every later epoch and
   skip their last batches (tests/system/test_backup_restore.py pins both).
4. A backup written by :func:`h5feed.merge_states` (``into=``) from the backups of a job on
   another number of shards resumes the rest of its epoch on this dataset's shard
   (:mod:`h5feed.consumer.plan.rest`); saves inside that epoch keep the rest (format 2).
5. The dataset must be ``h5feed.dataset(..., resume=backup_dir)`` (``epochs=1``, the
   default: one Keras epoch is one plan epoch): a dataset that does not start where the
   backup says, or whose fingerprint differs, is a ResumeError at ``on_train_begin``.
6. ``save_on_sigterm=True``: a SIGTERM (a cluster's preemption) during ``fit`` saves at the
   next step boundary, in the training thread: the step in hand (or the epoch's end) is
   saved as every save is (guarantees 1, 2), then the signal is passed on to the handler
   that was there before, whose default ends the process by SIGTERM
   (:mod:`h5feed.consumer.trainers.preemption`). The restarted run trains from that step:
   nothing trained since the last periodic save is lost. The trainer's local workers keep
   serving until it goes (a SIGTERM sent to every process of the job does not stop them:
   ``h5feed/producer/worker/lifetime.py``), then die with it. No handler is installed without it.
"""

from __future__ import annotations

import os
from typing import Any

from h5feed.common.errors import ResumeError
from h5feed.consumer.feed import Feed
from h5feed.consumer.plan.epoch_plan import Cursor
from h5feed.consumer.position import resume
from h5feed.consumer.trainers.preemption import StopSignal

#: The two weights files a backup alternates between (guarantee 2).
WEIGHTS_FILES = ("h5feed-a.weights.h5", "h5feed-b.weights.h5")


def backup_and_restore(
    backup_dir: str,
    dataset: Any,
    save_freq: str | int = "epoch",
    double_checkpoint: bool = False,
    delete_checkpoint: bool = True,
    save_on_sigterm: bool = False,
) -> Any:
    """A ``keras.callbacks.BackupAndRestore`` (a subclass instance) for ``model.fit(dataset,
    ...)`` that also saves h5feed's position (see the module docstring). Same arguments as
    Keras's, plus ``dataset``: the one ``h5feed.dataset(..., resume=backup_dir)`` returned
    (not one derived from it with ``.map()``: that one lacks the feed). ``double_checkpoint``
    is accepted for compatibility: the previous weights file is always kept.
    ``save_on_sigterm``: a SIGTERM during ``fit`` saves at the next step boundary, then
    ends the process as the signal would have (guarantee 6; ``fit`` in the main thread)."""
    import keras

    found = getattr(dataset, "feed", None)
    if not isinstance(found, Feed):
        raise TypeError(
            "h5feed.BackupAndRestore: dataset= must be the dataset h5feed.dataset() returned"
        )
    feed: Feed = found
    if feed.config.options.plan.epochs != 1:
        raise ValueError(
            "h5feed.BackupAndRestore needs a dataset with epochs=1 (one Keras epoch is one "
            f"plan epoch), got epochs={feed.config.options.plan.epochs}"
        )

    class BackupAndRestore(keras.callbacks.BackupAndRestore):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(backup_dir, save_freq, double_checkpoint, delete_checkpoint)
            self._feed = feed
            self._restored: Cursor = feed.start
            self._epoch = 0
            self._offset = 0  # the plan batch this fit's epoch started at
            self._position = Cursor()
            self._weights: str | None = None  # the file the saved position names
            self._stop = StopSignal() if save_on_sigterm else None

        def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
            state = resume.read_position(self.backup_dir)
            if state is None:
                return
            point = resume.ResumePoint.from_state(state)
            resume.check_point(point, self._feed.fingerprint)
            feed = self._feed
            cursor = resume.first_cursor(point, feed.config.options.plan, feed.length)
            if cursor != self._feed.start:
                raise ResumeError(
                    f"the backup in {self.backup_dir} is at epoch {cursor.epoch}, batch "
                    f"{cursor.batch}, but the dataset starts at epoch {self._feed.start.epoch}, "
                    f"batch {self._feed.start.batch}: make it with h5feed.dataset(..., "
                    f"resume={self.backup_dir!r})"
                )
            weights = state.get("weights")
            if weights not in WEIGHTS_FILES:
                raise ResumeError(f"{self.backup_dir}: the position names no weights file")
            if not self.model.built:
                raise ValueError("BackupAndRestore needs the model built before fit()")
            if self.model.optimizer is not None and not self.model.optimizer.built:
                self.model.optimizer.build(self.model.trainable_variables)
            self.model.load_weights(os.path.join(self.backup_dir, weights))
            self._weights = weights
            self._restored = cursor
            self.model._initial_epoch = cursor.epoch
            self._current_epoch = cursor.epoch

        def _normal(self, cursor: Cursor) -> Cursor:
            length = self._feed.length
            if length is not None and cursor.batch >= length:
                return Cursor(cursor.epoch + 1, 0)
            return cursor

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            if self._stop is not None:
                self._stop.arm()  # idempotent; in fit's thread (ValueError if not the main)
            self._epoch = self._current_epoch = epoch  # Keras's counter, right after a restore
            self._offset = self._restored.batch if epoch == self._restored.epoch else 0
            self._position = Cursor(epoch, self._offset)

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            trained = self._offset + batch + 1
            length = self._feed.length
            if length is not None:  # the last execution of an epoch may be partial
                trained = min(trained, length)
            self._position = self._normal(Cursor(self._epoch, trained))
            super().on_train_batch_end(batch, logs)
            self._stop_if_asked()

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self._position = Cursor(epoch + 1, 0)
            super().on_epoch_end(epoch, logs)
            self._stop_if_asked()

        def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
            if self._stop is not None:
                self._stop.disarm()
            super().on_train_end(logs)

        def _stop_if_asked(self) -> None:
            """A SIGTERM arrived (guarantee 6): save the position trained, pass it on."""
            if self._stop is not None and self._stop.requested:
                self._save_model()
                self._stop.finish()

        def _save_model(self) -> None:
            os.makedirs(self.backup_dir, exist_ok=True)
            weights = WEIGHTS_FILES[1] if self._weights == WEIGHTS_FILES[0] else WEIGHTS_FILES[0]
            self.model.save_weights(os.path.join(self.backup_dir, weights), overwrite=True)
            feed = self._feed
            state = resume.ResumePoint(
                self._position, frozenset(), feed.fingerprint, feed.length, feed.rest,
                feed.samples,
            )  # fmt: skip
            resume.write_position(self.backup_dir, {**state.to_state(), "weights": weights})
            self._weights = weights

    return BackupAndRestore()
