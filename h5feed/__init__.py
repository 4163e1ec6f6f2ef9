"""h5feed: keeps a GPU trainer fed from HDF5 video datasets.

``h5feed.dataset(...)`` (needs the ``tf`` extra) returns a ``tf.data.Dataset`` of batches decoded
in worker processes; ``h5feed.batches(...)`` yields the same batches as NumPy dicts, without
TensorFlow. Importing ``h5feed`` imports neither TensorFlow nor the worker code.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from h5feed import layouts  # plain descriptions (no h5py): h5feed.layouts.Flat(...)
from h5feed.common.errors import (
    DataError,
    FileReadError,
    FrameError,
    H5FeedError,
    InsecureWarning,
    MalformedPartWarning,
    NondeterministicItemWarning,
    NoWorkersError,
    PoisonUnitError,
    ProtocolError,
    ResumeError,
    SourceError,
    TooManySkippedError,
    VersionMismatchError,
    WorkerDiedError,
    WorkerError,
    WorkerTimeoutError,
)
from h5feed.common.version import __version__

# Quiet in library use: an application (or the `h5feed` command) that configures logging sees
# h5feed's lines, each with its writer's ids; otherwise nothing, not even warnings.
logging.getLogger("h5feed").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from h5feed.consumer.api import batches, dataset
    from h5feed.consumer.merge import merge_states
    from h5feed.consumer.trainers.backup import backup_and_restore as BackupAndRestore
    from h5feed.consumer.trainers.distribute import distribute
    from h5feed.consumer.trainers.keras_callback import input_wait_callback
    from h5feed.consumer.trainers.pydataset import keras_batches
    from h5feed.consumer.trainers.torch_tensors import torch_batches

__all__ = [
    "BackupAndRestore",
    "DataError",
    "FileReadError",
    "FrameError",
    "H5FeedError",
    "InsecureWarning",
    "MalformedPartWarning",
    "NoWorkersError",
    "NondeterministicItemWarning",
    "PoisonUnitError",
    "ProtocolError",
    "ResumeError",
    "SourceError",
    "TooManySkippedError",
    "VersionMismatchError",
    "WorkerDiedError",
    "WorkerError",
    "WorkerTimeoutError",
    "__version__",
    "batches",
    "dataset",
    "distribute",
    "input_wait_callback",
    "keras_batches",
    "layouts",
    "merge_states",
    "torch_batches",
]


def __getattr__(name: str) -> Any:
    # Lazy: `import h5feed` in a producer must not pull in the consumer (or TensorFlow).
    if name in ("dataset", "batches"):
        from h5feed.consumer import api

        return getattr(api, name)
    if name == "BackupAndRestore":  # Keras is imported when one is made, not here
        from h5feed.consumer.trainers import backup

        return backup.backup_and_restore
    if name == "distribute":  # tf.distribute (TensorFlow when called)
        from h5feed.consumer.trainers import distribute

        return distribute.distribute
    if name == "keras_batches":  # a keras PyDataset: any Keras 3 backend, no TensorFlow
        from h5feed.consumer.trainers import pydataset

        return pydataset.keras_batches
    if name == "torch_batches":  # torch tensors over the batch memory
        from h5feed.consumer.trainers import torch_tensors

        return torch_tensors.torch_batches
    if name == "merge_states":  # the positions of n trainers as one (no Keras imported)
        from h5feed.consumer import merge

        return merge.merge_states
    if name == "input_wait_callback":
        from h5feed.consumer.trainers import keras_callback

        return keras_callback.input_wait_callback
    raise AttributeError(f"module 'h5feed' has no attribute {name!r}")
