"""How the HDF5 scheduler moves files: a lost worker's files handed over, a joiner's share, a
file a worker cannot read, and the move each of them makes (:meth:`FileMoves.reassign`,
:meth:`~FileMoves.join`, :meth:`~FileMoves.unreadable`, ``_move``). The rules are
:mod:`h5feed.consumer.hdf5.scheduler`'s (its docstring: hand-over, elastic join, refusals,
proof before work); this is the part of :class:`~h5feed.consumer.hdf5.scheduler.HdfScheduler`
that applies them, kept apart so that each module holds one job: the scheduler the handshake
and the plan, this the moves. It holds no state of its own: the scheduler's, declared here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from h5feed.common.errors import DataError
from h5feed.common.protocol import messages
from h5feed.common.system.logs import IdsLogger
from h5feed.consumer.core.ledger import Peer, heard_first
from h5feed.consumer.core.scheduler import Reassignment, Send
from h5feed.consumer.hdf5.dispatch import Dispatch
from h5feed.consumer.hdf5.file_owners import FileOwners
from h5feed.consumer.hdf5.file_readers import FileReaders
from h5feed.consumer.hdf5.index_answers import IndexAnswers
from h5feed.consumer.hdf5.index_attempts import IndexAttempts
from h5feed.consumer.hdf5.index_debts import IndexDebts
from h5feed.consumer.hdf5.sharing import Sharing
from h5feed.consumer.hdf5.units import job_parts, merge_jobs
from h5feed.consumer.options import HdfConfig
from h5feed.consumer.telemetry.stats import Counters


class FileMoves:
    """The scheduler's moves of files (module docstring); a base of ``HdfScheduler``, which
    sets every attribute declared here."""

    config: HdfConfig
    job_id: str
    owners: FileOwners
    sharing: Sharing
    readers: FileReaders
    _code: tuple[messages.CodeIdentity, ...]
    _log: IdsLogger
    _counters: Counters
    _answers: IndexAnswers
    _debts: IndexDebts
    _attempts: IndexAttempts
    _handed_on: dict[Peer, set[int]]
    _dispatch: Dispatch | None
    _deal_due: bool

    def _sent(self, sends: list[Send], merge: bool = False) -> list[Send]:
        """``sends`` as they go out (with ``merge``: JOBs merged per peer, suspects alone),
        their JOBs recorded for :class:`IndexAttempts`, which holds back those that must wait
        for a suspect's JOB, or for the JOBs before it, to be answered, and lets those held
        before go first once they may."""
        if merge:
            sends = merge_jobs(sends, self._attempts.suspects)
        return self._attempts.gate(sends)

    def _job(self, peer: Peer, files: list[int], send_index: bool = True) -> list[Send]:
        """The JOB of ``files`` for ``peer`` (:func:`job_parts`), which owes their INDEX."""
        if send_index and files:
            self._debts.ask(peer, files)
        parts = job_parts(self.config, self.job_id, files, send_index, self._code)
        return [Send(peer, part) for part in parts]

    def _unexpected(self, peer: Peer, message: messages.Message | str) -> None:
        kind = message if isinstance(message, str) else message.KIND
        self._counters.malformed_messages += 1
        self._log.warning("dropped an unexpected %s message from %s", kind, peer)

    # -- failures and joins ----------------------------------------------------------------

    def owns(self, peer: Peer) -> bool:
        """Also True for a peer that only reads a file besides its owner: its leaving (even
        a BYE with no unit held) must drop it from the file's readers (``reassign``)."""
        return self.sharing.holds(peer)

    def reassign(self, lost: Peer, heirs: Sequence[Peer], confirmed_dead: bool) -> Reassignment:
        """(Also: FileReadError when ``lost`` died indexing a file that killed its holders
        the restart rule's number of times: see :mod:`~h5feed.consumer.hdf5.index_attempts`.)"""
        # Its own files, and those it was to take over from a lost owner (a live owner keeps
        # the files it was to hand over in a join).
        # A joiner's share, still made by its live owner, never waited for ``lost``: its death
        # blames none of those files (a peer that re-says hello under new nonces, dying each
        # time, would otherwise end the run by refusing a good file).
        owner = self.owners.owner
        shares = [f for f, taker in self.owners.moves() if taker is lost and owner(f) is not None]
        self._attempts.answered(lost, shares)
        files = self.owners.release(lost)
        extra = self.readers.release(lost)  # files others read on: its units go to them
        self._attempts.check_left(lost, self.config.files)
        self._debts.forget(lost)
        self._handed_on.pop(lost, None)
        dispatch = self._dispatch
        units = [] if dispatch is None else dispatch.take_back(lost)  # none before the plan
        if not files and not units and not extra:
            return Reassignment([], 0)
        sends: list[Send] = []
        for file_index in files:
            if self.owners.taker(file_index) is not None:
                continue  # a live peer takes it over already (a joiner's share): its INDEX decides
            moved = self._move(file_index)
            if moved is None:  # nobody left who may take it: it waits for a joiner, unless
                self._refuse_differing(file_index)  # those left have another copy of it
            sends += moved or []
        self._deal_due = True  # the survivors share its files out again
        if dispatch is not None and units:  # to the files' readers now (or parked)
            sends += dispatch.send_again(units, lost, confirmed_dead)
        return Reassignment(self._sent(sends, merge=True), len(units))

    def join(self, peer: Peer) -> list[Send]:
        self.owners.add_peer(peer)
        if not self.owners.started:  # before start(): it is shared out with the rest
            return []
        sends: list[Send] = []
        for file_index in self.owners.unowned():
            sends += self._move(file_index) or []
        if self._debts.proven(peer):  # files waiting for an unproven peer's INDEX come to it
            for file_index, heir in self.owners.moves():
                if not self._debts.proven(heir) and heir is not peer:
                    self.owners.begin_move(file_index, peer)
                    self._debts.unask(heir, file_index)
                    self._handed_on.setdefault(heir, set()).add(file_index)
                    self._attempts.answered(heir, [file_index])  # nor is it blamed should it die
                    sends += self._job(peer, [file_index])
        if self._dispatch is not None:  # the plan started: its share, from the most loaded
            for file_index in self.owners.share_for(peer):
                sends += self._job(peer, [file_index])
            self._deal_due = True  # and extra reads, so that it reads a share of samples
        return self._sent(sends, merge=True)

    def unreadable(self, peer: Peer, file_index: int, unit_id: int | None) -> list[Send] | None:
        """``peer`` is refused for a file it cannot read, which moves to the live worker with
        the lowest load not refused for it (checked by its INDEX like any move); the failed
        unit is sent again (rows of that file wait for the new owner). None when no live
        worker is left to try: the run ends with the worker's error, naming host and file."""
        if not 0 <= file_index < len(self.config.files):
            self._unexpected(peer, f"{messages.Error.KIND} of file {file_index}")
            return None
        self.owners.refuse(file_index, peer)  # it no longer owns or takes the file
        self.readers.refuse(file_index, peer)  # nor reads it besides the owner
        self._attempts.answered(peer, [file_index])
        self._counters.unreadable_files += 1
        self._log.error(
            "worker %s on host %s cannot read %r: refused for that file, which moves",
            peer.name, peer.host, self.config.files[file_index],
        )  # fmt: skip
        self._debts.answered(peer, [file_index])
        sends: list[Send] = []
        if self.owners.owner(file_index) is None and self.owners.taker(file_index) is None:
            moved = self._move(file_index, exclude=peer)
            if moved is None:
                return None
            sends += moved
        if unit_id is not None and self._dispatch is not None:  # none in flight before the plan
            sends += self._dispatch.send_one_again(peer, unit_id)
        self._deal_due = True  # its share from files it can read
        return self._sent(sends, merge=True)

    @property
    def waiting_for_workers(self) -> bool:
        return self.owners.any_unowned  # files with neither an owner nor a taker (O(1))

    @property
    def parked_batches(self) -> set[int]:
        """Batches with rows waiting for a file's new owner (its INDEX, or a joiner)."""
        return set() if self._dispatch is None else self._dispatch.parked_batches

    def _refuse_differing(self, file_index: int) -> None:
        """Raise DataError, naming host, file and video, when a live worker was refused
        ``file_index`` as an extra reader for another copy and no live worker may take it (as
        when an heir's own INDEX differs: :meth:`_check_moved`)."""
        differing = self.sharing.differing_copy(file_index, self.owners.live)
        if differing is None:
            return
        peer, what = differing
        raise DataError(
            f"{self.config.files[file_index]!r} on host {peer.host} (worker {peer.name}) "
            f"differs from the planned index ({what}), and no other live worker has the "
            "planned copy"
        )

    def _move(self, file_index: int, exclude: Peer | None = None) -> list[Send] | None:
        """Ask the live worker with the lowest load (not refused for it; none silent while
        holding work if another may take it: ``heard_first``; one that has shown it
        delivers, or a local one, before any other) to take over ``file_index``; None if
        there is none. An indexed file is owned once the worker's INDEX matches; one not
        indexed yet is owned at once (its INDEX is the first); either way the worker owes
        that INDEX within ``unit_timeout_s`` (the session's deadline)."""
        candidates = self.owners.candidates(file_index, exclude)
        if not candidates:
            return None
        candidates = heard_first(candidates, time.monotonic())  # not one about to be lost
        load = self.owners.load
        if self.sharing.heir(file_index, candidates, load) is not None:
            # A reader of the file already (its copy checked): it owns it now, no JOB.
            return [] if self._dispatch is None else self._dispatch.unpark()
        proven = self._debts.proven
        heir = min(candidates, key=lambda p: (not proven(p), load(p), p.identity))
        self.sharing.taking(file_index, heir)  # a pending extra reader: the taker's INDEX
        if self._dispatch is not None or file_index in self._answers:  # indexed already
            self.owners.begin_move(file_index, heir)
        else:
            self.owners.assign(file_index, heir)
        return self._job(heir, [file_index])
