"""A per-clip transform whose cost is a sleep, for ``h5feed bench balance``
(:mod:`h5feed.bench.balance`): ``transform="h5feed.bench.sleepy:sleep_per_clip"``.

A sleeping worker costs no core, so 15 of them fit on 2 cores and the balance of the
consumer's scheduler shows as it would on a 15-core machine. ``slow``: the name of one worker
(its ``--worker-id``, read from this process's command line) that sleeps
``factor`` times as long: a worker at half speed with the default 2. Local workers are named
``PREFIX-0``, ``PREFIX-1``, ... with a prefix drawn per pool, so ``slow`` is matched as the
end of the name: ``slow="-0"`` is the first worker.
"""

from __future__ import annotations

import sys
import time

import numpy as np


def worker_id() -> str | None:
    """This process's ``--worker-id`` (None outside a worker)."""
    argv = sys.argv
    return argv[argv.index("--worker-id") + 1] if "--worker-id" in argv[:-1] else None


def sleep_per_clip(
    clip: np.ndarray,
    rng: np.random.Generator,
    ms: float = 20.0,
    slow: str | None = None,
    factor: float = 2.0,
) -> np.ndarray:
    """Sleep ``ms`` (``factor`` x ``ms`` in the worker whose name ends with ``slow``), then
    return ``clip`` as it is."""
    name = worker_id() or ""
    time.sleep(ms / 1000.0 * (factor if slow and name.endswith(slow) else 1.0))
    return clip
