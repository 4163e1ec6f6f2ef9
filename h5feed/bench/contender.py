"""What every contender of ``h5feed bench`` is, and the list of them.

A contender is one way of getting batches of the workload (see :mod:`h5feed.bench.workload`)
into the trainer's process. Each lives in a module of its own, is built by
:func:`make_contender` inside a ``python -m h5feed.bench.run_one`` process, and is driven one
batch at a time by :mod:`h5feed.bench.measure`.
"""

from __future__ import annotations

import abc
import dataclasses
import gc
import importlib
import importlib.util
from collections.abc import Iterator, Sequence
from typing import Any

from h5feed.bench.workload import VideoRef


@dataclasses.dataclass(frozen=True, slots=True)
class Setup:
    """What a contender is built from (all of it plain values, sent as JSON to run_one)."""

    paths: tuple[str, ...]
    videos: tuple[VideoRef, ...]
    workers: int
    epochs: int | None  # None: forever
    seed: int
    cache_dir: str


class Contender(abc.ABC):
    """A source of batches. ``next_frames`` returns the next batch's frames (a NumPy array,
    tf.Tensor or torch.Tensor of [B, 16, 112, 112, 3] uint8) and raises StopIteration after
    ``setup.epochs`` epochs (never when ``epochs`` is None)."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup

    def start(self) -> None:  # noqa: B027 (optional hook)
        """Build the pipeline (never timed); the first batch is taken by the caller."""

    @abc.abstractmethod
    def next_frames(self) -> Any:
        """The frames of the next batch."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release processes, threads and files."""

    def clips_elsewhere(self) -> int:
        """Clips made so far that ``next_frames`` does not return (a contender whose
        processes all produce for themselves); a window counts how much this grew."""
        return 0


class DictIterator(Contender):
    """A contender whose :meth:`start` sets ``_iterator`` to an iterator of dict batches
    holding ``frames``; closing closes the iterator when it can be closed (Grain's
    ``mp_prefetch`` iterators and h5feed's streams stop their workers then), and collects."""

    _iterator: Iterator[Any] | None = None

    def next_frames(self) -> Any:
        if self._iterator is None:
            raise RuntimeError("next_frames() before start()")
        return next(self._iterator)["frames"]

    def close(self) -> None:
        iterator, self._iterator = self._iterator, None
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
        del iterator
        gc.collect()  # workers of an iterator nobody references stop when it is collected


@dataclasses.dataclass(frozen=True, slots=True)
class Info:
    """A contender as the runner sees it."""

    key: str  # short name, used on the command line and in the JSON
    label: str  # row label of the report
    target: str  # "module:Class" of the Contender
    requires: tuple[str, ...]  # importable packages it needs
    parallelism: str  # "workers" (takes --workers), "threads" (tf.data AUTOTUNE), "one"
    setup: str  # how it is set up, in one line (goes into the report)


#: N copies of the per-core limit at once (rows with 2 or more workers only): the machine's
#: own ceiling for N processes, next to which h5feed's N workers are shown. Not an alternative.
PARALLEL_PER_CORE = Info(
    "per-core-parallel",
    "per-core limit x N in parallel (N processes, no IPC)",
    "h5feed.bench.percore:ParallelPerCore",
    (),
    "workers",
    "N independent copies of the per-core limit at once, each on plans of its own seed: what "
    "this machine gives N processes that share nothing",
)

CONTENDERS: tuple[Info, ...] = (
    PARALLEL_PER_CORE,
    Info(
        "h5feed",
        "h5feed.dataset",
        "h5feed.bench.feed:H5Feed",
        ("tensorflow",),
        "workers",
        "h5feed.dataset(..., workers=N), every other option at its default; iter() + next()",
    ),
    Info(
        "h5feed-numpy",
        "h5feed.batches (NumPy)",
        "h5feed.bench.feed:H5FeedNumPy",
        (),
        "workers",
        "h5feed.batches(..., workers=N), every other option at its default: NumPy batches "
        "for trainers without TensorFlow (PyTorch, JAX)",
    ),
    Info(
        "tf-interleave",
        "tf.data from_generator per file + interleave",
        "h5feed.bench.tf_recipes:Interleave",
        ("tensorflow",),
        "one",
        "from_generator per file (cv2 inside) + interleave(), no num_parallel_calls; "
        "batch(8).prefetch(AUTOTUNE)",
    ),
    Info(
        "tf-interleave-parallel",
        "tf.data from_generator per file + parallel interleave",
        "h5feed.bench.tf_recipes:ParallelInterleave",
        ("tensorflow",),
        "threads",
        "as above with interleave(num_parallel_calls=AUTOTUNE, deterministic=False)",
    ),
    Info(
        "tf-map-py-function",
        "tf.data map(py_function)",
        "h5feed.bench.tf_recipes:MapPyFunction",
        ("tensorflow",),
        "threads",
        "from_generator of indices + map(py_function(cv2 clip), num_parallel_calls=AUTOTUNE, "
        "deterministic=False); batch(8).prefetch(AUTOTUNE)",
    ),
    Info(
        "tf-decode-jpeg",
        "tf.data py_function bytes + tf.io.decode_jpeg",
        "h5feed.bench.tf_decode:DecodeJpeg",
        ("tensorflow",),
        "threads",
        "map(py_function: read JPEG bytes) + map(decode_jpeg, tf.image.resize, random_crop, "
        "flip), each num_parallel_calls=AUTOTUNE, deterministic=False; batch + prefetch",
    ),
    Info(
        "keras",
        "keras PyDataset",
        "h5feed.bench.keras_pydataset:KerasPyDataset",
        ("tensorflow", "keras"),
        "workers",
        "PyDataset(workers=N, use_multiprocessing=True) of whole batches, read through the "
        "adapter model.fit uses (PyDatasetAdapter.get_tf_dataset)",
    ),
    Info(
        "torch",
        "PyTorch DataLoader",
        "h5feed.bench.torch_loader:TorchLoader",
        ("torch",),
        "workers",
        "DataLoader(map-style Dataset, batch_size=8, shuffle=True, num_workers=N, "
        "persistent_workers=True, pin_memory=False); h5py opened lazily in each worker",
    ),
    Info(
        "grain",
        "Grain",
        "h5feed.bench.grain_loader:GrainLoader",
        ("grain",),
        "workers",
        "MapDataset.source().shuffle().repeat().random_map(clip).batch(8).to_iter_dataset()"
        ".mp_prefetch(MultiprocessingOptions(num_workers=N))",
    ),
)

#: The per-core limit: the same per-clip work in one process, no IPC.
PER_CORE = Info(
    "per-core",
    "per-core limit (one process, no IPC)",
    "h5feed.bench.percore:PerCoreLimit",
    (),
    "one",
    "h5py slice read + cv2 decode/resize/crop/cvtColor/flip into a preallocated batch",
)

#: Alternatives that cannot run this workload at all, and why (listed in every report).
CANNOT_RUN: dict[str, str] = {
    "tf.data service": (
        "cannot run the workload: its workers execute a serialized dataset graph in separate "
        "servers, and py_function / from_generator (needed to read HDF5 and to decode with "
        "cv2) hold Python callables that do not serialize"
    ),
}


def by_key(keys: Sequence[str]) -> list[Info]:
    """The contenders named by ``keys`` (in the registry's order); ValueError on unknown."""
    known = {info.key: info for info in CONTENDERS}
    unknown = [key for key in keys if key not in known]
    if unknown:
        raise ValueError(f"unknown contenders {unknown}; known: {sorted(known)}")
    return [info for info in CONTENDERS if info.key in keys]


def missing_packages(info: Info) -> list[str]:
    """The packages ``info`` needs that are not installed."""
    return [name for name in info.requires if importlib.util.find_spec(name) is None]


def make_contender(target: str, setup: Setup) -> Contender:
    """Import ``module:Class`` and build the contender."""
    module_name, _, class_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    contender: Contender = cls(setup)
    return contender
