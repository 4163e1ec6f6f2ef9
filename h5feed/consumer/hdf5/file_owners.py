"""Who owns each HDF5 file of an iteration, who is taking it over, and who may never have it.

One record, read in both directions (file → owner, owner → files), so the two can never
disagree; the HDF5 scheduler (:mod:`h5feed.consumer.hdf5.scheduler`) decides *when* a file
moves (handshake, checks of a taker's INDEX), this decides *where* it may go and keeps the
books. No messages, no clocks: it is tested on its own
(``tests/unit/consumer/test_file_owners.py``).

Guarantees:

1. Every file has at most one owner, and ``owner(f) is p`` exactly when ``f in files_of(p)``.
2. A file has at most one taker (a move begun: :meth:`begin_move`), never its own owner; the
   taker owns the file only once the move is confirmed (:meth:`confirm`), and the previous
   owner keeps it until then (its rows go on being made there).
3. A peer refused for a file (its copy differs, or it cannot read it: :meth:`refuse`) loses
   the file and its move of it, and is never again among the file's :meth:`candidates` in
   this iteration, even under a new connection with the same identity. (A joiner's share,
   :meth:`share_for`, is not filtered so: the taker's INDEX is checked like any other, and
   a differing copy is refused again while the file stays with its owner.)
4. A lost peer (:meth:`release`) owns nothing and takes nothing over from then on; its files,
   and those it was taking over from nobody, come back to be moved; files a live owner was
   handing it stay with that owner.
5. Each peer's files are kept in the order it got them (the joiner's share is taken from the
   end: the files a donor got last).
6. Shares go by :meth:`load`: the files a peer will hold once the moves begun are done (those
   it owns and is not handing over, and those it is taking over). So a joiner that comes while a
   lost peer's files are moving to a survivor still gets its share (from the survivor's own
   files), and a lost peer's files spread over the survivors instead of all going to one.
7. :meth:`unowned` and :attr:`any_unowned` cost O(files unowned), not O(files): the set is
   kept with every change (the loop asks on every pass; a scan cost ~1.3 ms at 100,000 files).
8. Not thread-safe: the loop's thread owns it.

A file may have readers besides its owner (:mod:`~h5feed.consumer.hdf5.file_readers`): that
record is kept apart; this one knows the owner (the reader that indexed or took over the file,
to whom it falls back) and every refusal, which bars a peer from reading the file at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from h5feed.consumer.core.ledger import Peer


class FileOwners:
    """See the module docstring."""

    def __init__(self) -> None:
        self._owner: dict[int, Peer | None] = {}  # file -> its owner (None: nobody now)
        self._files: dict[Peer, list[int]] = {}  # owner -> its files, in the order it got them
        self._moving: dict[int, Peer] = {}  # file -> the peer to own it once confirmed
        # Kept with every change of a move, so that load() costs O(1): it is asked per
        # candidate for every file moved, and a lost worker may hand over 50,000 files.
        self._incoming: Counter[Peer] = Counter()  # taker -> files moving to it
        self._outgoing: Counter[Peer] = Counter()  # owner -> its files moving away
        self._refused: dict[bytes, set[int]] = {}  # identity -> files it may never have
        self._live: dict[bytes, Peer] = {}  # identity -> the live peers that may own files
        # Files with neither an owner nor a taker, kept with every change (an ordered set):
        # the loop asks on every pass, and a scan of 100,000 files cost ~1.3 ms.
        self._unowned: dict[int, None] = {}

    # -- reading ---------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether files were shared out (:meth:`assign`) in this iteration."""
        return bool(self._owner)

    @property
    def live(self) -> list[Peer]:
        """The live peers, in the order they came."""
        return list(self._live.values())

    def owner(self, file_index: int) -> Peer | None:
        """The owner of ``file_index`` (None: nobody now, or a file never assigned)."""
        return self._owner.get(file_index)

    def owners(self, files: Iterable[int]) -> list[Peer | None]:
        """The owner of each of ``files``, as :meth:`owner` (one lookup per row of every
        batch dispatched: no Python call per file)."""
        return list(map(self._owner.get, files))

    def files_of(self, peer: Peer) -> list[int]:
        """The files ``peer`` owns, in the order it got them (a copy)."""
        return list(self._files.get(peer, ()))

    def count(self, peer: Peer) -> int:
        """How many files ``peer`` owns."""
        return len(self._files.get(peer, ()))

    def load(self, peer: Peer) -> int:
        """How many files ``peer`` will own once the moves begun are done: those it owns and
        is not handing over, and those it is taking over."""
        return self.count(peer) - self._outgoing[peer] + self._incoming[peer]

    def taker(self, file_index: int) -> Peer | None:
        """The peer taking ``file_index`` over (None: no move begun)."""
        return self._moving.get(file_index)

    def moves(self) -> list[tuple[int, Peer]]:
        """The moves begun, (file, taker), in the order begun."""
        return list(self._moving.items())

    def holds(self, peer: Peer) -> bool:
        """Whether ``peer`` owns a file or is taking one over."""
        return bool(self._files.get(peer)) or peer in self._moving.values()

    def unowned(self) -> list[int]:
        """Files with neither an owner nor a taker, in the order they became so."""
        return list(self._unowned)

    @property
    def any_unowned(self) -> bool:
        """Whether some file has neither an owner nor a taker (O(1))."""
        return bool(self._unowned)

    def refused(self, file_index: int, peer: Peer) -> bool:
        """Whether ``peer`` (by identity) was refused ``file_index`` in this iteration."""
        return file_index in self._refused.get(peer.identity, ())

    def candidates(self, file_index: int, exclude: Peer | None = None) -> list[Peer]:
        """The live peers that may take ``file_index`` (not refused for it), ``exclude`` left
        out, in the order they came."""
        refused = {i for i, files in self._refused.items() if file_index in files}
        return [p for p in self._live.values() if p is not exclude and p.identity not in refused]

    # -- changes ---------------------------------------------------------------------------

    def add_peer(self, peer: Peer) -> None:
        """``peer`` is live (at the start or joining): it may own files from now."""
        self._live[peer.identity] = peer

    def assign(self, file_index: int, peer: Peer) -> None:
        """``peer`` owns ``file_index`` at once (its first owner, or one that needs no check).
        Raises ValueError if the file has an owner or a taker already."""
        if self._owner.get(file_index) is not None or file_index in self._moving:
            raise ValueError(f"file {file_index} is owned or moving already")
        self._owner[file_index] = peer
        self._files.setdefault(peer, []).append(file_index)
        self._unowned.pop(file_index, None)

    def begin_move(self, file_index: int, taker: Peer) -> None:
        """``taker`` is to own ``file_index`` once :meth:`confirm`\\ ed (a move begun for the
        file is handed to ``taker`` instead). Raises ValueError for the owner itself."""
        if self._owner.get(file_index) is taker:
            raise ValueError(f"file {file_index} is owned by its taker already")
        if file_index in self._moving:
            self._end_move(file_index)
        self._moving[file_index] = taker
        self._unowned.pop(file_index, None)
        self._incoming[taker] += 1
        owner = self._owner.get(file_index)
        if owner is not None:
            self._outgoing[owner] += 1

    def confirm(self, file_index: int) -> Peer:
        """The taker of ``file_index`` owns it now; its previous owner no longer does.
        Returns the new owner. Raises KeyError when no move was begun."""
        taker = self._moving[file_index]  # KeyError: no move begun
        self._end_move(file_index)
        previous = self._owner.get(file_index)
        if previous is not None:
            self._drop(previous, file_index)
        self._owner[file_index] = taker
        self._files.setdefault(taker, []).append(file_index)
        self._unowned.pop(file_index, None)
        return taker

    def refuse(self, file_index: int, peer: Peer) -> None:
        """``peer`` may never have ``file_index`` in this iteration: its move of the file is
        cancelled and, if it owns the file, the file has no owner now."""
        self._refused.setdefault(peer.identity, set()).add(file_index)
        if self._moving.get(file_index) is peer:
            self._end_move(file_index)
        if self._owner.get(file_index) is peer:
            if file_index in self._moving:
                self._outgoing[peer] -= 1
            self._drop(peer, file_index)
            self._owner[file_index] = None
            self._settle(file_index)

    def release(self, lost: Peer) -> list[int]:
        """``lost`` is gone: it owns and takes nothing from now. Returns the files to move
        again: those it owned, then those it was taking over from nobody."""
        self._live.pop(lost.identity, None)
        taking = [f for f, p in self._moving.items() if p is lost]
        for file_index in taking:
            self._end_move(file_index)
        owned = self._files.pop(lost, [])
        for file_index in owned:
            self._owner[file_index] = None
            self._settle(file_index)
        del self._outgoing[lost]  # its files moving away have no owner now
        return owned + [f for f in taking if self._owner.get(f) is None]

    def share_for(self, joiner: Peer) -> list[int]:
        """Begin moving to ``joiner`` files from the peers with the highest :meth:`load` until
        its load is its share (the files over the live peers, rounded down): each donor gives
        the file it got last that is not moving already, and none is left below the share.
        Returns the files whose moves began, in order."""
        share = len(self._owner) // max(1, len(self._live))
        taken: list[int] = []
        while self.load(joiner) < share:
            donor = max(self._live.values(), key=lambda p: (self.load(p), p.identity))
            movable = [f for f in self._files.get(donor, []) if f not in self._moving]
            if donor is joiner or self.load(donor) <= share or not movable:
                break
            self.begin_move(movable[-1], joiner)
            taken.append(movable[-1])
        return taken

    def _end_move(self, file_index: int) -> None:
        """The move of ``file_index`` is over (confirmed, cancelled or handed to another)."""
        taker = self._moving.pop(file_index)
        self._incoming[taker] -= 1
        owner = self._owner.get(file_index)
        if owner is not None:
            self._outgoing[owner] -= 1
        self._settle(file_index)

    def _settle(self, file_index: int) -> None:
        """Keep ``file_index`` in the unowned set exactly when it has no owner nor taker."""
        owned = self._owner.get(file_index, self) is not None  # self: never assigned
        if owned or file_index in self._moving:
            self._unowned.pop(file_index, None)
        else:
            self._unowned[file_index] = None

    def _drop(self, peer: Peer, file_index: int) -> None:
        files = self._files.get(peer)
        if files is not None and file_index in files:
            files.remove(file_index)
            if not files:
                del self._files[peer]
