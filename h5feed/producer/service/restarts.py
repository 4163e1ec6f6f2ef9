"""When ``h5feed produce`` restarts a worker that died, and when it is crash-looping.

A worker's death is one of two kinds, told apart by whether that process returned a DATA part
since it started (its stats file says so: ``h5feed/producer/worker/stats.py``):

* **it delivered**: it was working when it died (an OOM killer on a host under memory
  pressure, a one-off crash). It is restarted at once, and its backoff starts over.
* **it did not**: it may die on every start (a broken install, a bad mount, code that cannot
  import). It is restarted after a backoff, 1 s doubling at each such death in a row up to
  60 s, so a crash loop costs little CPU and fills no log; and past ``max_restarts`` such deaths
  of one worker within a minute the service reports the crash loop in its health check
  (``h5feed health`` fails), so Swarm or Kubernetes replace the container.

A worker that cannot even be started (``OSError`` from the start: no descriptor left,
``EMFILE``; no memory to fork, ``ENOMEM``) counts as a death without delivery: the same
backoff, the same crash-loop rule, its error named in the report; every such start is
counted in :attr:`Restarts.start_failures`. The service never exits for it.

Used by the service's single loop thread only.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Final

#: Deaths without delivery a minute past which a worker crash-loops (``--max-restarts``).
DEFAULT_MAX_RESTARTS: Final = 3
#: The window of ``max_restarts`` (seconds).
CRASH_WINDOW_S: Final = 60.0
#: The first backoff after a death without delivery, and its cap (seconds).
FIRST_BACKOFF_S: Final = 1.0
MAX_BACKOFF_S: Final = 60.0


class Restarts:
    """The restart schedule of the workers of one service (see the module docstring)."""

    def __init__(self, max_restarts: int) -> None:
        self.max_restarts = max_restarts
        self._due: dict[str, float] = {}  # name -> when it may start again (monotonic)
        self._backoff: dict[str, float] = {}  # name -> the next backoff of a crash death
        self._crashes: dict[str, collections.deque[float]] = {}  # name -> crash deaths
        self._start_errors: dict[str, str] = {}  # name -> why its last start failed
        self.start_failures = 0  # starts that raised, every worker's

    def died(self, name: str, delivered: bool, now: float) -> float:
        """Worker ``name`` died at ``now``; the seconds until it may be started again."""
        crashes = self._crashes.setdefault(name, collections.deque())
        if delivered:
            self._backoff.pop(name, None)
            delay = 0.0
        else:
            delay = self._backoff.get(name, FIRST_BACKOFF_S)
            self._backoff[name] = min(delay * 2, MAX_BACKOFF_S)
            crashes.append(now)
        self._due[name] = now + delay
        return delay

    def start_failed(self, name: str, error: OSError, now: float) -> float:
        """Worker ``name`` could not be started at ``now``; the seconds until it may be
        tried again (a death without delivery, see the module docstring)."""
        self.start_failures += 1
        self._start_errors[name] = str(error)[:200]
        return self.died(name, False, now)

    def started(self, name: str) -> None:
        """Worker ``name`` started: a later crash loop is not blamed on an old start error."""
        self._start_errors.pop(name, None)

    def forget(self, names: Iterable[str]) -> None:
        """Workers that are gone for good (a shared fleet's trainer left): their schedule
        goes, so the record stays bounded by the workers that exist."""
        for name in names:
            self._due.pop(name, None)
            self._backoff.pop(name, None)
            self._crashes.pop(name, None)
            self._start_errors.pop(name, None)

    def due(self, name: str, now: float) -> bool:
        """Whether worker ``name`` may be started now."""
        return now >= self._due.get(name, now)

    def crash_loop(self, now: float) -> str | None:
        """The workers past ``max_restarts`` deaths without delivery within the window, in
        words; None when none is."""
        looping = []
        for name, crashes in sorted(self._crashes.items()):
            while crashes and now - crashes[0] > CRASH_WINDOW_S:
                crashes.popleft()
            if len(crashes) > self.max_restarts:
                error = self._start_errors.get(name)
                how = f"could not start ({error})" if error else "died"
                looping.append(f"worker {name} {how} {len(crashes)} times")
        if not looping:
            return None
        return (
            f"crash loop: {'; '.join(looping)} within {CRASH_WINDOW_S:g} s, each time before "
            f"returning any data (max_restarts={self.max_restarts})"
        )
