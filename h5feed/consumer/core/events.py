"""What happens to the consumer's peers, as values the loop handles in one place.

The peer session (:mod:`h5feed.consumer.core.session`) turns what arrives on the socket, what a send
fails with and what the health checks find into these events, queued; the loop
(:mod:`h5feed.consumer.core.loop`) takes them at the top of each pass and decides. Nothing reacts to
a failure from inside a send or a receive, so recovery never re-enters dispatch.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from h5feed.common.protocol import messages
from h5feed.consumer.core.ledger import Peer

#: Why a peer is gone: it said BYE; a send to it failed (its connection stopped answering
#: heartbeats: killed, host down, cable cut, stopped); its process exited (local workers); it
#: held units past ``unit_timeout_s`` without returning any (stuck); it was refused for
#: malformed traffic; a new process said hello under its identity (restarted); the same
#: process said hello with a new nonce, starting over because its connection broke
#: (reconnected: h5feed/producer/worker/connection.py).
LossCause = Literal[
    "bye", "unreachable", "exited", "deadline", "refused", "restarted", "reconnected"
]


@dataclasses.dataclass(frozen=True, slots=True)
class PeerJoined:
    """A new peer said HELLO: before the work is shared out (it gets a share then), or during
    the iteration (elastic join: the scheduler gives it a share at the next unit boundary)."""

    peer: Peer


@dataclasses.dataclass(frozen=True, slots=True)
class Arrived:
    """A message of this iteration's job from a known peer (not HELLO or BYE)."""

    peer: Peer
    message: messages.Message


@dataclasses.dataclass(frozen=True, slots=True)
class PeerLost:
    """``peer`` is gone or must be treated as gone; ``reason`` says how, in words."""

    peer: Peer
    cause: LossCause
    reason: str


Event = PeerJoined | Arrived | PeerLost
