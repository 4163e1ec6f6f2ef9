"""Progress bars of long commands (``h5feed demo``, ``h5feed bench``).

:func:`progress_bar` gives a ``rich`` bar only where a person watches: ``enabled`` (commands
turn it off with ``--no-progress``) and the stream is a terminal. Elsewhere (a pipe, a log
file, CI) it gives the caller's ``plain`` fallback (e.g. one final line), or nothing, so logs
never fill with redraws.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import IO, Protocol


class Bar(Protocol):
    def update(self, done: int, note: str | None = None) -> None: ...

    def close(self, note: str | None = None) -> None: ...


class SilentBar:
    """Shows nothing."""

    def update(self, done: int, note: str | None = None) -> None:
        pass

    def close(self, note: str | None = None) -> None:
        pass


class RichBar:
    """``label ━━━━━━━━━━━━━━━━━━━━ done/total elapsed remaining note``, redrawn in place.

    While it runs, what the program prints to stdout and stderr appears above it (rich's
    redirection). :meth:`close` leaves the final bar on screen; it is idempotent."""

    def __init__(self, label: str, total: int, stream: IO[str]) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[note]}"),
            console=Console(file=stream),
        )
        self._task = self._progress.add_task(label, total=max(total, 0), note="")
        self._progress.start()
        self._closed = False

    def update(self, done: int, note: str | None = None) -> None:
        if note is None:
            self._progress.update(self._task, completed=done)
        else:
            self._progress.update(self._task, completed=done, note=note)

    def close(self, note: str | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        if note is not None:
            self._progress.update(self._task, note=note)
        self._progress.stop()


def is_terminal(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty()) if callable(isatty) else False


def progress_bar(
    label: str,
    total: int,
    stream: IO[str] | None = None,
    *,
    enabled: bool = True,
    plain: Callable[[str, int, IO[str]], Bar] | None = None,
) -> Bar:
    """A rich bar on ``stream`` (default stderr) if ``enabled`` and it is a terminal; else
    ``plain(label, total, stream)`` if given and ``enabled``; else a bar that shows nothing."""
    stream = stream if stream is not None else sys.stderr
    if not enabled:
        return SilentBar()
    if is_terminal(stream):
        return RichBar(label, total, stream)
    return plain(label, total, stream) if plain is not None else SilentBar()
