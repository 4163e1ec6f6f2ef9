"""The keys of a batch (a dict of arrays, one row per sample): written once, read by whoever
builds a batch (:mod:`h5feed.consumer.core.assembly`, a padded source's rows:
:mod:`h5feed.consumer.sources.padding`) or reads one (the tf.data signature, the Keras and
lineage front ends).
"""

from __future__ import annotations

#: Keys of every tf.data element by default (NumPy batches also carry ``sample``, ``epoch``
#: and ``batch``: see ``keys=`` of ``h5feed.dataset``).
BATCH_KEYS = ("frames", "label", "file", "video", "start")
#: Keys a tf.data element may carry when asked (``keys=``): the defaults, and each row's
#: place in the plan (global sample id, epoch, batch index in the epoch), int64 [B].
POSITION_KEYS = ("sample", "epoch", "batch")
#: int64 [B]: each row's global sample id (-1 for a padded row); a padded source's rows
#: carry it too.
SAMPLE_KEY = POSITION_KEYS[0]
#: bool [B]: False where a bad frame was skipped (``on_error="skip"``; the row is zeros) or
#: the row is padding (``shard_remainder="pad"``). In every NumPy batch; in tf.data elements
#: with ``on_error="skip"``, ``shard_remainder="pad"`` or when asked.
VALID_KEY = "valid"
