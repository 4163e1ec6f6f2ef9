"""glibc's allocator told to keep freed memory for the next allocation of its size, in a
worker process (always) and in the trainer's (``tune_malloc``, default True).

Why: a worker decodes every frame into a new array (``cv2.imdecode`` allocates its result:
2.7 MB for a 1280x720 frame), resizes it into another and frees both a moment later; a
trainer receives a batch every few milliseconds, and a user's code in it makes arrays of its
own. With glibc's defaults, free memory at the top of the heap goes back to the kernel once
there is more of it than ``M_TRIM_THRESHOLD`` (twice the largest block freed so far, up to
64 MiB), and blocks above ``M_MMAP_THRESHOLD`` (128 KB at first, then the largest block
freed so far) are mapped and unmapped each time; the next one then faults every page in
again, and the kernel zeroes each one.

Measured on the 2-core machine, ``h5feed.batches`` with two local workers
(``tools/worker_faults.py``: 15 s windows after 6 s of warm-up, ``h5feed bench``'s workload of
16-frame clips resized to 128x171 and cropped to 112x112; two runs each):

- 1280x720 JPEGs: about 1,994 page faults per clip in the workers with glibc's defaults, 0.3
  to 0.5 with the thresholds below; the workers' CPU 35.7 and 34.9 -> 32.2 and 31.8 ms per
  clip (system time 4.5 -> 0.2 to 0.3 ms); 55.2 and 56.5 -> 61.2 and 61.9 clips/s.
- 320x240 JPEGs (``h5feed bench``'s data): 5 -> 3 faults per clip; the CPU and the rate the
  same within the runs' spread (about 4.6 ms per clip, 400 to 420 clips/s), and ``h5feed
  bench --dataset 2x30 --workers 2`` the same, before and after, in two interleaved pairs.
- The trainer keeps ``M_TOP_PAD`` (what ``tune_malloc`` set up to 0.2.0) and gains the mmap
  threshold. Alone, ``M_TOP_PAD`` turns glibc's dynamic threshold off (setting any of these
  parameters does), so every block over 128 KB was mapped anew: a user's own 2.7 MB array in
  the trainer faulted 822 pages in each time it was made (26 with glibc's defaults, 0 now).
  The workers' thresholds in the trainer instead made ``h5feed.dataset`` over TCP
  (``h5feed bench --ceiling --transports tcp``) 0.84 and 0.93 GB/s against 1.38 and 1.74,
  its CPU 0.63 to 0.70 ms per clip against 0.33 to 0.41; as an earlier round found.
- In a worker, ``M_TOP_PAD`` alone: 8,800 faults per 720p clip (48.5 ms, 41 clips/s).

Guarantee: :func:`keep_freed_memory`, once per process, where the environment sets none of
:data:`OPERATOR_VARIABLES` (an operator's choice is kept, as it is), sets ``M_MMAP_THRESHOLD``
to :data:`MMAP_THRESHOLD` (smaller blocks come from the heap) and, in a worker,
``M_TRIM_THRESHOLD`` to :data:`TRIM_THRESHOLD` (the heap keeps up to that much free memory at
its top), in a trainer ``M_TOP_PAD`` to :data:`TOP_PAD` (it keeps that much when it gives
the rest back); it returns whether both are in force. The cost: a process's resident memory
stays near its peak instead of shrinking, with at most :data:`TRIM_THRESHOLD` (worker) or
:data:`TOP_PAD` (trainer) of it free per heap. Where the C library is not glibc (musl, macOS)
it does nothing and returns False. This module is the one place h5feed calls ``mallopt``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading
from collections.abc import Mapping

__all__ = ["MMAP_THRESHOLD", "OPERATOR_VARIABLES", "TOP_PAD", "TRIM_THRESHOLD", "keep_freed_memory"]

#: Blocks at least this large are mapped on their own (glibc's own upper bound for its
#: dynamic threshold): a decoded 4K frame (25 MB) still comes from the heap.
MMAP_THRESHOLD = 32 << 20
#: The most free memory a worker's heap keeps at its top instead of giving it back.
TRIM_THRESHOLD = 64 << 20
#: The free memory a trainer's heap keeps at its top when it gives the rest back.
TOP_PAD = 16 << 20
#: The environment's ways of setting glibc's allocator: any of them set, nothing is changed.
OPERATOR_VARIABLES = (
    "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES",
)  # fmt: skip

# glibc's mallopt parameter numbers (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

_WORKER = {_M_MMAP_THRESHOLD: MMAP_THRESHOLD, _M_TRIM_THRESHOLD: TRIM_THRESHOLD}
_TRAINER = {_M_MMAP_THRESHOLD: MMAP_THRESHOLD, _M_TOP_PAD: TOP_PAD}

_lock = threading.Lock()
_kept: bool | None = None  # this process's answer, once asked


def keep_freed_memory(environ: Mapping[str, str], trainer: bool = False) -> bool:
    """Keep freed memory for reuse in this process (see the module's guarantee); ``trainer``:
    the trainer's settings."""
    global _kept
    with _lock:
        if _kept is None:
            settings = _TRAINER if trainer else _WORKER
            _kept = not any(name in environ for name in OPERATOR_VARIABLES) and _mallopt(settings)
        return _kept


def _mallopt(settings: dict[int, int]) -> bool:
    """glibc's ``mallopt(parameter, value)`` for each of ``settings``; whether every one is
    in force (False, with nothing set, where the C library is not glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        call = libc.mallopt
    except (OSError, AttributeError):
        return False  # musl has no mallopt
    # mallopt returns 1 on success, 0 for a value it refuses: each one is tried.
    return all([bool(call(parameter, value)) for parameter, value in settings.items()])
