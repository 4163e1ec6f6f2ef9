"""Padded rows of a map source (``shard_remainder="pad"``: h5feed.consumer.plan.epoch_plan
guarantee 3).

A padded item (:data:`~h5feed.consumer.plan.epoch_plan.PAD_SAMPLE` in the epoch's order) is never
sent to a
worker. The batch it falls in is made of the workers' rows for its real items, then one zero
row per padded item, and every batch of the feed gets two more keys: ``sample`` (int64 [B], the
item index, -1 where padded) and ``valid`` (bool [B], False where padded).

Guarantees:

1. A padded row is zeros in every field: numbers 0, strings empty, a field of varying size of
   length 0 (0 in ``<key>_length``, nothing in a ragged row).
2. The keys are added only to elements that are dicts without ``sample`` or ``valid``: any
   other element tree is refused with the reason (:func:`pad_refusal`) at the handshake,
   before any unit is sent.
3. Pure functions: nothing counted, nothing logged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from h5feed.common.elements.batch_keys import SAMPLE_KEY, VALID_KEY
from h5feed.common.elements.values import ElementSpec, Field
from h5feed.consumer.plan.epoch_plan import PAD_SAMPLE


def pad_refusal(spec: ElementSpec) -> str | None:
    """Why a source of elements of ``spec`` cannot carry ``sample`` and ``valid`` (guarantee
    2), in words; None where it can."""
    if not (isinstance(spec.tree, list) and spec.tree and spec.tree[0] == "dict"):
        return (
            "its elements are not dicts, so they cannot carry the keys 'sample' and 'valid' "
            "that tell the padded rows apart: yield dicts"
        )
    keys = {entry[0] for entry in spec.tree[1]}
    taken = sorted(keys & {SAMPLE_KEY, VALID_KEY})
    if taken:
        return f"its elements already have {taken}, the keys pad adds: rename them"
    return None


def padded_fields(spec: ElementSpec, fields: list[Field] | None, padding: int) -> list[Field]:
    """``fields`` (the workers' rows; None: there are none) with ``padding`` zero rows after
    them (guarantee 1)."""
    out = []
    for i, leaf in enumerate(spec.leaves):
        have = None if fields is None else fields[i]
        if leaf.is_string:
            zeros = np.empty(padding, dtype=object)
            zeros[:] = [b""] * padding
            values = zeros if have is None else np.concatenate([have.values, zeros])
            out.append(Field(values, None))
            continue
        shape = [d or 0 for d in leaf.shape] if have is None else list(have.values.shape[1:])
        zeros = np.zeros((padding, *shape), np.dtype(leaf.dtype))
        values = zeros if have is None else np.concatenate([have.values, zeros])
        lengths = None
        if leaf.variable_axes:
            k = len(leaf.variable_axes)
            no_lengths = np.zeros((padding,) if k == 1 else (padding, k), np.int64)
            lengths = (
                no_lengths
                if have is None or have.lengths is None
                else np.concatenate([have.lengths, no_lengths])
            )
        out.append(Field(values, lengths))
    return out


def with_positions(element: Any, items: list[int]) -> Any:
    """``element`` (a dict: guarantee 2) with ``sample`` = ``items`` and ``valid``."""
    samples = np.asarray(items, np.int64)
    return {**element, SAMPLE_KEY: samples, VALID_KEY: samples != PAD_SAMPLE}
