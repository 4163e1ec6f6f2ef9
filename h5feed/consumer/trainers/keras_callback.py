"""A Keras callback that logs, per epoch, the share of time tf.data waited for input."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from h5feed.common.system.logs import with_ids

_log = with_ids(logging.getLogger("h5feed.consumer"), "consumer")  # ids in every line


def input_wait_callback(stats: Callable[[], dict[str, Any]]) -> Any:
    """A ``keras.callbacks.Callback`` for ``model.fit(..., callbacks=[...])``.

    ``stats`` is the dataset's ``stats`` method (``h5feed.dataset(...).stats``). At the end of
    every epoch it adds ``input_wait_share`` (share of the epoch's time, after start-up, that
    tf.data waited for a batch h5feed had not made yet: whether the workers keep up) and
    ``input_clips_per_s`` to the epoch's logs, so both land in ``History`` and in the progress
    bar, and logs the share at INFO.
    Keras is imported here, not when h5feed is.
    """
    import keras

    class InputWait(keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self._start: tuple[str, float, float, int] | None = None

        def _figures(self) -> tuple[str, float, float, int]:
            s = stats()
            return (
                s.get("job", ""),
                s.get("wait_s", 0.0),
                s.get("elapsed_s", 0.0),
                s.get("clips", 0),
            )

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self._start = self._figures()

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            job, wait_s, elapsed_s, clips = self._figures()
            if self._start is not None and self._start[0] == job:  # one iteration spans epochs
                wait_s -= self._start[1]
                elapsed_s -= self._start[2]
                clips -= self._start[3]
            share = wait_s / elapsed_s if elapsed_s > 0 else 0.0
            if logs is not None:
                logs["input_wait_share"] = share
                logs["input_clips_per_s"] = clips / elapsed_s if elapsed_s > 0 else 0.0
            _log.info("epoch %d: tf.data waited %.0f%% of the time for a batch", epoch, 100 * share)

    return InputWait()
