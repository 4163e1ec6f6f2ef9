"""What the loop counts: the iteration's named counters (:class:`Counters`) and the rate
meters of what each peer delivered and the trainer took (:class:`RateMeter`).

The core's own: the loop, the session, recovery and the schedulers write them; ``stats()``
(:mod:`h5feed.consumer.telemetry.stats`) reads them. Here, not in telemetry/, so that the
core imports nothing above it.

Everything here is cheap and thread-safe: the loop thread and the trainer's thread record
events, any thread may read a snapshot at any time.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Any

from h5feed.common.protocol.message_records import StorageReads

#: Seconds of history behind the "recent" rates.
RECENT_WINDOW_S = 10.0


@dataclasses.dataclass(slots=True)
class Counters:
    """What an iteration counted, one named field per counter (all only ever grow).

    Slotted: a misspelt counter raises AttributeError instead of silently starting a new
    one. Written by the loop thread only (session, scheduler, recovery and loop all run on
    it); ``stats()`` reads the ints from any thread (a read of an int is atomic)."""

    #: Parts whose rows came over the socket because their worker could not map the slot.
    parts_copied_into_slots: int = 0
    #: Messages or parts that fit no question, dropped (a local worker's raise instead).
    malformed_messages: int = 0
    #: Parts of a unit the peer does not hold (duplicates, stale jobs), dropped.
    dropped_parts: int = 0
    #: Units re-sent after their worker was lost: ``units_handed_back + units_remade``.
    reassigned_units: int = 0
    #: Units a worker gave back unmade when it left (its BYE: asked to stop, it sent the unit
    #: in hand and handed these back), sent to others: made once.
    units_handed_back: int = 0
    #: Units sent again because their worker was lost without handing them back (it exited,
    #: was killed, vanished, got stuck, restarted or was refused): it may have made some of
    #: them, so these may have been made twice (each delivered once).
    units_remade: int = 0
    #: Workers lost (exited, killed, vanished, stuck, left).
    peers_lost: int = 0
    #: Local processes started in place of dead ones.
    workers_replaced: int = 0
    #: Workers that joined during the iteration.
    peers_joined: int = 0
    #: A lost process back without a new nonce, or under another CURVE key.
    refused_reconnects: int = 0
    #: Workers refused for a file whose copy differs.
    index_mismatches: int = 0
    #: Files moved off a worker that cannot read them.
    unreadable_files: int = 0
    #: Padded rows released (``shard_remainder="pad"``: no sample, zeros, ``valid`` False),
    #: apart from samples skipped for bad data.
    padded_samples: int = 0


@dataclasses.dataclass(slots=True)
class StorageTotals:
    """What one worker's reads of object storage cost, as its DATA parts said
    (``storage``, summed; a worker of local files, or of an earlier release, says nothing:
    0). Written by the loop thread only; ``stats()`` reads the ints from any thread."""

    requests: int = 0
    bytes: int = 0
    retries: int = 0
    refused: int = 0

    def add(self, reads: StorageReads | None) -> None:
        if reads is not None:
            self.requests += reads.requests
            self.bytes += reads.bytes
            self.retries += reads.retries
            self.refused += reads.refused

    def as_dict(self) -> dict[str, int]:
        """The keys of ``stats()["workers"][i]``."""
        return {
            "object_requests": self.requests,
            "object_bytes": self.bytes,
            "object_retries": self.retries,
            "object_refused": self.refused,
        }


class RateMeter:
    """Counts events (clips and bytes) in total and over the last :data:`RECENT_WINDOW_S`,
    with the busy seconds the sender says each took (a worker's DATA parts; 0 otherwise)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._events: collections.deque[tuple[float, int, int, float]] = collections.deque()
        self.count = 0  # events (batches or parts)
        self.clips = 0
        self.bytes = 0
        self.busy_s = 0.0
        self.last_seen: float | None = None

    def record(self, clips: int, nbytes: int, busy_s: float = 0.0) -> None:
        now = time.monotonic()
        with self._lock:
            self.count += 1
            self.clips += clips
            self.bytes += nbytes
            self.busy_s += busy_s
            self.last_seen = now
            self._events.append((now, clips, nbytes, busy_s))
            self._trim(now)

    def _trim(self, now: float) -> None:
        while self._events and self._events[0][0] < now - RECENT_WINDOW_S:
            self._events.popleft()

    def figures(self) -> MeterFigures:
        """Totals, total rates since creation, recent rates, seconds since the last event;
        the clips and busy seconds of the recent events: one consistent reading."""
        now = time.monotonic()
        with self._lock:
            self._trim(now)
            recent = list(self._events)
            count, clips, nbytes, last = self.count, self.clips, self.bytes, self.last_seen
            busy = self.busy_s
        elapsed = max(now - self._started, 1e-9)
        window = min(RECENT_WINDOW_S, elapsed)
        clips_recent = sum(e[1] for e in recent)
        return MeterFigures(
            count=count,
            clips=clips,
            bytes=nbytes,
            busy_s=busy,
            per_s_total=Rates.over(count, clips, nbytes, elapsed),
            per_s_recent=Rates.over(len(recent), clips_recent, sum(e[2] for e in recent), window),
            clips_recent=clips_recent,
            busy_s_recent=sum(e[3] for e in recent),
            last_seen_s_ago=None if last is None else now - last,
        )

    def snapshot(self) -> dict[str, Any]:
        """:meth:`figures` as the plain dict ``stats()`` shows."""
        return self.figures().as_dict()


@dataclasses.dataclass(frozen=True, slots=True)
class Rates:
    """Events (batches or parts), clips and bytes per second."""

    events: float
    clips: float
    bytes: float

    @classmethod
    def over(cls, count: int, clips: int, nbytes: int, seconds: float) -> Rates:
        return cls(count / seconds, clips / seconds, nbytes / seconds)

    def as_dict(self) -> dict[str, float]:
        return {"events": self.events, "clips": self.clips, "bytes": self.bytes}


@dataclasses.dataclass(frozen=True, slots=True)
class MeterFigures:
    """One reading of a :class:`RateMeter` (:meth:`RateMeter.figures`), typed: what the
    sizing reads; :meth:`as_dict` is the form ``stats()`` shows."""

    count: int
    clips: int
    bytes: int
    busy_s: float
    per_s_total: Rates
    per_s_recent: Rates
    clips_recent: int
    busy_s_recent: float
    last_seen_s_ago: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "clips": self.clips,
            "bytes": self.bytes,
            "busy_s": self.busy_s,
            "per_s_total": self.per_s_total.as_dict(),
            "per_s_recent": self.per_s_recent.as_dict(),
            "clips_recent": self.clips_recent,
            "busy_s_recent": self.busy_s_recent,
            "last_seen_s_ago": self.last_seen_s_ago,
        }
