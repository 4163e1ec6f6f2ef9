"""Whether a DATA part of an HDF5 unit may be taken: the checks a part passes before it is
counted, copied or batched (a part comes from a peer: across the trust boundary).

Guarantees:

1. A part is expected (:func:`is_expected`) only from the peer its unit was issued to, while
   that unit is in flight, and for that unit's very samples: a re-sent unit's original, a
   duplicate, a forged or stale unit id is not (the dispatcher drops and counts it: exactly
   once holds).
2. A part's frames are well formed (:func:`bad_frames` is False) only as one row per position
   asked: uint8 [rows, clip_len, H, W, 3] without a transform (H and W are checked against
   the batch when it is assembled); with a transform, the rows only (the transform decides
   the rest, checked the same way).
3. Pure functions: no counters, no logs, nothing changed.
"""

from __future__ import annotations

import numpy as np

from h5feed.common.config import ClipSpec
from h5feed.common.protocol import messages
from h5feed.consumer.core.assembly import BatchAssembler
from h5feed.consumer.core.ledger import Peer, Unit
from h5feed.consumer.hdf5.units import Work


def is_expected(
    unit: Unit[Work], peer: Peer, data: messages.Data, assembler: BatchAssembler
) -> bool:
    """Whether ``data`` from ``peer`` answers ``unit`` (the unit in flight with its id): sent
    to ``peer``, for the samples at the unit's positions of its batch."""
    if unit.peer is not peer:
        return False
    samples: list[int] = assembler.planned(unit.seq).samples[unit.work[0]].tolist()
    return list(data.samples) == samples


def bad_frames(frames: np.ndarray | None, rows: int, clip: ClipSpec) -> bool:
    """Whether a part's ``frames`` are not uint8 [rows, clip_len, H, W, 3] (see guarantee 2)."""
    return (
        frames is None
        or frames.ndim < 1
        or frames.shape[0] != rows
        or (  # a transform decides the rest of the shape and the dtype
            clip.transform is None
            and (
                frames.dtype != np.uint8
                or frames.ndim != 5
                or frames.shape[1] != clip.clip_len
                or frames.shape[4] != 3
            )
        )
    )
