"""What the peer session remembers of each identity that spoke to it: one record each.

An identity (a ZeroMQ routing id) outlives its peers, and the session's rules need some of its
past after its peer is gone (:mod:`h5feed.consumer.core.session`, rules 1 to 3): the nonce of
its last process (that process may not come back), its last CURVE key (a new process must show
the same), whether it is refused or banned, how many bad messages it sent, which of its lost
processes were told so. All of that is one :class:`Identity`, kept in one :class:`Identities`
table, so no fact about an identity lives in a collection of its own that a missed update could
leave behind or bring back. What belongs to one live peer (its units, when it was last heard
from or probed) is on its :class:`~h5feed.consumer.core.ledger.Peer` instead, and goes with it.

Guarantees:

1. One record per identity, made the first time there is something to remember of it (a peer,
   a refusal, a strike), never a second one.
2. Bounded as before the fold: an identity that only sent bad messages costs one record, and
   once ``tracked`` identities have strikes, every count starts over and the records that held
   nothing else are forgotten (identities cost a sender nothing). The records of identities that
   were peers or were refused are kept for the iteration, as each of those cost a HELLO.

Used by the loop thread only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


@dataclasses.dataclass(slots=True)
class Identity:
    """What is remembered of one identity (see the module docstring)."""

    #: The HELLO nonce of its last peer's process; None while it never was a peer.
    nonce: str | None = None
    key: str | None = None  # its last peer's CURVE public key (Z85), with CURVE
    gone: bool = False  # its peer left or was lost, or it was refused (until a new peer)
    refused: bool = False  # for its version, semantics, key or traffic: never a peer again
    banned: bool = False  # refused for malformed traffic: its messages are not even decoded
    strikes: int = 0  # malformed messages and unexpected parts it sent (see ``tracked``)
    #: Nonces of its lost processes that said hello again and were told to start over.
    told_stale: set[str] = dataclasses.field(default_factory=set)

    def beyond_strikes(self) -> bool:
        """Whether it holds anything but a strike count (so it outlives a reset of counts)."""
        return (
            self.nonce is not None
            or self.gone
            or self.refused
            or self.banned
            or bool(self.told_stale)
        )


class Identities:
    """The records of one session, by identity (see the module docstring)."""

    def __init__(self, tracked: int) -> None:
        """``tracked``: how many identities with strikes are counted before counts start over."""
        self._records: dict[bytes, Identity] = {}
        self._tracked = tracked
        self._striking = 0  # records with strikes > 0
        # The record of an identity, or None: the dict's own lookup (the session asks once per
        # message, so no Python frame), valid as long as ``_records`` is this one dict.
        self.get: Callable[[bytes], Identity | None] = self._records.get

    def of(self, identity: bytes) -> Identity:
        """The record of ``identity``, made now if it has none."""
        record = self._records.get(identity)
        if record is None:
            record = self._records[identity] = Identity()
        return record

    def strike(self, identity: bytes) -> Identity:
        """One more bad message from ``identity``: its record, strikes counted."""
        record = self._records.get(identity)
        if record is None or not record.strikes:
            if self._striking >= self._tracked:  # a new identity past the bound: start over
                self._forget_strikes()
                record = self._records.get(identity)
            self._striking += 1
            if record is None:
                record = self._records[identity] = Identity()
        record.strikes += 1
        return record

    def _forget_strikes(self) -> None:
        for record in self._records.values():
            record.strikes = 0
        kept = {i: r for i, r in self._records.items() if r.beyond_strikes()}
        self._records.clear()  # the same dict: ``get`` is its lookup
        self._records.update(kept)
        self._striking = 0

    def __contains__(self, identity: object) -> bool:
        return identity in self._records

    def __len__(self) -> int:
        return len(self._records)
