"""glibc's allocator told to keep the memory a worker frees, for the next frame.

Why: a worker decodes every frame into a new array (``cv2.imdecode`` allocates its result:
230 KB for a 320x240 frame), resizes it into another and frees both a moment later, for
every frame of every clip. With glibc's defaults, the free memory at the top of the heap is
given back to the kernel as soon as there is more of it than ``M_TRIM_THRESHOLD`` (a few
hundred KB, adjusted as it goes), and arrays above ``M_MMAP_THRESHOLD`` are mapped and
unmapped each time; the next frame's array then faults every page in again, and the kernel
zeroes each one.

Measured on the 2-core machine, two local workers and ``h5feed.batches`` (15 s windows after
6 s of warm-up, two runs each; ``h5feed bench``'s workload: 16-frame clips resized to 128x171
and cropped to 112x112):

- 1280x720 JPEGs: 1,662 page faults per clip with glibc's defaults, 2.4 with the thresholds
  below; the workers' CPU 29.4 -> 26.2 ms per clip; 67 -> 75 clips/s.
- 320x240 JPEGs (``h5feed bench``'s data): 5 -> 3 faults per clip, the CPU and the rate the
  same within the runs' spread (4.6 ms per clip, about 415 clips/s).
- ``M_TOP_PAD`` instead, as the trainer sets (:func:`h5feed.common.system.memory.
  keep_freed_memory_mapped`), is no use here: setting any of these turns glibc's dynamic
  threshold off, so with the mmap threshold left at 128 KB every 2.7 MB frame was mapped
  anew: 8,800 faults per clip, 48.5 ms, 41 clips/s.

Guarantee: :func:`keep_freed_memory`, where the environment sets none of
:data:`OPERATOR_VARIABLES` (an operator's choice is kept, as it is), sets ``M_MMAP_THRESHOLD``
to :data:`MMAP_THRESHOLD` (smaller allocations come from the heap) and ``M_TRIM_THRESHOLD``
to :data:`TRIM_THRESHOLD` (the heap keeps up to that much free memory at its top); it returns
whether both are in force. The cost: a worker's resident memory stays near its peak between
clips instead of shrinking, with at most :data:`TRIM_THRESHOLD` of it free. Where the C
library is not glibc (musl, macOS) it does nothing and returns False. Worker processes only:
the trainer sets ``M_TOP_PAD`` for its batches (``tune_malloc``).
"""

from __future__ import annotations

from collections.abc import Mapping

from h5feed.common.system.memory import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, mallopt

__all__ = ["MMAP_THRESHOLD", "OPERATOR_VARIABLES", "TRIM_THRESHOLD", "keep_freed_memory"]

#: Allocations at least this large are mapped on their own (glibc's own upper bound for its
#: dynamic threshold): a decoded 4K frame (25 MB) still comes from the heap.
MMAP_THRESHOLD = 32 << 20
#: The most free memory the heap keeps at its top instead of giving it back.
TRIM_THRESHOLD = 64 << 20
#: The environment's ways of setting glibc's allocator: any of them set, nothing is changed.
OPERATOR_VARIABLES = (
    "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES",
)  # fmt: skip


def keep_freed_memory(environ: Mapping[str, str]) -> bool:
    """Keep freed memory for the next frame (see the module's guarantee)."""
    if any(name in environ for name in OPERATOR_VARIABLES):
        return False
    return mallopt({M_MMAP_THRESHOLD: MMAP_THRESHOLD, M_TRIM_THRESHOLD: TRIM_THRESHOLD})
