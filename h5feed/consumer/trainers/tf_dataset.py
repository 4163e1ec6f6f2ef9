"""``h5feed.dataset()``: a feed's batches as a ``tf.data.Dataset`` (re-exported by
:mod:`h5feed.consumer.api`). TensorFlow is imported when it is called, never at import.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from h5feed.common.elements.batch_keys import BATCH_KEYS, POSITION_KEYS, VALID_KEY
from h5feed.consumer.feed import Feed, feed_config, feed_of
from h5feed.consumer.parameters import FeedKwargs, PathsLike
from h5feed.consumer.trainers.distribute import cluster_kwargs, without_auto_shard

if TYPE_CHECKING:
    import tensorflow as tf


def dataset(
    files: PathsLike | None = None,
    *,
    prefetch: int | None = -1,
    keys: Sequence[str] = BATCH_KEYS,
    resume: Any = None,
    **kwargs: Unpack[FeedKwargs],
) -> tf.data.Dataset:
    """A ``tf.data.Dataset`` of batches of video clips, decoded in worker processes.

    ``files``: a glob, a directory (its ``*.h5``/``*.hdf5``/``*.hdf``/``*.he5`` files,
    searched recursively) or a list of paths. The
    keyword arguments are :class:`h5feed.consumer.parameters.FeedKwargs`. Defaults (those of the
    dataclasses that hold them, as ``describe_parameters()`` lists them; a test checks these):

    * clip (``ClipSpec``): ``clip_len=16, stride=1, resize=None, crop=None,
      crop_mode="random", flip=False, short_video="loop", transform=None,
      transform_args=None, reduced_decode=False, max_frame_pixels=64000000``;
    * layout (``LayoutArgs``): ``layout="auto", frames_key="frames", label_key="label"``;
    * plan (``PlanOptions``, ``FeedOptions.plan``): ``batch_size=8, shuffle=True, seed=0,
      drop_remainder=False, shard=(0, 1), shard_remainder="drop", epochs=1,
      deterministic=True``;
    * processes (``ProcessOptions``): ``workers=2, max_inflight_batches=None,
      start_timeout_s=60, unit_timeout_s=120, max_restarts=3, max_unit_attempts=3,
      tune_malloc=True, shared_memory=True, max_open_files=128``;
    * network (``NetworkOptions``): ``listen=None, peer_timeout_s=5, join_grace_s=1.5,
      curve_key=None, curve_authorized=None, metrics_port=None,
      max_message_bytes=1073741824, insecure=False, fleet=None, fleet_key=None``;
    * record (``RecordOptions``): ``lineage=None`` (a path: one NDJSON line per row the
      trainer takes, see :mod:`h5feed.consumer.position.lineage`);
    * data, HDF5 files only (``DataOptions``): ``clips_per_video=1, clip_start="random",
      index_cache=True, data_root=None, on_error="raise", max_skipped=None,
      storage_options=None``;
    * your own code instead of files (``SourceConfig``): ``source=None, source_args=None,
      output_signature=None, ragged=False, steps_per_epoch=None, source_batched=False,
      shards_start_alike=False``.

    ``layout``: how the files store videos — ``"auto"`` (recognised per file), ``"groups"``,
    ``"frame_datasets"``, ``"raw"``, ``"flat"``, or an ``h5feed.layouts`` object with its
    names (see :mod:`h5feed.common.layouts`). ``transform="package.module:fn"``: called in
    the workers on each sample after the built-in steps, as ``fn(clip, rng,
    **transform_args)`` (see :mod:`h5feed.producer.worker.transform`); its output's shape and dtype
    become ``frames``'. With a transform or a ``source``, ``dataset()`` starts the first
    iteration at once and its first batch fixes the ``output_signature`` (so errors such as a
    bad import path are raised here); that iteration continues from that batch when the
    dataset is first iterated (see :mod:`h5feed.consumer.trainers.signature`).

    Each element is one whole batch, a dict: ``frames`` uint8 [B, clip_len, H, W, 3] RGB (H, W
    from ``crop``, else ``resize``, else the stored size), ``label`` int64 [B], ``file`` string
    [B] (the path as given or as the glob/directory resolved it), ``video`` string [B] (the
    video's group name), ``start`` int64 [B] (the clip's first frame). B is ``batch_size``
    except for an epoch's last batch, unless ``drop_remainder``.

    Semantics (see docs/semantics.md for the full statement):

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
    * ``shard=(i, n)``: this consumer gets the i-th of n disjoint, equal parts of every
      epoch. ``shard_remainder="drop"`` (default, for training): the last ``total % n``
      samples of the epoch's order are dropped; ``"pad"`` (for exact evaluation): every
      sample once across the shards, each shard brought to ``ceil(total / n)`` rows with
      padded rows (zeros, ``sample`` -1, ``valid`` False: use ``valid`` as
      ``sample_weight``), refused with ``drop_remainder=True``. Under a
      multi-worker ``TF_CONFIG`` the shard is the worker's, and a contradicting ``shard=``
      raises; tf.data's auto-sharding is off (see :mod:`h5feed.consumer.trainers.distribute`).
    * Errors in workers (bad file, bad frame, a raising transform) end the iteration with an
      error naming file, video and frame, raised by TensorFlow as ``tf.errors.UnknownError``
      whose message holds h5feed's error. A worker process that dies, vanishes
      (``peer_timeout_s``) or hangs (``unit_timeout_s``) is replaced or handed over, every
      sample still exactly once (docs/guarantees.md).

    ``source="package.module:factory"``: your own code in the workers instead of HDF5 files
    (``source_args``, ``output_signature``, ``ragged``, ``steps_per_epoch``,
    ``source_batched``: a generator of whole batches, split and batched again;
    ``shards_start_alike``: a generator whose workers may begin with the same elements, not
    refused as one that forgot to shard); see
    ``h5feed/consumer/sources/api.py`` and docs/data/your-code.md.

    ``listen`` on an address other hosts reach (not loopback or ``ipc://``) needs CURVE keys
    (``curve_key``, ``curve_authorized``), else ValueError, unless ``insecure=True``: then it
    warns (``h5feed.InsecureWarning``); see :mod:`h5feed.common.trust.exposure` and
    docs/deploy/security.md.

    ``fleet="tcp://HOST:PORT"`` (or a list of them), with ``listen="tcp://*:PORT"``: a shared
    fleet (``h5feed produce --listen``) serves this trainer: every replica the name resolves
    to is told this trainer's port every second and runs workers of its own for it, until
    the iteration ends (see :mod:`h5feed.consumer.processes.fleet_announcer`,
    docs/deploy/shared-fleet.md). Beyond
    this host, ``fleet_key`` (the fleet's public ``.key``) with ``curve_key`` and
    ``curve_authorized``, or ``insecure=True``.

    ``keys``: the keys of each element, default ``frames, label, file, video, start``; add
    any of ``sample``, ``epoch``, ``batch`` (int64 [B]: the global sample id, the epoch, the
    batch's index in its epoch) to see where each row comes from in the plan. They are opt-in
    because an extra key breaks a Keras model whose inputs are named by the dict's keys.
    (Not for ``source=``: a source's elements are the user's own trees.) ``valid`` (bool [B],
    False where a bad frame was skipped or a row is padding) is added by ``on_error="skip"``
    and by ``shard_remainder="pad"``, or when asked.

    Bad data (docs/data/bad-data.md): ``on_error="raise"`` ends the iteration at a bad frame
    (undecodable, or failing the CRC32 ``h5feed pack`` stores), naming file, video and
    frame; ``"skip"`` zero-fills that sample, marks it ``valid=False`` (usable as
    ``sample_weight``), counts it in ``stats()`` and ends the iteration only when an epoch
    skips more than ``max_skipped`` (None: 0.1% of its samples, rounded up). A file that
    cannot be read ends the iteration either way, naming host and file.

    ``prefetch``: batches tf.data prefetches after the generator (-1: ``tf.data.AUTOTUNE``,
    0/None: no prefetch). ``resume``: where to continue (a state, ``{"epoch": e, "batch":
    b}``, or an ``h5feed.BackupAndRestore`` backup directory): see :func:`h5feed.batches`.
    ``ds.close()`` stops the worker processes the dataset keeps across its iterations (else
    they stop when it is garbage collected, or at exit).

    Known length: when the index of the files is known before iteration (remembered from an
    earlier iteration over the same files, see :mod:`h5feed.consumer.hdf5.known_index`), the
    dataset carries its cardinality (batches per epoch x ``epochs``), so Keras shows the
    steps of each epoch. A dataset resumed inside an epoch (its first iteration is shorter)
    reports the full epoch's length to Keras, which ends that first epoch early, with its
    "Your input ran out of data" warning; see docs/trainer/resume.md.

    End the pipeline with
    ``.apply(tf.data.experimental.prefetch_to_device("/gpu:0"))`` to overlap host-to-GPU
    copies with training.
    """
    from h5feed.consumer.trainers import signature  # lazy: it imports TensorFlow when called

    keys = tuple(keys)
    optional = (*BATCH_KEYS[1:], *POSITION_KEYS, VALID_KEY)
    unknown = set(keys) - set(BATCH_KEYS) - set(optional)
    if unknown or len(set(keys)) != len(keys) or "frames" not in keys:
        raise ValueError(f"keys must name 'frames' and any of {optional}, once each; got {keys}")
    # Under a multi-worker TF_CONFIG: that worker's shard (a contradicting shard= raises).
    config = feed_config(files, cluster_kwargs(dict(kwargs), os.environ))
    keys = config.element_keys(keys)  # the config says (a source's refuses keys=)
    feed = feed_of(config, resume)
    spec, first = signature.feed_signature(feed, keys)  # may start the first iteration
    element = signature.element_maker(feed.config, spec, keys)
    pending = [first] if first is not None else []

    def generate() -> Iterator[Any]:
        if pending:  # the iteration that fixed the signature, from its first batch
            iteration = pending.pop()
            stream, taken = iteration.stream, iteration.batches()
        else:
            stream = feed.stream()
            taken = stream
        try:
            yield from signature.elements_of(taken, element)
        finally:
            stream.close()

    return feed_dataset(feed, generate, spec, prefetch)


def feed_dataset(
    feed: Feed, generate: Callable[[], Iterator[Any]], signature: Any, prefetch: int | None
) -> tf.data.Dataset:
    """``from_generator(generate, output_signature=signature)``, prefetched (-1: AUTOTUNE,
    0/None: none), carrying ``feed``'s ``stats``, ``metrics_port`` and ``close``."""
    import tensorflow as tf

    ds = tf.data.Dataset.from_generator(generate, output_signature=signature)
    if prefetch:
        ds = ds.prefetch(tf.data.AUTOTUNE if prefetch < 0 else prefetch)
    ds = without_auto_shard(ds)  # h5feed shards itself; tf.distribute must not shard again
    epochs = feed.config.options.plan.epochs
    if feed.length is not None and epochs is not None:
        cardinality = feed.length * epochs
        if feed.start.batch == 0:
            ds = ds.apply(tf.data.experimental.assert_cardinality(cardinality))
        else:  # a shorter first iteration: tf.data's own cardinality would be an error
            ds = _reporting_length(ds, cardinality)
    ds.feed = feed  # h5feed.BackupAndRestore reads the position and fingerprint here
    # ds.stats(): the pipeline's figures (see Feed.stats); datasets derived with .map() etc.
    # do not carry it, so keep a reference to this one.
    ds.stats = feed.stats
    ds.metrics_port = feed.metrics_port  # None without metrics_port / $H5FEED_METRICS_PORT
    # ds.close(): stop the workers kept across iterations now (else: when the dataset is
    # garbage collected, or at exit).
    ds.close = feed.close
    return ds


def _reporting_length(ds: tf.data.Dataset, cardinality: int) -> tf.data.Dataset:
    """``ds`` telling ``cardinality`` to whoever asks (Keras: its steps per epoch) without
    tf.data enforcing it, and datasets derived with ``.map()``/``.prefetch()`` the same: a
    resumed first iteration is shorter, which ``assert_cardinality`` refuses with an error,
    whereas Keras ends that epoch early and goes on (see docs/trainer/resume.md)."""
    import tensorflow as tf

    map_, prefetch_ = ds.map, ds.prefetch

    def cardinality_() -> tf.Tensor:
        return tf.constant(cardinality, tf.int64)

    # Patched on the object: tf.data has no transformation that states a length without
    # enforcing it. Keras reads the method ``cardinality()`` of the dataset ``fit`` is given,
    # which is most often derived from this one by ``.map()`` (to ``(x, y)``) and
    # ``.prefetch()``: those two carry the length on (tests/support/backup_trainer.py maps a resumed
    # dataset, tests/system/test_backup_restore.py pins Keras's 9 steps). Other derivations report
    # tf.data's own, unknown, length.
    ds.cardinality = cardinality_
    ds.map = lambda *a, **k: _reporting_length(map_(*a, **k), cardinality)
    ds.prefetch = lambda *a, **k: _reporting_length(prefetch_(*a, **k), cardinality)
    return ds
