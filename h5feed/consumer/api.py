"""The public entry points: ``h5feed.dataset()`` (tf.data: its own module,
:mod:`h5feed.consumer.trainers.tf_dataset`, a front end like the others) and
``h5feed.batches()`` (NumPy)."""

from __future__ import annotations

from typing import Any, Unpack

from h5feed.consumer.feed import Feed, open_feed
from h5feed.consumer.parameters import FeedKwargs, PathsLike
from h5feed.consumer.trainers.tf_dataset import dataset

__all__ = ["Feed", "PathsLike", "batches", "dataset"]


def batches(
    files: PathsLike | None = None, *, resume: Any = None, **kwargs: Unpack[FeedKwargs]
) -> Feed:
    """Batches of video clips as NumPy dicts, decoded by ``workers`` local processes.

    Same arguments and semantics as :func:`dataset`, without TensorFlow. Each batch is a dict:
    ``frames`` uint8 [B, clip_len, H, W, 3] RGB (with ``transform``: [B, *its shape] of its
    dtype), ``label`` int64 [B], ``file`` and ``video``
    object arrays of bytes [B], ``start`` int64 [B], plus ``sample`` (global sample id) and
    ``epoch`` and ``batch`` int64 [B] (the batch's index in its epoch). Arrays may be read-only
    views of the received message.

    ``source="package.module:factory"`` (with ``source_args``, ``ragged``,
    ``steps_per_epoch``) runs your own code in the workers instead: see
    ``h5feed/consumer/sources/api.py`` and docs/data/your-code.md.

    ``resume``: continue where an earlier run stopped: a stream's ``state()``, a bare
    ``{"epoch": e, "batch": b}`` (a custom loop's own count), or a backup directory of
    ``h5feed.BackupAndRestore``; see :mod:`h5feed.consumer.position.resume` and
    docs/trainer/resume.md.
    """
    return open_feed(files, resume=resume, **kwargs)
