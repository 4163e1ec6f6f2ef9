"""glibc's allocator told to keep the memory a worker frees, for the next frame.

Why: a worker decodes every frame into a new array (``cv2.imdecode`` allocates its result:
230 KB for a 320x240 frame), resizes it into another and frees both a moment later, for
every frame of every clip. With glibc's defaults, the free memory at the top of the heap is
given back to the kernel as soon as there is more of it than ``M_TRIM_THRESHOLD`` (a few
hundred KB, adjusted as it goes), and arrays above ``M_MMAP_THRESHOLD`` are mapped and
unmapped each time; the next frame's array then faults every page in again, and the kernel
zeroes each one. Measured on the 2-core machine, one process doing a worker's per-clip work
(the worker's own reader, ``decode_frame`` and ``ClipWriter``) on 1,200 16-frame 112x112
clips of 320x240 JPEGs: 279,500 page faults with glibc's defaults, 11,700 with the setting
below (most of them the interpreter's start), and 5.1 to 5.9 ms of CPU per clip against 4.8
to 5.4. The per-core limit of ``h5feed bench`` (plain code, glibc's defaults) took 4.8 to 5.0
with 118,300 faults. Raising ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` instead did the
same.

Guarantee: :func:`keep_freed_memory`, where the environment sets none of
:data:`OPERATOR_VARIABLES` (an operator's choice is kept, as it is), asks glibc to keep 16 MiB
of slack at the top of each heap (``M_TOP_PAD``), as the trainer does for its batches
(:func:`h5feed.common.system.memory.keep_freed_memory_mapped`, the one place that calls
``mallopt``); it returns whether that is in force. The cost: at most 16 MiB more resident
memory per worker. Where the C library is not glibc (musl, macOS) it does nothing and
returns False.
"""

from __future__ import annotations

from collections.abc import Mapping

from h5feed.common.system.memory import keep_freed_memory_mapped

__all__ = ["OPERATOR_VARIABLES", "keep_freed_memory"]

#: The environment's ways of setting glibc's allocator: any of them set, nothing is changed.
OPERATOR_VARIABLES = (
    "MALLOC_TOP_PAD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES",
)  # fmt: skip


def keep_freed_memory(environ: Mapping[str, str]) -> bool:
    """Keep freed memory for the next frame (see the module's guarantee)."""
    if any(name in environ for name in OPERATOR_VARIABLES):
        return False
    return keep_freed_memory_mapped()
