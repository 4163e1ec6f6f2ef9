"""h5feed under ``tf.distribute``: which shard a trainer process reads, and one helper.

h5feed shards itself (``shard=(i, n)``, see :mod:`h5feed.consumer.plan.epoch_plan`), so tf.data's
auto-sharding must not shard again: every dataset ``h5feed.dataset()`` returns has
``AutoShardPolicy.OFF``. Turning auto-sharding off alone would make every worker of a
``MultiWorkerMirroredStrategy`` read the whole epoch, so ``dataset()`` also reads the cluster
from ``TF_CONFIG`` (what that strategy reads). Guarantees:

1. Under a multi-worker ``TF_CONFIG`` (more than one ``chief``/``worker`` task, this task one
   of them), ``dataset()`` without ``shard=`` takes ``shard=(worker id, worker count)``, the
   worker id numbered as tf.distribute does (the chief first). A ``shard=`` that says
   otherwise raises ``ValueError`` naming both. Without such a ``TF_CONFIG`` nothing changes.
2. :func:`distribute` builds ``strategy.distribute_datasets_from_function`` with, for each
   input pipeline, ``dataset(..., shard=(ctx.input_pipeline_id, ctx.num_input_pipelines),
   batch_size=ctx.get_per_replica_batch_size(global_batch_size))``, nothing else.
3. With the plan's equal shards, every worker yields the same number of batches, so no
   all-reduce waits for a worker that has run out; across all replicas each epoch delivers
   every sample of the plan exactly once (the ``total % n`` samples of the drop rule aside).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tensorflow as tf

    from h5feed.consumer.parameters import PathsLike

_TRAINER_TASKS = ("chief", "worker")  # the tasks of MultiWorkerMirroredStrategy that train


def cluster_shard(environ: Mapping[str, str]) -> tuple[int, int] | None:
    """``(worker id, worker count)`` of this task in a multi-worker ``TF_CONFIG``, else None
    (no ``TF_CONFIG``, one trainer task, or this task is not a chief or worker)."""
    raw = environ.get("TF_CONFIG", "").strip()
    if not raw:
        return None
    try:
        config = json.loads(raw)
        cluster = config.get("cluster") or {}
        task = config.get("task") or {}
        chiefs, workers = len(cluster.get("chief", [])), len(cluster.get("worker", []))
        kind, index = task.get("type"), int(task.get("index", 0))
    except (ValueError, TypeError, AttributeError) as error:
        raise ValueError(f"h5feed: TF_CONFIG is not a valid cluster description: {error}") from None
    count = chiefs + workers
    if count <= 1 or kind not in _TRAINER_TASKS:
        return None
    worker_id = index if kind == "chief" else chiefs + index  # tf.distribute's numbering
    if not 0 <= worker_id < count:
        raise ValueError(f"h5feed: TF_CONFIG's task {kind}:{index} is not in its cluster")
    return worker_id, count


def cluster_kwargs(kwargs: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """``kwargs`` with the shard of a multi-worker ``TF_CONFIG`` (guarantee 1)."""
    cluster = cluster_shard(environ)
    if cluster is None:
        return kwargs
    given = kwargs.get("shard")
    if given is None:
        return {**kwargs, "shard": cluster}
    if tuple(given) != cluster:
        raise ValueError(
            f"h5feed: shard={tuple(given)} contradicts TF_CONFIG, which makes this process "
            f"worker {cluster[0]} of {cluster[1]} (shard={cluster}); leave shard= out under a "
            "multi-worker strategy"
        )
    return kwargs


def without_auto_shard(ds: tf.data.Dataset) -> tf.data.Dataset:
    """``ds`` with tf.data's auto-sharding off: h5feed has already sharded it."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(options)


def distribute(
    strategy: tf.distribute.Strategy,
    files: PathsLike | None = None,
    *,
    global_batch_size: int,
    map_fn: Callable[[Any], Any] | None = None,
    **kwargs: Any,
) -> Any:
    """``strategy.distribute_datasets_from_function`` over h5feed: each input pipeline reads
    its shard, ``shard=(ctx.input_pipeline_id, ctx.num_input_pipelines)``, in batches of
    ``ctx.get_per_replica_batch_size(global_batch_size)``; ``map_fn`` (e.g. ``lambda b:
    (b["frames"], b["label"])`` for Keras) is mapped over each pipeline's dataset. The other
    keyword arguments are :func:`h5feed.dataset`'s, less ``shard`` and ``batch_size``."""
    from h5feed.consumer.trainers.tf_dataset import dataset  # it imports this module

    taken = sorted({"shard", "batch_size"} & set(kwargs))
    if taken:
        raise TypeError(f"h5feed.distribute sets {', '.join(taken)} itself from the strategy")

    def pipeline(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = dataset(
            files,
            shard=(ctx.input_pipeline_id, ctx.num_input_pipelines),
            batch_size=ctx.get_per_replica_batch_size(global_batch_size),
            **kwargs,
        )
        return ds.map(map_fn) if map_fn is not None else ds

    return strategy.distribute_datasets_from_function(pipeline)
