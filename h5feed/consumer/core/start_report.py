"""Progress lines while an iteration starts, so that a long start is never silent.

The first iteration over a big dataset waits for its workers to index the files (one worker
indexes a file before others can share it): minutes for one large file, in which the trainer
said nothing. While the scheduler is not ready, :class:`StartReport` logs one INFO line after
``first_s`` and then one every ``every_s``: how long the start has taken, how many answers
came, and what is still awaited (the scheduler's own words, as the handshake's timeout error
gives them); once ready, one line with the start's length, if it was long enough to report.
Lines go to the ``h5feed.consumer`` logger (quiet in a library unless the application
configures logging; ``h5feed demo`` and the other commands do)."""

from __future__ import annotations

import time
from collections.abc import Callable

from h5feed.common.system.logs import IdsLogger


class StartReport:
    """See the module docstring. Not thread-safe: the loop's thread owns it."""

    def __init__(
        self,
        log: IdsLogger,
        first_s: float = 5.0,
        every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._every_s = every_s
        self._clock = clock
        self._began = clock()
        self._next = self._began + first_s
        self.reported = 0  # progress lines logged so far

    def tick(self, answers: int, waiting: Callable[[], str]) -> None:
        """Called on each pass of the start: logs a line when one is due (``waiting`` is
        asked only then)."""
        now = self._clock()
        if now < self._next:
            return
        self._log.info(
            "starting for %.0f s: %d answers so far; %s", now - self._began, answers, waiting()
        )
        self.reported += 1
        self._next = now + self._every_s

    def done(self, answers: int) -> None:
        """The scheduler is ready: one closing line when progress was reported."""
        if self.reported:
            self._log.info(
                "started after %.1f s (%d answers)", self._clock() - self._began, answers
            )
