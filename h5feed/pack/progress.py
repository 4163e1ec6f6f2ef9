"""The progress display of ``h5feed pack``: one bar per phase on a terminal, else nothing.

The bars are :class:`h5feed.progress.RichBar` (the bar every long command shows): videos
done of the phase's total, the frames written so far in its note.
"""

from __future__ import annotations

import sys
from typing import Protocol

from h5feed.progress import RichBar

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
    """A bar per phase on stderr; a phase's bar stays on screen when the next one starts."""

    def __init__(self) -> None:
        self._bar: RichBar | None = None
        self._done = 0
        self._frames = 0

    def start(self, phase: str, total: int, done: int = 0) -> None:
        self.close()
        self._bar = RichBar(phase, total, sys.stderr)
        self._done, self._frames = done, 0
        self._bar.update(done, note="0 frames")

    def advance(self, videos: int = 1, frames: int = 0) -> None:
        self._done += videos
        self._frames += frames
        if self._bar is not None:
            self._bar.update(self._done, note=f"{self._frames} frames")

    def close(self) -> None:
        """Stop the display (the cursor comes back); calling it again does nothing."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
