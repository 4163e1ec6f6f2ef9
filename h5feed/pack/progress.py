"""The progress display of ``h5feed pack``: a rich progress bar on a terminal, else nothing."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["NoProgress", "PackProgress", "RichProgress"]


class PackProgress(Protocol):
    def start(self, phase: str, total: int, done: int = 0) -> None: ...

    def advance(self, videos: int = 1, frames: int = 0) -> None: ...

    def close(self) -> None: ...


class NoProgress:
    """Shows nothing (stderr is not a terminal, or ``--no-progress``)."""

    def start(self, phase: str, total: int, done: int = 0) -> None:
        pass

    def advance(self, videos: int = 1, frames: int = 0) -> None:
        pass

    def close(self) -> None:
        pass


class RichProgress:
    """A ``rich.progress`` bar on stderr: phase, bar, videos done/total, frames, elapsed, ETA."""

    def __init__(self) -> None:
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
            TextColumn("videos, {task.fields[frames]} frames"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        self._task: Any = None  # the display starts with the first phase
        self._frames = 0

    def start(self, phase: str, total: int, done: int = 0) -> None:
        if self._task is None:
            self._progress.start()
        self._frames = 0
        self._task = self._progress.add_task(phase, total=total, completed=done, frames=0)

    def advance(self, videos: int = 1, frames: int = 0) -> None:
        self._frames += frames
        self._progress.update(self._task, advance=videos, frames=self._frames)

    def close(self) -> None:
        """Stop the display (the cursor comes back); calling it again does nothing."""
        self._progress.stop()
