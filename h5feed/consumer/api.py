"""The public entry points: ``h5feed.dataset()`` (tf.data) and ``h5feed.batches()`` (NumPy)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from h5feed.common.config import ClipSpec
from h5feed.consumer.options import FeedConfig, FeedOptions, default_cache_dir, resolve_files
from h5feed.consumer.stream import BATCH_KEYS, BatchStream

if TYPE_CHECKING:
    import tensorflow as tf

PathsLike = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


class Feed:
    """A re-iterable source of batches: every ``iter()`` starts workers and runs ``epochs``
    epochs, continuing the epoch count of the previous iteration (so three iterations of a
    one-epoch feed see epochs 0, 1 and 2: three different plans). Thread-safe to iterate from
    several threads, each iteration with its own workers."""

    def __init__(self, config: FeedConfig) -> None:
        self.config = config
        self._next_epoch = 0
        self._lock = threading.Lock()

    @property
    def next_epoch(self) -> int:
        return self._next_epoch

    def stream(self) -> BatchStream:
        """Start the next iteration: takes ``epochs`` epoch numbers at once, so an iteration
        abandoned midway does not make the next one repeat its epochs."""
        epochs = self.config.options.epochs
        with self._lock:
            first = self._next_epoch
            self._next_epoch = first + epochs if epochs is not None else first
        return BatchStream(self.config, first, epochs)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self.stream()


def _make_config(files: PathsLike, kwargs: dict[str, Any]) -> FeedConfig:
    clip_names = {
        "clip_len", "stride", "resize", "crop", "crop_mode", "flip", "short_video",
        "frames_key", "label_key",
    }  # fmt: skip
    clip = ClipSpec(**{k: v for k, v in kwargs.items() if k in clip_names})
    rest = {k: v for k, v in kwargs.items() if k not in clip_names}
    index_cache = rest.pop("index_cache", True)
    rest["index_cache"] = (
        default_cache_dir()
        if index_cache is True
        else (None if not index_cache else str(index_cache))
    )
    return FeedConfig(tuple(resolve_files(files)), clip, FeedOptions(**rest))


def batches(
    files: PathsLike,
    *,
    clip_len: int = 16,
    stride: int = 1,
    resize: tuple[int, int] | None = None,
    crop: tuple[int, int] | None = None,
    crop_mode: str = "random",
    flip: bool = False,
    clip_start: str = "random",
    clips_per_video: int = 1,
    short_video: str = "loop",
    batch_size: int = 8,
    shuffle: bool = True,
    seed: int = 0,
    epochs: int | None = 1,
    drop_remainder: bool = False,
    deterministic: bool = True,
    shard: tuple[int, int] = (0, 1),
    workers: int = 2,
    max_inflight_batches: int | None = None,
    start_timeout_s: float = 60.0,
    unit_timeout_s: float = 120.0,
    frames_key: str = "frames",
    label_key: str | None = "label",
    index_cache: bool | str = True,
) -> Feed:
    """Batches of video clips as NumPy dicts, decoded by ``workers`` local processes.

    Same arguments and semantics as :func:`dataset`, without TensorFlow. Each batch is a dict:
    ``frames`` uint8 [B, clip_len, H, W, 3] RGB, ``label`` int64 [B], ``file`` and ``video``
    object arrays of bytes [B], ``start`` int64 [B], plus ``sample`` (global sample id) and
    ``epoch`` int64 [B]. Arrays may be read-only views of the received message.
    """
    return Feed(_make_config(files, dict(locals_without_files(locals()))))


def locals_without_files(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k != "files"}


def dataset(
    files: PathsLike,
    *,
    clip_len: int = 16,
    stride: int = 1,
    resize: tuple[int, int] | None = None,
    crop: tuple[int, int] | None = None,
    crop_mode: str = "random",
    flip: bool = False,
    clip_start: str = "random",
    clips_per_video: int = 1,
    short_video: str = "loop",
    batch_size: int = 8,
    shuffle: bool = True,
    seed: int = 0,
    epochs: int | None = 1,
    drop_remainder: bool = False,
    deterministic: bool = True,
    shard: tuple[int, int] = (0, 1),
    workers: int = 2,
    max_inflight_batches: int | None = None,
    start_timeout_s: float = 60.0,
    unit_timeout_s: float = 120.0,
    frames_key: str = "frames",
    label_key: str | None = "label",
    index_cache: bool | str = True,
    prefetch: int | None = -1,
) -> tf.data.Dataset:
    """A ``tf.data.Dataset`` of batches of video clips, decoded in worker processes.

    Each element is one whole batch, a dict: ``frames`` uint8 [B, clip_len, H, W, 3] RGB (H, W
    from ``crop``, else ``resize``, else the stored size), ``label`` int64 [B], ``file`` string
    [B] (the path as given or as the glob/directory resolved it), ``video`` string [B] (the
    video's group name), ``start`` int64 [B] (the clip's first frame). B is ``batch_size``
    except for an epoch's last batch, unless ``drop_remainder``.

    Semantics (see README "Semantics" for the full statement):

    * ``epochs=1``: every video of every file yields ``clips_per_video`` clips per epoch, none
      lost, none repeated; ``epochs=None`` repeats forever. Each ``iter()`` runs ``epochs``
      epochs and continues the epoch count of the previous iteration.
    * ``shuffle=True``: one permutation of all samples per epoch, across files; ``False``: file
      order, then video order. Same ``seed``: same batches, clips and augmentation whatever
      ``workers`` is. ``deterministic=False`` yields batches as they complete.
    * A clip is ``clip_len`` frames ``stride`` apart; ``clip_start`` places it ("random",
      "center", "first"); a video shorter than a clip loops (``short_video="loop"``) or repeats
      its last frame (``"repeat_last"``).
    * Frames are resized to ``resize`` (height, width) bilinearly, cropped to ``crop`` (at a
      random place, or centred with ``crop_mode="center"``) and, with ``flip``, mirrored
      horizontally with probability 1/2.
    * ``shard=(i, n)``: this consumer gets the i-th of n disjoint parts of every epoch.
    * Failures in workers (bad file, bad frame, a worker that dies or hangs beyond
      ``unit_timeout_s``) end the iteration with an error naming file, video and frame, raised
      by TensorFlow as ``tf.errors.UnknownError`` whose message holds h5feed's error.

    ``prefetch``: batches tf.data prefetches after the generator (-1: ``tf.data.AUTOTUNE``,
    0/None: no prefetch). Put ``.prefetch_to_device``/``.apply(tf.data.experimental.
    prefetch_to_device("/gpu:0"))`` after it to overlap host-to-GPU copies with training.
    """
    import tensorflow as tf  # lazy: only the trainer side needs TensorFlow

    values = locals_without_files(locals())
    values.pop("tf")
    prefetch_n = values.pop("prefetch")
    feed = Feed(_make_config(files, values))
    clip = feed.config.clip
    height, width = clip.frame_shape
    rows = batch_size if drop_remainder else None
    signature = {
        "frames": tf.TensorSpec((rows, clip.clip_len, height, width, 3), tf.uint8),
        "label": tf.TensorSpec((rows,), tf.int64),
        "file": tf.TensorSpec((rows,), tf.string),
        "video": tf.TensorSpec((rows,), tf.string),
        "start": tf.TensorSpec((rows,), tf.int64),
    }

    def generate() -> Iterator[dict[str, np.ndarray]]:
        stream = feed.stream()
        try:
            for batch in stream:
                yield {key: batch[key] for key in BATCH_KEYS}
        finally:
            stream.close()

    ds = tf.data.Dataset.from_generator(generate, output_signature=signature)
    if prefetch_n:
        ds = ds.prefetch(tf.data.AUTOTUNE if prefetch_n < 0 else prefetch_n)
    return ds
