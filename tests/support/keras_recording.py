"""Which Keras epoch took each batch of an ``h5feed.keras_batches`` dataset: shared by the
scripts .venv-backends runs (tests/support/backends_trainer.py,
tests/support/backends_sources.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def recorded_epochs(ds: Any, record: Callable[[int, Any], None]) -> Any:
    """Wrap ``ds``'s stream so that ``record(keras_epoch, batch)`` sees every batch Keras
    takes, starting with the one taken when ``ds`` was built; return the Keras callback that
    follows the epoch and counts each epoch's steps (its ``steps`` list)."""
    import keras

    keras_epoch = [0]

    class Recorded:  # the stream, noting which Keras epoch took each batch
        def __init__(self, stream: Any) -> None:
            self.stream = stream

        def __next__(self) -> Any:
            batch = next(self.stream)
            record(keras_epoch[0], batch)
            return batch

        def close(self) -> None:
            self.stream.close()

    class Epochs(keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.steps: list[int] = []

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            keras_epoch[0] = epoch
            self.steps.append(0)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.steps[-1] += 1

    record(0, ds._pending[0])  # taken at construction: Keras epoch 0's first item
    ds.stream = Recorded(ds.stream)
    return Epochs()
