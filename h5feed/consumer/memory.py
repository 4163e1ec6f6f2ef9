"""Memory helpers for the trainer side: aligned batch buffers and allocator tuning.

Why: a batch is ~5 MB that arrives every few milliseconds. Left alone, glibc returns freed
large blocks to the kernel and maps fresh pages for the next batch, so every batch costs ~1200
page faults (zeroing included) in the ZeroMQ receive thread and in each copy; and TensorFlow
copies a NumPy array again unless its data is 64-byte aligned.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import math
import sys
import threading

import numpy as np

from h5feed.common.logs import with_ids

_ALIGN_BYTES = 64  # EIGEN_MAX_ALIGN_BYTES on AVX-512 builds; what TF needs to share a buffer
_M_TOP_PAD = -2  # glibc's mallopt parameter number
_TOP_PAD_BYTES = 16 << 20

_log = with_ids(logging.getLogger("h5feed.consumer"), "consumer")  # ids in every line
_tuned = False
_tune_lock = threading.Lock()


def aligned_empty(
    shape: tuple[int, ...], dtype: np.dtype[np.generic] | type = np.uint8
) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + _ALIGN_BYTES, np.uint8)
    offset = (-raw.ctypes.data) % _ALIGN_BYTES
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


#: Arrays at least this large are copied to an aligned buffer before TensorFlow takes them
#: (:func:`for_tensorflow`); smaller ones are left to TensorFlow, whose copy costs little.
_ALIGN_FOR_TF_MIN_BYTES = 64 << 10


def is_aligned(array: np.ndarray) -> bool:
    """Whether ``array``'s data starts on a 64-byte boundary (TensorFlow shares it then)."""
    return array.ctypes.data % _ALIGN_BYTES == 0


def for_tensorflow(array: np.ndarray) -> np.ndarray:
    """``array`` itself when TensorFlow can share it (64-byte aligned, or small), else one
    aligned copy of it.

    Why: an array over a received ZeroMQ frame (a batch that came over the socket in one
    part) never starts on a 64-byte boundary (libzmq puts the data after a 40-byte header in
    one ``malloc``), so TensorFlow would copy it itself, at about half the speed of
    ``np.copyto`` into a buffer reused from the heap (``keep_freed_memory_mapped``)."""
    if array.nbytes < _ALIGN_FOR_TF_MIN_BYTES or is_aligned(array) or array.dtype.hasobject:
        return array
    out = aligned_empty(array.shape, array.dtype)
    np.copyto(out, array)
    return out


def keep_freed_memory_mapped() -> bool:
    """Ask glibc to keep 16 MiB of slack at the top of each heap (``M_TOP_PAD``), once per
    process, so that batch-sized blocks are reused instead of unmapped and faulted in again.

    Process-wide, costs at most 16 MiB per malloc arena, and is skipped where the C library is
    not glibc. Returns whether the setting is in force.
    """
    global _tuned
    with _tune_lock:
        if _tuned:
            return True
        if not sys.platform.startswith("linux"):
            return False
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            mallopt = libc.mallopt
        except (OSError, AttributeError):
            return False  # not glibc (musl has no mallopt): nothing to tune
        _tuned = bool(mallopt(_M_TOP_PAD, _TOP_PAD_BYTES))
        _log.debug("mallopt(M_TOP_PAD, %d): %s", _TOP_PAD_BYTES, _tuned)
        return _tuned
