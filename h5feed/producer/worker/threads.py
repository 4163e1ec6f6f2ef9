"""One thread per numeric library in a worker process, unless the operator says otherwise.

A worker is one core's worth of work: h5feed runs as many workers as cores (``workers="auto"``)
and decodes with OpenCV single-threaded (``cv2.setNumThreads(1)``,
:mod:`h5feed.producer.worker.decode`). NumPy's OpenBLAS, OpenMP (a user's transform or
``source=`` on PyTorch: torch sizes its pool from ``OMP_NUM_THREADS``) and MKL would each
start a pool of one thread per core in every worker: N workers x N threads on N cores, and
OpenBLAS's pool alone costs about 0.07 s of CPU at each worker start (measured on the 2-core
machine: 0.35 -> 0.28 s of CPU for a worker's whole life in a small iteration). PyTorch's
``DataLoader`` sets its workers to one thread for the same reason.

Guarantee: :func:`one_thread_each` sets each of :data:`THREAD_VARIABLES` to ``"1"`` where the
environment does not set it already (an operator's or the trainer's own value is kept: the
trainer's environment is its local workers'); it must run before NumPy is imported, which
``python -m h5feed.producer.worker`` does first.
"""

from __future__ import annotations

from collections.abc import MutableMapping

__all__ = ["THREAD_VARIABLES", "one_thread_each"]

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_thread_each(environ: MutableMapping[str, str]) -> None:
    """Each of :data:`THREAD_VARIABLES` that ``environ`` lacks, set to ``"1"``."""
    for name in THREAD_VARIABLES:
        environ.setdefault(name, "1")
