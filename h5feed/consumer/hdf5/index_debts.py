"""Who owes the HDF5 scheduler an INDEX, since when, and who has shown that it delivers.

A peer asked for the INDEX of files (a JOB that asks for it: the handshake, a file moved to
it) owes one from then; the session's deadline runs from ``Peer.owes_since`` (as from
``last_progress`` for units), so a peer that never answers is lost and its files move on. A
peer has shown it delivers once it sent an INDEX that was taken or a part that was expected;
the trainer's own (local) workers need not show it. Files go to proven peers first
(:mod:`h5feed.consumer.hdf5.scheduler`, "proof before work").

Guarantees:

1. Until it is forgotten, ``peer.owes_since`` is set exactly while ``peer`` owes files here
   (the files owed and the clock are written only here, together): it starts at the first
   :meth:`IndexDebts.ask`, starts again at each answer that leaves some owed, and is cleared
   by the answer (or :meth:`IndexDebts.unask`) that leaves none.
2. A peer forgotten (:meth:`IndexDebts.forget`: lost) owes nothing and is proven no more; a
   new connection under its identity is a new ``Peer``, which starts with no debt or proof.
3. No messages, no sockets: the scheduler says what was asked and answered. Not thread-safe:
   the loop's thread owns it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from h5feed.consumer.core.ledger import Peer


class IndexDebts:
    """See the module docstring."""

    def __init__(self) -> None:
        self._owed: dict[Peer, set[int]] = {}  # peer -> files whose INDEX it was asked for
        self._delivered: set[Peer] = set()  # peers that sent an INDEX taken or a part expected

    def owed(self, peer: Peer) -> set[int]:
        """The files whose INDEX ``peer`` owes (a copy)."""
        return set(self._owed.get(peer, ()))

    def ask(self, peer: Peer, files: Iterable[int]) -> None:
        """``peer`` is asked for the INDEX of ``files``: it owes one from now on."""
        files = set(files)
        if not files:  # nothing asked: nothing owed
            return
        self._owed.setdefault(peer, set()).update(files)
        if peer.owes_since is None:
            peer.owes_since = time.monotonic()

    def answered(self, peer: Peer, files: Iterable[int]) -> None:
        """``peer`` answered for ``files``: its deadline starts again, or ends with its debt."""
        owed = self._owed.get(peer)
        if owed is None:
            return
        owed.difference_update(files)
        peer.owes_since = time.monotonic() if owed else None
        if not owed:
            del self._owed[peer]

    def unask(self, peer: Peer, file_index: int) -> None:
        """``peer`` no longer owes the INDEX of ``file_index`` (it went to another); its
        deadline runs on from when it was set while it owes others."""
        owed = self._owed.get(peer)
        if owed is None:
            return
        owed.discard(file_index)
        if not owed:
            del self._owed[peer]
            peer.owes_since = None

    def delivered(self, peer: Peer) -> None:
        """``peer`` sent an INDEX that was taken, or a part that was expected."""
        self._delivered.add(peer)

    def proven(self, peer: Peer) -> bool:
        """Whether ``peer`` has shown it delivers (or is one of the trainer's own workers)."""
        return peer.local or peer in self._delivered

    def forget(self, lost: Peer) -> None:
        """``lost`` is gone: it owes nothing and is proven no more."""
        self._delivered.discard(lost)
        self._owed.pop(lost, None)
