"""Messages a worker takes from its socket before their turn, so that a job that reads ahead
(files on object storage) can be shown the units waiting behind the one it makes.

Guarantees:

1. Order: the loop answers what was taken early before anything newer, in the order it
   arrived (:meth:`Waiting.next`), so every unit is still answered in the order received.
2. Bounded: at most :data:`MAX_WAITING` messages are held.
3. Nothing is refused or dropped here: a message that does not decode is held undecoded, and
   the loop decodes it in its turn and drops or refuses it as it does any other.
"""

from __future__ import annotations

import collections
from collections.abc import Collection
from typing import Any

import zmq

from h5feed.common.errors import ProtocolError, VersionMismatchError
from h5feed.common.protocol import messages

__all__ = ["MAX_WAITING", "Waiting"]

#: Messages a job that reads ahead may take from the socket before their turn.
MAX_WAITING = 8

Said = tuple[messages.Message, int]


class Waiting:
    """The messages taken early, each with its decoding (None: the loop decodes it)."""

    def __init__(self) -> None:
        self._held: collections.deque[tuple[Any, Said | None]] = collections.deque()

    def __len__(self) -> int:
        return len(self._held)

    def next(self) -> tuple[Any, Said | None]:
        """The oldest message taken early: its frames, and its decoding if it decoded."""
        return self._held.popleft()

    def take(self, socket: zmq.Socket[Any], units: Collection[type], job_id: str) -> list[Any]:
        """Take what is in ``socket`` now (up to :data:`MAX_WAITING` held); the units of
        ``units`` types of job ``job_id`` among everything held, in order."""
        while len(self._held) < MAX_WAITING and socket.poll(0):
            frames = socket.recv_multipart(copy=False)
            try:
                said: Said | None = messages.decode_said(frames)
            except (ProtocolError, VersionMismatchError):
                said = None  # its turn decodes it again, and says why it is refused
            self._held.append((frames, said))
        return [
            said[0]
            for _frames, said in self._held
            if said is not None
            and type(said[0]) in units
            and getattr(said[0], "job", None) == job_id
        ]
