"""User transforms: ``transform="package.module:fn"`` applied per sample in the workers.

Contract (also in docs/data/transforms.md)::

    fn(clip: np.ndarray, rng: np.random.Generator, **transform_args) -> np.ndarray

* ``clip`` is one sample after the built-in steps (decode, resize, crop, flip): uint8
  [clip_len, H, W, 3], RGB, C-contiguous. ``fn`` may modify it in place and return it.
* ``rng`` is ``np.random.default_rng(seed)`` where ``seed`` is the plan's per-sample seed,
  drawn from ``(seed, epoch, sample)``: the output does not depend on which worker ran it, and
  the same seed gives byte-identical batches with any number of workers (as long as ``fn``
  draws its randomness from ``rng`` only). Python's ``random``, ``np.random`` and torch's
  generator (if the worker imported torch) are also seeded before each call, from the same
  per-sample seed (:mod:`h5feed.producer.worker.seeding`; ``rng`` is not drawn from, so a transform
  using only ``rng`` gives what it gave before), so a transform drawing from them keeps the
  same guarantee.
* The result: a NumPy array (anything ``np.asarray`` turns into one) of one of the wire's
  dtypes (bool, (u)int8..64, float16/32/64) and of the *same shape and dtype for every
  sample*; it becomes the batch's ``frames`` [B, *shape]. A mismatch, a dtype that cannot go
  on the wire, or an exception raised by ``fn`` is a DataError naming the file, video and
  the function's path.
* ``fn`` is imported by its path inside each worker when the job starts (never pickled),
  if the worker's code policy allows it (``h5feed produce --allow-code``; local workers
  import what the trainer names);
  ``transform_args`` must be msgpack-able (it travels in the JOB message). An import failure
  is reported when the job starts, naming the path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from h5feed.common.errors import DataError, H5FeedError
from h5feed.common.protocol.wire import ALLOWED_DTYPES
from h5feed.common.user_code.import_paths import ImportPathError
from h5feed.producer.worker import import_path, seeding
from h5feed.producer.worker.code_policy import CodePolicy
from h5feed.producer.worker.seeding import Purpose


class TransformImportError(H5FeedError):
    """The transform's import path does not lead to a callable."""


def load_callable(path: str, policy: CodePolicy) -> Callable[..., Any]:
    """The function at ``"package.module:attr.sub"``; TransformImportError naming the path,
    CodeRefused when ``policy`` refuses it (nothing imported)."""
    try:
        return import_path.load_callable(path, policy)
    except ImportPathError as exc:
        raise TransformImportError(f"transform {path!r} {exc}") from exc


class Transform:
    """A loaded transform and its arguments (see the module docstring for the contract)."""

    def __init__(self, path: str, args: dict[str, Any] | None, policy: CodePolicy) -> None:
        self.path = path
        self.args = dict(args or {})
        self.fn = load_callable(path, policy)

    def __call__(self, clip: np.ndarray, seed: int, file: str, video: str) -> np.ndarray:
        """``fn(clip, rng, **args)`` as an array, checked; DataError naming file and video."""
        rng = np.random.default_rng(seed)
        seeding.seed_for(seed, Purpose.TRANSFORM)
        try:
            result = np.asarray(self.fn(clip, rng, **self.args))
        except Exception as exc:  # the user's code: report it with where it happened
            raise DataError(
                f"transform {self.path!r} raised {type(exc).__name__}: {exc}",
                file=file,
                video=video,
            ) from exc
        if result.dtype.str not in ALLOWED_DTYPES:
            raise DataError(
                f"transform {self.path!r} returned dtype {result.dtype}, which cannot go on "
                "the wire; return bool, (u)int8..64 or float16/32/64",
                file=file,
                video=video,
            )
        return result

    def check_like(self, result: np.ndarray, first: np.ndarray, file: str, video: str) -> None:
        """Raise DataError unless ``result`` has the shape and dtype of ``first``."""
        if result.shape != first.shape or result.dtype != first.dtype:
            raise DataError(
                f"transform {self.path!r} returned {result.dtype} {list(result.shape)} but "
                f"{first.dtype} {list(first.shape)} for an earlier sample; it must return "
                "one shape and dtype for every sample",
                file=file,
                video=video,
            )
