"""What a service worker has done, counted in the worker and read by its supervisor.

A persistent worker of ``h5feed produce`` writes its counters as a small JSON file
(``--stats-file``, rewritten atomically at most every ``WRITE_EVERY_S``, at once after its
first unit (the supervisor restarts a worker that delivered at once:
``h5feed/producer/service/restarts.py``), and when it exits);
the supervisor reads the files when ``/metrics`` or ``/stats`` is scraped. Files, not a
socket or shared memory: nothing to set up, safe across processes (``os.replace`` makes each
file whole), no pickle, and a worker that dies leaves its last figures behind for the
supervisor to fold in (see ``h5feed/producer/service/metrics.py``), so counters never go back.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from typing import Any

from h5feed.common.protocol.messages import StorageReads
from h5feed.common.worker_counters import COUNTERS, read_counters

__all__ = ["COUNTERS", "WRITE_EVERY_S", "WorkerCounters", "read_counters"]

#: How often a worker rewrites its stats file (seconds): scrapes see figures this fresh.
WRITE_EVERY_S = 0.5


class WorkerCounters:
    """Counts units, clips, bytes, errors (refusals of code or paths also in ``refused``),
    jobs, busy seconds, jobs whose shared-memory slots were refused, HDF5 files reopened
    (closed to stay under ``max_open_files``) and what reads of object storage cost
    (requests, bytes, retries, refusals: each part's ``storage``); writes them to ``path``
    (None: counts only). Used by the worker's single thread."""

    def __init__(self, path: str | None, worker_id: str) -> None:
        self.path = path
        self.values: dict[str, Any] = dict.fromkeys(COUNTERS, 0)
        self.values.update(worker=worker_id, pid=os.getpid(), host=socket.gethostname())
        self._written = 0.0

    @property
    def worker(self) -> str:
        """The worker's name (its ``--worker-id``), as its log lines say it."""
        return str(self.values["worker"])

    def unit(self, clips: int, nbytes: int, seconds: float) -> None:
        values = self.values
        values["units"] += 1
        values["clips"] += clips
        values["bytes"] += nbytes
        values["busy_s"] += seconds
        if values["units"] == 1:  # the supervisor's restart rule reads it: say so at once
            self.write()

    def storage(self, reads: StorageReads | None) -> None:
        """What one part's reads of object storage cost (its DATA's ``storage``; None: no
        read of object storage)."""
        if reads is not None:
            values = self.values
            values["object_requests"] += reads.requests
            values["object_bytes"] += reads.bytes
            values["object_retries"] += reads.retries
            values["object_refused"] += reads.refused

    def add(self, key: str, amount: int = 1) -> None:
        self.values[key] += amount
        if key == "slots_refused":  # rare, and the trainer's stats() read it: at once
            self.write()

    def maybe_write(self) -> None:
        if time.monotonic() - self._written >= WRITE_EVERY_S:
            self.write()

    def write(self) -> None:
        """Replace the file at once (a reader sees the old or the new, whole)."""
        self._written = time.monotonic()
        if self.path is None:
            return
        self.values["updated"] = time.time()
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with contextlib.suppress(OSError):  # the supervisor's directory is gone: it is leaving
            with open(tmp, "w") as out:
                json.dump(self.values, out)
            os.replace(tmp, self.path)
