"""h5feed: keeps a GPU trainer fed from HDF5 video datasets.

``h5feed.dataset(...)`` (needs the ``tf`` extra) returns a ``tf.data.Dataset`` of batches decoded
in worker processes; ``h5feed.batches(...)`` yields the same batches as NumPy dicts, without
TensorFlow: a :class:`Feed`, whose iteration is a :class:`BatchStream`. Importing ``h5feed``
imports neither TensorFlow nor the worker code.
"""

from __future__ import annotations

import importlib
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
    from h5feed.common.elements.batches import RaggedArray
    from h5feed.consumer.api import batches, dataset
    from h5feed.consumer.feed import Feed
    from h5feed.consumer.plan.epoch_plan import Cursor
    from h5feed.consumer.stream import BatchStream
    from h5feed.consumer.trainers.backup import backup_and_restore as BackupAndRestore
    from h5feed.consumer.trainers.distribute import distribute
    from h5feed.consumer.trainers.keras_callback import input_wait_callback
    from h5feed.consumer.trainers.merged_backup import merge_states
    from h5feed.consumer.trainers.pydataset import keras_batches
    from h5feed.consumer.trainers.torch_tensors import torch_batches

__all__ = [
    "BackupAndRestore",
    "BatchStream",
    "Cursor",
    "DataError",
    "Feed",
    "FileReadError",
    "FrameError",
    "H5FeedError",
    "InsecureWarning",
    "MalformedPartWarning",
    "NoWorkersError",
    "NondeterministicItemWarning",
    "PoisonUnitError",
    "ProtocolError",
    "RaggedArray",
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

#: The lazy names: public name -> (module, attribute). Lazy because `import h5feed` in a
#: producer must not pull in the consumer (or TensorFlow, Keras, torch: each is imported by
#: its module when used, not here).
_LAZY = {
    "dataset": ("h5feed.consumer.api", "dataset"),
    "batches": ("h5feed.consumer.api", "batches"),
    "Feed": ("h5feed.consumer.feed", "Feed"),  # what batches() returns
    "BatchStream": ("h5feed.consumer.stream", "BatchStream"),  # what iterating a Feed gives
    "Cursor": (
        "h5feed.consumer.plan.epoch_plan",
        "Cursor",
    ),  # a stream's position: BatchStream.cursor
    "RaggedArray": ("h5feed.common.elements.batches", "RaggedArray"),  # ragged= in NumPy
    "BackupAndRestore": ("h5feed.consumer.trainers.backup", "backup_and_restore"),
    "distribute": ("h5feed.consumer.trainers.distribute", "distribute"),  # tf.distribute
    "keras_batches": ("h5feed.consumer.trainers.pydataset", "keras_batches"),  # any backend
    "torch_batches": ("h5feed.consumer.trainers.torch_tensors", "torch_batches"),
    "merge_states": ("h5feed.consumer.trainers.merged_backup", "merge_states"),  # no Keras imported
    "input_wait_callback": ("h5feed.consumer.trainers.keras_callback", "input_wait_callback"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'h5feed' has no attribute {name!r}")
