"""The scheduler of HDF5 clips: files shared out, indexed, planned, cut into units.

Handshake: every file goes to one worker (largest first, each to the least loaded: see
:func:`assign_files`), which indexes it and answers its videos (INDEX, or many files in one
INDEX_BATCH); once every file is indexed the plan starts. When the index of these very files
is known already (``known``: an earlier iteration, files unchanged) and every worker is
local, the plan starts at once and the JOBs ask for no index (``send_index=False``). From
then on each batch of the plan is one UNIT per worker that reads some of its rows' files, its
parts assembled and released by a :class:`~h5feed.consumer.hdf5.dispatch.Dispatch` (dispatch
and data; shared-memory slots: :mod:`~h5feed.consumer.hdf5.batch_slots`; which parts are
taken: :mod:`~h5feed.consumer.hdf5.parts`).

Hand-over: a lost worker's files go to the live workers, lowest load first (files it is
taking over count: :meth:`~h5feed.consumer.hdf5.file_owners.FileOwners.load`), with a JOB
each (a file a live peer was taking over from it, a joiner's share, stays with that peer: its
INDEX decides), and every unit it had not answered is sent again to the files' new owners. A
part the lost worker sends after all is no longer expected and is dropped by unit id: exactly
once still holds. A worker that joins during the iteration gets the files nobody owns, then
files from the most loaded workers until it holds its share (elastic join; also while a lost
worker's files are still moving to a survivor); batches do not change
(they depend on seed, epoch and sample only).

Work follows cores, not files: once the index is known, and at the first dispatch after
each join, loss or refusal, files are dealt to *extra readers* so that every worker can make
its fair share of the samples (:mod:`~h5feed.consumer.hdf5.sharing`, the rule in
:func:`~h5feed.consumer.hdf5.file_readers.deal`); a batch's rows of a file go whole to its
reader with the fewest rows in flight (the dispatch). A lost owner's file goes first to a
confirmed extra reader of it, with no JOB.

Who owns each file, who takes it over and who is refused it is one record,
:class:`~h5feed.consumer.hdf5.file_owners.FileOwners` (``owners``); this scheduler decides when
files move (handshake, checks of an INDEX, hand-over) and hands the rows to the dispatch.

Every INDEX an heir or a joiner sends for a file already indexed is compared with the planned
index before that worker gets any row of the file: until then the file stays with its old
owner (a join) or its rows wait (a lost owner's file). A mismatch (another copy of the file
on that host) refuses that worker for that file, naming host, file and video, and the file
goes to another worker; with none left, the iteration ends with that error.

A worker that cannot read a file (its ERROR of a ``FileReadError``, at its JOB or in a unit)
is refused for that file, which moves the same way (:meth:`HdfScheduler.unreadable`); the
failed unit is sent again. With nobody left to try, the worker's error ends the iteration.

Proof before work (:class:`~h5feed.consumer.hdf5.index_debts.IndexDebts`): a peer has shown
it can deliver once it sent an INDEX that was taken or a part that was expected; local
workers are the trainer's own. A file moves to a peer that has not (a remote producer that
only said hello) only when no live peer that has, and no local worker, is there; a local
worker that joins takes over every file still waiting for such a peer's INDEX (that peer's
answer for it, when it comes, is late: dropped without counting it malformed). Whoever is
asked for an INDEX owes it from then (``Peer.owes_since``, renewed by each INDEX it sends):
one that sends none for ``unit_timeout_s`` is lost by the session's deadline and the file
moves on. No peer gets rows of a file before its INDEX of that file: rows wait (parked), and
the wait is bounded by the owing peer's deadline.

With no live worker left, the lost worker's files and rows wait for one to join
(``waiting_for_workers``; the loop bounds the wait). A slot whose rows were taken back from a
worker that may still run stays out of the slot pool until that process is gone
(:meth:`~h5feed.consumer.hdf5.batch_slots.BatchSlots.hold_until_gone`): a late writer never
touches another batch.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterator, Sequence

from h5feed.common.errors import DataError
from h5feed.common.protocol import messages
from h5feed.common.system.logs import consumer_log
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.code_identities import identities_of
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.scheduler import Figures, Send
from h5feed.consumer.hdf5.bad_data import SkipLog
from h5feed.consumer.hdf5.batch_slots import BatchSlots
from h5feed.consumer.hdf5.dispatch import Dispatch, planned_batches
from h5feed.consumer.hdf5.file_moves import FileMoves
from h5feed.consumer.hdf5.file_owners import FileOwners
from h5feed.consumer.hdf5.index_answers import IndexAnswers, indexed_files
from h5feed.consumer.hdf5.index_attempts import IndexAttempts
from h5feed.consumer.hdf5.index_debts import IndexDebts
from h5feed.consumer.hdf5.sharing import Sharing
from h5feed.consumer.hdf5.units import (
    assign_files,
    file_size,
    first_difference,
)
from h5feed.consumer.options import HdfConfig
from h5feed.consumer.plan.epoch_plan import Cursor, FileColumns, Index
from h5feed.consumer.plan.rest import Rest
from h5feed.consumer.telemetry.stats import Counters


class HdfScheduler(FileMoves):
    """Runs the HDF5 plan of one iteration (see the module docstring; its moves of files,
    on a loss, a join or a file a worker cannot read: :mod:`~h5feed.consumer.hdf5.file_moves`)."""

    def __init__(
        self,
        config: HdfConfig,
        job_id: str,
        epochs: Iterator[int],
        start: Cursor,
        counters: Counters,
        known: Index | None = None,
        file_sizes: Sequence[int] | None = None,
        rest: Rest | None = None,
    ) -> None:
        """``known``: the index of these files as local workers last read them, unchanged
        since (see :meth:`start`); ``file_sizes``: their sizes, if just stat'ed (the files
        are shared out by size); ``rest``: the rest of an epoch after a change of topology
        (:mod:`h5feed.consumer.plan.rest`), planned for its epoch."""
        self.config = config
        self.job_id = job_id
        # The transform's module as its file is now: a worker running another copy refuses.
        self._code = identities_of(config.clip.transform)
        self._log = consumer_log(job_id)
        self._epochs = epochs
        self._start = start
        self._rest = rest
        self._counters = counters
        #: Who owns each file, who takes it over once its INDEX matches, who is refused it.
        self.owners = FileOwners()
        #: Who reads each file besides its owner (work follows cores, not files).
        self.sharing = Sharing(self.owners, tuple(config.files), job_id, counters)
        self.readers = self.sharing.readers
        self._answers = IndexAnswers(config.files, config.file_labels)  # each file's videos
        self._debts = IndexDebts()  # who owes an INDEX since when; who has shown it delivers
        # Files whose INDEX a peer was asked for, handed on to a joiner before it answered:
        # its answer for them is late, not unexpected (dropped without counting).
        self._handed_on: dict[Peer, set[int]] = {}
        self._known = known
        self.file_sizes = file_sizes
        #: Whether the plan started from the known index (no INDEX asked of the owners).
        self.planned_from_known = False
        self._slots = BatchSlots.for_iteration(config, job_id)  # None: over the socket
        self._dispatch: Dispatch | None = None  # once the plan starts (the index is known)
        self._deal_due = False  # extra readers to deal at the next dispatch (sharing.py)
        options = config.options
        # Which files a worker was indexing when it died: reported after as many deaths as a
        # unit may cost (max_unit_attempts; hdf5/index_attempts.py), never left to a timeout.
        self._attempts = IndexAttempts(options.processes.max_unit_attempts)
        self.skips = SkipLog(  # on_error: samples skipped for bad frames
            config.data.on_error, config.data.max_skipped, options.plan.shard,
            config.data.clips_per_video, self._log,
        )  # fmt: skip

    @property
    def index(self) -> Index | None:
        """The index of the iteration's files, once the plan started."""
        return None if self._dispatch is None else self._dispatch.index

    # -- handshake -------------------------------------------------------------------------

    def start(self, peers: Sequence[Peer]) -> list[Send]:
        root = self.config.data.data_root
        files = self.config.files
        sizes = self.file_sizes
        if sizes is None or len(sizes) != len(files):
            sizes = [file_size(os.path.join(root, p) if root else p) for p in files]
        order = sorted(peers, key=lambda p: p.identity)
        for peer in order:
            self.owners.add_peer(peer)
        for file_index, slot in enumerate(assign_files(sizes, len(order)).tolist()):
            self.owners.assign(file_index, order[slot])
        known, self._known = self._known, None
        if known is not None and known.files == tuple(files) and all(p.local for p in order):
            # Local workers read these very files (same paths, sizes, mtimes) to this index
            # before: the plan starts now, and the workers open and check their files
            # without sending it again (about half of a second iteration at 10,000 files).
            # A worker that takes a file over later still sends its INDEX, compared.
            self.sharing.learnt_here()
            self._plan_from(known)
            self.planned_from_known = True
            return [
                s
                for p in order
                for s in self._job(p, sorted(self.owners.files_of(p)), send_index=False)
            ]
        return self._sent(  # + spec
            [s for p in order for s in self._job(p, sorted(self.owners.files_of(p)))]
        )

    def on_control(self, peer: Peer, message: messages.Message) -> list[Send]:
        files = indexed_files(message)
        if files is None:
            self._unexpected(peer, message)
            return []
        return self._indexed(peer, files)

    def _indexed(self, peer: Peer, files: list[tuple[int, FileColumns]]) -> list[Send]:
        """``peer``'s index of ``files``: the plan's first (its owner's), or a check of a
        file it takes over; anything else is dropped and counted."""
        owners = self.owners
        files = self._without_handed_on(peer, files)
        if not files:
            return []
        pending = self.readers.pending
        if not all(
            owners.taker(f) is peer or owners.owner(f) is peer or pending(f, peer)
            for f, _c in files
        ):
            self._unexpected(peer, messages.IndexBatch.KIND)
            return []
        self._debts.delivered(peer)
        self._debts.answered(peer, [file_index for file_index, _columns in files])
        files = self._answers.labelled(files)  # decided from the file list: see options
        self._attempts.answered(peer, [f for f, _c in files])
        sends: list[Send] = []
        for file_index, columns in files:
            if pending(file_index, peer):  # an extra reader: rows once its copy is checked
                planned = self._answers.planned(file_index, self.index)
                if not self.sharing.check(peer, file_index, planned, columns):
                    self._deal_due = True  # refused: its share from other files
            elif self.owners.taker(file_index) is peer:
                sends += self._check_moved(peer, file_index, columns)
            else:
                if peer.local and file_index not in self._answers:
                    self.sharing.learnt_here(file_index)  # the plan's index, read here
                self._answers.add(file_index, columns)  # the first stays
        if self._answers.complete and self.index is None:
            self._plan_from(self._answers.index())
        return self._sent(sends)  # with the JOBs held behind those answered, if they may go

    def _without_handed_on(
        self, peer: Peer, files: list[tuple[int, FileColumns]]
    ) -> list[tuple[int, FileColumns]]:
        """``files`` less those handed on from ``peer`` to a joiner before it answered (its
        late answer for them: dropped, not counted as unexpected; it still delivers)."""
        handed_on = self._handed_on.get(peer)
        if not handed_on:
            return files
        late = {f for f, _c in files if f in handed_on}
        handed_on -= late
        if not handed_on:
            del self._handed_on[peer]
        if late:
            self._debts.delivered(peer)
            self._log.debug("%s indexed %s, handed on meanwhile: dropped", peer, sorted(late))
        return [(f, c) for f, c in files if f not in late]

    def _check_moved(self, peer: Peer, file_index: int, columns: FileColumns) -> list[Send]:
        """``peer`` indexed a file it is to take over: it owns the file if its copy is the
        planned one, else it is refused for the file and another worker is asked."""
        planned = self._answers.planned(file_index, self.index)
        what = first_difference(planned, columns)
        if what is None:
            self.owners.confirm(file_index)
            self._deal_due = True  # its previous owner may read it no more: deal again
            if peer.local:
                self.sharing.learnt_here(file_index)
            # Rows parked for it go now (none before the plan: a file moved while others index).
            return [] if self._dispatch is None else self._dispatch.unpark()
        path = self.config.files[file_index]
        self._counters.index_mismatches += 1
        self.owners.refuse(file_index, peer)  # its move of the file ends
        self._log.error(
            "worker %s on host %s has another copy of %r (%s): refused for that file",
            peer.name, peer.host, path, what,
        )  # fmt: skip
        if self.owners.owner(file_index) is not None:
            return []  # it stays with its owner (a joiner's share, refused)
        sends = self._move(file_index, exclude=peer)
        if sends is None:
            raise DataError(
                f"{path!r} on host {peer.host} (worker {peer.name}) differs from the planned "
                f"index ({what}), and no other live worker has the planned copy"
            )
        return sends

    def _plan_from(self, index: Index) -> None:
        """Start the plan from ``index`` (extra readers are dealt at the first dispatch)."""
        batches = planned_batches(index, self.config, self._epochs, self._start, self._rest)
        self._dispatch = Dispatch(
            self.config, self.job_id, index, batches, self.owners, self._slots,
            self._counters, self.skips, self.readers,
        )  # fmt: skip
        self._log.info("indexed %d files, %d videos", len(self.config.files), index.num_videos)
        self._deal_due = True

    def _deal(self) -> list[Send]:
        """Extra readers dealt among the live workers (:mod:`~h5feed.consumer.hdf5.sharing`)
        when the topology changed since the last deal (plan start, a join, a loss, a
        refusal: one deal for all the changes of a loop pass), once the plan's index is
        known; their JOBs, which go ahead of any unit."""
        index = self.index
        if index is None or not self._deal_due:
            return []
        self._deal_due = False
        sends = self.sharing.deal(index, lambda p, files, ask: self._job(p, files, ask))
        return self._sent(sends, merge=True)

    @property
    def ready(self) -> bool:
        return self.index is not None

    @property
    def handshake_answers(self) -> int:
        return len(self._answers)

    def handshake_waiting(self) -> str:
        return self._answers.waiting()

    # -- dispatch and data (the plan's: see dispatch.py) ------------------------------------

    def next_units(self, gate: CreditGate, peers: Sequence[Peer]) -> list[Send]:
        dispatch = self._require_dispatch()
        jobs = self._deal()  # extra readers' JOBs first: their units come after
        return jobs + dispatch.next_units(gate) if jobs else dispatch.next_units(gate)

    def take_released(self) -> list[Batch]:
        return [] if self._dispatch is None else self._dispatch.take_released()

    def on_data(self, peer: Peer, data: messages.Data) -> list[Batch]:
        if self._dispatch is None:  # no unit is in flight before the plan
            self._counters.dropped_parts += 1
            return []
        batches = self._dispatch.on_data(peer, data)
        if batches is None:  # dropped
            return []
        self._debts.delivered(peer)
        return batches

    @property
    def finished(self) -> bool:
        return self._dispatch is not None and self._dispatch.finished

    def describe(self, unit_id: int) -> str:
        return f"unit {unit_id}" if self._dispatch is None else self._dispatch.describe(unit_id)

    def samples_of(self, unit_id: int) -> list[tuple[Hashable, str]]:
        return [] if self._dispatch is None else self._dispatch.samples_of(unit_id)

    @property
    def learnt(self) -> Index | None:  # what a later iteration starts from, once built
        return self.index

    @property
    def epoch_length(self) -> int | None:
        index = self.index
        return None if index is None else self.config.epoch_length(index)

    def figures(self) -> Figures:  # shared-memory slots made, files owned, samples skipped
        slots = self._slots.size if self._slots is not None else 0
        return Figures(slots, self.sharing.files_read, self.skips.snapshot())

    def close(self) -> None:
        if self._slots is not None:
            self._slots.close()  # batches already handed out keep their memory

    def _require_dispatch(self) -> Dispatch:
        if self._dispatch is None:  # unreachable: the loop dispatches once ready
            raise RuntimeError("no batch is planned before the index is built")
        return self._dispatch
