"""A worker's counters file (``--stats-file``), as its readers see it: the counters it holds
and a strict reader. The worker writes it (``h5feed/producer/worker/stats.py``); the producer
service's metrics and the trainer's local workers (``stats()["slots_refused"]``) read it."""

from __future__ import annotations

import json
from typing import Any, Final

#: The counters of a worker, in its file and in the metrics (all only ever grow).
COUNTERS: Final = (
    "units", "clips", "bytes", "errors", "busy_s", "jobs", "refused", "slots_refused",
    "files_reopened", "object_requests", "object_bytes", "object_retries", "object_refused",
    "reconnects",
)  # fmt: skip


def read_counters(path: str) -> dict[str, Any] | None:
    """A worker's last written figures, or None (not written yet, or unreadable)."""
    try:
        with open(path) as source:
            values = json.load(source)
    except (OSError, ValueError):
        return None
    if not isinstance(values, dict):
        return None
    for key in COUNTERS:
        if not isinstance(values.get(key), (int, float)):
            return None
    return values
