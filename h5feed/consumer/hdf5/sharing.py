"""The HDF5 scheduler's side of extra readers: when files are dealt to more readers, how an
extra reader is checked, and how one becomes a file's owner when the owner is lost.

The records are :class:`~h5feed.consumer.hdf5.file_owners.FileOwners` (owner, taker, refusals)
and :class:`~h5feed.consumer.hdf5.file_readers.FileReaders` (extra readers); the dealing rule
is :func:`~h5feed.consumer.hdf5.file_readers.deal`. This keeps them consistent:

1. Extra readers are dealt only once the plan's index is known (:meth:`Sharing.deal`: at plan
   start, after each join and each loss), weighted by each file's videos (its samples), and
   every file gets a second reader (the ring: balance by throughput when files divide evenly).
2. An extra reader gets a JOB of its files; a local worker reading a file whose planned index
   was learnt on the trainer's host (by a local worker, or the known index) is confirmed at
   once and asked for no INDEX (``send_index=False``: the index learnt once per iteration on
   this host); any other owes the file's INDEX (``unit_timeout_s``, like a taker) and gets no
   row of it until the INDEX matches the plan's (:meth:`Sharing.check`): a differing copy is
   refused for that file, counted (``index_mismatches``) and named, and the owner goes on.
3. A file whose owner is lost goes first to a confirmed extra reader (:meth:`Sharing.heir`):
   it has the planned copy open already, so the file changes owner with no JOB and no INDEX.
4. An extra reader is never the file's owner or taker: one that is made either stops being
   an extra reader first.
5. A peer in doubt (``Peer.in_doubt``: silent while it holds work, or not heard from
   since another worker of its host was lost as unreachable; a stopped or cut-off host
   looks so until its heartbeats time out) is dealt no new extra read; a later deal (the
   next join or loss) may give it one. When a host with many workers stops, their losses
   come one by one, each a deal: without this each deal handed the lost one's files to
   the next of them, whose INDEX never came, and three such deaths refused a good file.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from h5feed.common.system.logs import consumer_log
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.scheduler import Send
from h5feed.consumer.hdf5.file_owners import FileOwners
from h5feed.consumer.hdf5.file_readers import FileReaders, deal, ring
from h5feed.consumer.hdf5.units import first_difference
from h5feed.consumer.plan.epoch_plan import FileColumns, Index

#: The JOB of files for a peer: (peer, files, send_index) -> its sends (the scheduler's _job).
JobOf = Callable[[Peer, list[int], bool], list[Send]]


class Sharing:
    """See the module docstring."""

    def __init__(
        self, owners: FileOwners, files: tuple[str, ...], job_id: str, counters: Counters
    ) -> None:
        self.owners = owners
        #: Who reads each file besides its owner.
        self.readers = FileReaders()
        self._files = files
        self._counters = counters
        self._log = consumer_log(job_id)
        self._here: set[int] = set()  # files whose planned index was learnt on this host
        self._all_here = False  # the plan started from the known index (local workers)
        self._weights: np.ndarray | None = None  # videos per file: the index's, once known
        #: Per file, the peers refused it as extra readers for another copy, and what differs.
        self.mismatches: dict[int, dict[Peer, str]] = {}

    def learnt_here(self, file_index: int | None = None) -> None:
        """The planned index of ``file_index`` (None: of every file) was read on this host."""
        if file_index is None:
            self._all_here = True
        else:
            self._here.add(file_index)

    def _is_here(self, file_index: int) -> bool:
        return self._all_here or file_index in self._here

    def files_read(self, peer: Peer) -> int:
        """The files ``peer`` reads: those it owns and those it reads as a confirmed extra
        reader (``stats()["workers"][i]["files"]``)."""
        return self.owners.count(peer) + self.readers.count(peer)

    def holds(self, peer: Peer) -> bool:
        """Whether ``peer`` owns, takes over or reads any file."""
        return self.owners.holds(peer) or bool(self.readers.files_of(peer))

    def deal(self, index: Index, job: JobOf) -> list[Send]:
        """Deal extra readers among the live peers (guarantee 1), their JOBs to send."""
        owners, readers = self.owners, self.readers
        if self._weights is None or len(self._weights) != len(self._files):
            counts = np.bincount(index.file_of_video, minlength=len(self._files))
            self._weights = counts.astype(np.float64)
        moves = owners.moves()
        leaving = {f for f, _taker in moves}
        held = {
            p: [f for f in owners.files_of(p) if f not in leaving]
            if leaving
            else owners.files_of(p)
            for p in owners.live
        }
        for file_index, taker in moves:
            if taker in held:
                held[taker].append(file_index)

        now = time.monotonic()
        doubted = {p for p in held if p.in_doubt(now)}  # guarantee 5

        def may_read(file_index: int, peer: Peer) -> bool:
            return (
                peer not in doubted
                and not owners.refused(file_index, peer)
                and owners.owner(file_index) is not peer
            )

        added = [
            (f, p)
            for f, p in dict.fromkeys(deal(self._weights, held, may_read) + ring(held, may_read))
            if not readers.reads(f, p) and owners.owner(f) is not p and owners.taker(f) is not p
        ]
        confirmed: dict[Peer, list[int]] = {}
        pending: dict[Peer, list[int]] = {}
        for file_index, peer in added:
            at_once = peer.local and self._is_here(file_index)
            readers.add(file_index, peer, at_once)
            (confirmed if at_once else pending).setdefault(peer, []).append(file_index)
        if added:
            self._log.info(
                "%d extra readers dealt (files shared so that every worker reads a share)",
                len(added),
            )
        sends = [s for p, files in confirmed.items() for s in job(p, files, False)]
        return sends + [s for p, files in pending.items() for s in job(p, files, True)]

    def check(self, peer: Peer, file_index: int, planned: FileColumns, found: FileColumns) -> bool:
        """``peer``'s INDEX of a file it is to read as an extra reader: True when it reads the
        file from now, False when refused for it (guarantee 2)."""
        what = first_difference(planned, found)
        if what is None:
            self.readers.confirm(file_index, peer)
            if peer.local:
                self._here.add(file_index)
            return True
        self._counters.index_mismatches += 1
        self.mismatches.setdefault(file_index, {})[peer] = what
        self.readers.drop(file_index, peer)
        self.owners.refuse(file_index, peer)  # never dealt this file again
        self._log.error(
            "worker %s on host %s has another copy of %r (%s): refused for that file",
            peer.name, peer.host, self._files[file_index], what,
        )  # fmt: skip
        return False

    def differing_copy(self, file_index: int, live: list[Peer]) -> tuple[Peer, str] | None:
        """A live peer refused ``file_index`` for another copy, and what differs; None if no
        live peer was (a file nobody can take for that reason ends the run, naming it)."""
        refused = self.mismatches.get(file_index, {})
        return next(((p, refused[p]) for p in live if p in refused), None)

    def heir(
        self, file_index: int, candidates: list[Peer], load: Callable[[Peer], int]
    ) -> Peer | None:
        """The confirmed extra reader of ``file_index`` among ``candidates`` with the lowest
        ``load``, now its owner (guarantee 3); None if there is none."""
        allowed = {id(p) for p in candidates}
        extras = [p for p in self.readers.confirmed(file_index) if id(p) in allowed]
        if not extras:
            return None
        heir = min(extras, key=lambda p: (load(p), p.identity))
        self.readers.drop(file_index, heir)
        self.owners.assign(file_index, heir)
        return heir

    def taking(self, file_index: int, peer: Peer) -> None:
        """``peer`` is to own or take over ``file_index``: no longer an extra reader of it."""
        self.readers.drop(file_index, peer)
