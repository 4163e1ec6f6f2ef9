"""Refusal log lines at a rate no sender can raise: one summary line per interval, in all.

Identities, CURVE keys and connections cost a peer nothing, so a log rate bounded per
identity or per key is no bound at all (5,000 identities made 5,000 lines). A
:class:`RefusalLog` bounds the lines of one part (a trainer's session, its CURVE server, a
fleet's front) whoever sends.

Guarantees:

1. **At most one line per** ``every_s`` (10 s by default), whatever the number of senders,
   keys or kinds: the first refusal is said at once; the ones after it within the interval
   are counted, and said in the next line (the first refusal after the interval, or
   :meth:`RefusalLog.flush` once it has passed) as ``WHAT: N refusals and drops since the
   last line: COUNT x KIND (last: DETAIL); ...``; a first line is ``WHAT: KIND DETAIL``.
2. **Bounded memory and line length.** Kinds are the caller's own fixed words (never a
   peer's text), at most :data:`MAX_KINDS` of them between two lines (more are counted
   under ``other``); each detail, which may quote a peer, is cut to :data:`MAX_DETAIL_CHARS`.
3. **Every refusal counted**: :attr:`RefusalLog.total` (the caller's own counters stay the
   metrics; this one is what the lines say).
4. Thread-safe: a CURVE server's authenticator thread and a loop thread may share one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final

#: Kinds kept between two lines; beyond, refusals are counted under "other".
MAX_KINDS: Final = 16
#: A detail (it may quote a peer) is cut to this many characters.
MAX_DETAIL_CHARS: Final = 200
#: The default interval between two lines (seconds).
DEFAULT_EVERY_S: Final = 10.0

Log = logging.Logger | logging.LoggerAdapter[logging.Logger]


class RefusalLog:
    """Says the refusals of one part at most once per ``every_s`` (see the module)."""

    def __init__(
        self,
        log: Log,
        what: str,
        every_s: float = DEFAULT_EVERY_S,
        level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``what``: what is refused, for the line (``"worker messages"``, ``"CURVE
        clients"``); ``level``: the lines' level; ``clock``: seconds (tests pass their own)."""
        self._log = log
        self._clock = clock
        self._what = what
        self._every_s = every_s
        self._level = level
        self._lock = threading.Lock()
        self._said_at = -float("inf")
        self._pending: dict[str, tuple[int, str]] = {}  # kind -> (count, last detail)
        self.total = 0

    def refused(self, kind: str, detail: str) -> None:
        """One refusal of ``kind`` (the caller's fixed words), ``detail`` saying which."""
        detail = _cut(detail)
        line: str | None
        with self._lock:
            self.total += 1
            now = self._clock()
            if now - self._said_at >= self._every_s and not self._pending:
                self._said_at = now
                line = f"{self._what}: {kind} {detail}"
            else:
                if kind not in self._pending and len(self._pending) >= MAX_KINDS:
                    kind = "other"
                count, _ = self._pending.get(kind, (0, ""))
                self._pending[kind] = (count + 1, detail)
                line = self._summary(now)
        if line is not None:
            self._log.log(self._level, "%s", line)

    def flush(self) -> None:
        """Say what was counted since the last line, once the interval has passed (call it
        now and then: without it, the count waits for the next refusal)."""
        with self._lock:
            line = self._summary(self._clock())
        if line is not None:
            self._log.log(self._level, "%s", line)

    def _summary(self, now: float) -> str | None:
        """The summary line, if one is due (the lock held)."""
        if not self._pending or now - self._said_at < self._every_s:
            return None
        total = sum(count for count, _ in self._pending.values())
        kinds = "; ".join(
            f"{count} x {kind} (last: {detail})"
            for kind, (count, detail) in sorted(self._pending.items())
        )
        self._pending.clear()
        self._said_at = now
        return f"{self._what}: {total} refusals and drops since the last line: {kinds}"


def _cut(text: str) -> str:
    return text if len(text) <= MAX_DETAIL_CHARS else f"{text[: MAX_DETAIL_CHARS - 3]}..."
