"""The scheduler of HDF5 clips: files shared out, indexed, planned, cut into units.

Handshake: every file goes to one worker (largest first, each to the least loaded: see
:func:`assign_files`), which indexes it and answers its videos (INDEX, or many files in one
INDEX_BATCH); once every file is indexed the plan starts. When the index of these very files
is known already (``known``: an earlier iteration, files unchanged) and every worker is
local, the plan starts at once and the JOBs ask for no index (``send_index=False``). Each
batch of the plan (:class:`~h5feed.consumer.plan.EpochPlan`, from the iteration's start
cursor) is one UNIT per worker that owns some of its rows' files; the parts are assembled
(:class:`~h5feed.consumer.core.assembly.BatchAssembler`, in a shared-memory slot when a local
worker makes part of the batch) and released in plan order (``deterministic``) or as
completed.

Hand-over: a lost worker's files go to the live workers (fewest files first) with a JOB
each, and every unit it had not answered is sent again to the files' new owners. A part the
lost worker sends after all is no longer expected and is dropped by unit id: exactly once
still holds. A worker that joins during the iteration gets the files nobody owns, then files
from the most loaded workers until it holds its share (elastic join); batches do not change
(they depend on seed, epoch and sample only).

Who owns each file, who takes it over and who is refused it is one record,
:class:`~h5feed.consumer.hdf5.file_owners.FileOwners` (``owners``); this scheduler decides when
files move (handshake, checks) and what goes where (dispatch, data).

Every INDEX an heir or a joiner sends for a file already indexed is compared with the planned
index before that worker gets any row of the file: until then the file stays with its old
owner (a join) or its rows wait (a lost owner's file). A mismatch (another copy of the file
on that host) refuses that worker for that file, naming host, file and video, and the file
goes to another worker; with none left, the iteration ends with that error.

A worker that cannot read a file (its ERROR of a ``FileReadError``, at its JOB or in a unit)
is refused for that file, which moves the same way (:meth:`HdfScheduler.unreadable`); the
failed unit is sent again. With nobody left to try, the worker's error ends the iteration.

Proof before work: a peer has shown it can deliver once it sent an INDEX that was taken or
a part that was expected (``_delivered``); local workers are the trainer's own. A file moves
to a peer that has not (a remote producer that only said hello) only when no live peer that
has, and no local worker, is there; a local worker that joins takes over every file still
waiting for such a peer's INDEX. Whoever is asked for an INDEX owes it from then
(``Peer.owes_since``, renewed by each INDEX it sends): one that sends none for
``unit_timeout_s`` is lost by the session's deadline and the file moves on. No peer gets rows
of a file before its INDEX of that file: rows wait (parked), and the wait is bounded by the
owing peer's deadline.

With no live worker left, the lost worker's files and rows wait for one to join
(``waiting_for_workers``; the loop bounds the wait). A slot whose rows were taken back from a
worker that may still run stays out of the slot pool until that process is gone
(:meth:`SlotPool.hold_until_gone`): a late writer never touches another batch.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Hashable, Iterator, Sequence

import numpy as np

from h5feed.common import messages
from h5feed.common.errors import DataError, FileReadError, H5FeedError
from h5feed.common.logs import consumer_log
from h5feed.consumer.core.assembly import Batch, BatchAssembler
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.ledger import Ledger, Peer
from h5feed.consumer.core.malformed import drop_malformed
from h5feed.consumer.core.ordering import PlannedRelease
from h5feed.consumer.core.scheduler import Figures, Reassignment, Send
from h5feed.consumer.core.slots import Slot, SlotPool, supported
from h5feed.consumer.hdf5.bad_data import SkipLog
from h5feed.consumer.hdf5.file_owners import FileOwners
from h5feed.consumer.hdf5.index_attempts import IndexAttempts
from h5feed.consumer.hdf5.units import (
    assign_files,
    file_size,
    first_difference,
    merge_jobs,
    split_job,
    unit_rows,
)
from h5feed.consumer.options import HdfConfig
from h5feed.consumer.plan import (
    Cursor,
    EpochPlan,
    FileColumns,
    Index,
    PlannedBatch,
    epoch_length,
)
from h5feed.consumer.stats import Counters

_HOST = socket.gethostname()

#: A unit's record: the positions of its rows in the batch, and whether they go to a slot.
_Work = tuple[np.ndarray, bool]


class HdfScheduler:
    """Runs the HDF5 plan of one iteration (see the module docstring)."""

    def __init__(
        self,
        config: HdfConfig,
        job_id: str,
        epochs: Iterator[int],
        start: Cursor,
        counters: Counters,
        known: Index | None = None,
        file_sizes: Sequence[int] | None = None,
    ) -> None:
        """``known``: the index of these files as local workers last read them, unchanged
        since (see :meth:`start`); ``file_sizes``: their sizes, if just stat'ed (the files
        are shared out by size)."""
        self.config = config
        self.job_id = job_id
        self._log = consumer_log(job_id)
        self.index: Index | None = None
        self._epochs = epochs
        self._start = start
        self._counters = counters
        self._ledger: Ledger[_Work] = Ledger()
        #: Who owns each file, who takes it over once its INDEX matches, who is refused it.
        self.owners = FileOwners()
        self._parked: list[tuple[int, np.ndarray]] = []  # (seq, positions) of unowned files
        self._videos: dict[int, FileColumns] = {}  # each indexed file's videos
        self._delivered: set[Peer] = set()  # peers that sent an INDEX taken or a part expected
        self._owed: dict[Peer, set[int]] = {}  # peer -> files whose INDEX it was asked for
        self._known = known
        self.file_sizes = file_sizes
        #: Whether the plan started from the known index (no INDEX asked of the owners).
        self.planned_from_known = False
        self._assembler: BatchAssembler | None = None
        self._planned: PlannedRelease[PlannedBatch, Batch] | None = None  # once indexed
        self._pool = self._make_pool()
        options = config.options
        # Which files a worker was indexing when it died: reported after as many deaths as a
        # unit may cost (max_unit_attempts; hdf5/index_attempts.py), never left to a timeout.
        self._attempts = IndexAttempts(options.max_unit_attempts)
        self.skips = SkipLog(  # on_error: samples skipped for bad frames
            options.on_error, options.max_skipped, options.shard, options.clips_per_video,
            self._log,
        )  # fmt: skip

    # -- handshake -------------------------------------------------------------------------

    def start(self, peers: Sequence[Peer]) -> list[Send]:
        root = self.config.options.data_root
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

    def _sent(self, sends: list[Send], merge: bool = False) -> list[Send]:
        """``sends`` as they go out (with ``merge``: JOBs merged per peer, suspects alone),
        their JOBs recorded for :class:`IndexAttempts`."""
        if merge:
            sends = merge_jobs(sends, self._attempts.suspects)
        self._attempts.sent(sends)
        return sends

    def _job(self, peer: Peer, files: list[int], send_index: bool = True) -> list[Send]:
        """The job, with ``files`` to open, in parts (:func:`split_job`: a worker that has
        the job already adds the files of the next part)."""
        refs = tuple(messages.FileRef(i, self.config.files[i]) for i in files)
        clip = self.config.clip
        if send_index and files:
            self._ask(peer, files)
        job = messages.Job(
            self.job_id, refs, clip.to_wire(), self.config.layout.to_wire(),
            self.config.options.index_cache, self.config.options.on_error, send_index,
        )  # fmt: skip
        return [Send(peer, part) for part in split_job(job)]

    def on_control(self, peer: Peer, message: messages.Message) -> list[Send]:
        if isinstance(message, messages.Index):
            videos = message.videos
            columns = FileColumns(
                tuple(v.name.encode() for v in videos),
                np.array([v.frames for v in videos], np.int64),
                np.array([v.label for v in videos], np.int64),
            )
            return self._indexed(peer, [(message.file, columns)])
        if isinstance(message, messages.IndexBatch):
            ends = np.cumsum(message.counts).tolist()
            return self._indexed(
                peer,
                [
                    (
                        file_index,
                        FileColumns(
                            message.names[end - count : end],
                            message.frames[end - count : end],
                            message.labels[end - count : end],
                        ),
                    )
                    for file_index, end, count in zip(
                        message.files, ends, message.counts, strict=True
                    )
                ],
            )
        self._unexpected(peer, message)
        return []

    def _indexed(self, peer: Peer, files: list[tuple[int, FileColumns]]) -> list[Send]:
        """``peer``'s index of ``files``: the plan's first (its owner's), or a check of a
        file it takes over; anything else is dropped and counted."""
        owners = self.owners
        if not all(owners.taker(f) is peer or owners.owner(f) is peer for f, _c in files):
            self._unexpected(peer, messages.IndexBatch.KIND)
            return []
        self._delivered.add(peer)
        self._answered(peer, [file_index for file_index, _columns in files])
        labels = self.config.file_labels
        if labels is not None:  # decided from the file list (one video per file): see options
            files = [
                (f, dataclasses.replace(c, labels=np.full(len(c.frames), labels[f], np.int64)))
                for f, c in files
            ]
        self._attempts.answered(peer, [f for f, _c in files])
        sends: list[Send] = []
        for file_index, columns in files:
            if self.owners.taker(file_index) is peer:
                sends += self._check_moved(peer, file_index, columns)
            elif file_index not in self._videos:
                self._videos[file_index] = columns
        if len(self._videos) == len(self.config.files) and self.index is None:
            self._plan_start()
        return self._sent(sends)

    def _unexpected(self, peer: Peer, message: messages.Message | str) -> None:
        kind = message if isinstance(message, str) else message.KIND
        self._counters.malformed_messages += 1
        self._log.warning("dropped an unexpected %s message from %s", kind, peer)

    def _check_moved(self, peer: Peer, file_index: int, columns: FileColumns) -> list[Send]:
        """``peer`` indexed a file it is to take over: it owns the file if its copy is the
        planned one, else it is refused for the file and another worker is asked."""
        planned = self._planned_columns(file_index)
        what = first_difference(planned, columns)
        if what is None:
            self.owners.confirm(file_index)
            return self._unpark()
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

    def _plan_start(self) -> None:
        files = self.config.files
        self._plan_from(Index.from_columns(files, [self._videos[i] for i in range(len(files))]))

    def _plan_from(self, index: Index) -> None:
        self.index = index
        files = self.config.files
        slots = None
        if self._pool is not None:
            slots = (self._pool, self._clip_shape())
        self._assembler = BatchAssembler(self.index, self.config.clip.transform, slots)
        self._planned = PlannedRelease(self._batches(self.index), self.config.options.deterministic)
        self._log.info("indexed %d files, %d videos", len(files), self.index.num_videos)

    @property
    def ready(self) -> bool:
        return self.index is not None

    @property
    def handshake_answers(self) -> int:
        return len(self._videos)

    def handshake_waiting(self) -> str:
        missing = sorted(set(range(len(self.config.files))) - set(self._videos))
        first = self.config.files[missing[0]] if missing else "?"
        return f"no worker indexed {first!r} ({len(missing)} files left)"

    def _batches(self, index: Index) -> Iterator[PlannedBatch]:
        options = self.config.options
        for epoch in self._epochs:
            plan = EpochPlan(index, self.config.clip, options.plan_options(), epoch)
            if len(plan) == 0:  # else epochs=None would spin through empty epochs forever
                raise H5FeedError(
                    f"an epoch has no batch: {len(plan.order)} samples in shard {options.shard} "
                    f"of {index.num_videos} videos, batch_size={options.batch_size}, "
                    f"drop_remainder={options.drop_remainder}"
                )
            first = self._start.batch if epoch == self._start.epoch else 0
            yield from plan.batches_from(first)

    # -- dispatch --------------------------------------------------------------------------

    def next_units(self, gate: CreditGate, peers: Sequence[Peer]) -> list[Send]:
        sends: list[Send] = []
        for seq, planned in self._require_planned().dispatch(gate):
            sends += self._units(seq, planned, None)
        return sends

    def _units(self, seq: int, planned: PlannedBatch, subset: np.ndarray | None) -> list[Send]:
        """One unit per owner of the rows of batch ``seq`` (all rows, or those at ``subset``)."""
        index, assembler = self._require_index(), self._require_assembler()
        rows = unit_rows(index, planned)
        chosen = np.arange(len(rows)) if subset is None else subset
        files = index.file_of_video[planned.videos[chosen]].tolist()
        by_owner: dict[Peer | None, list[int]] = {}
        for position, peer in zip(chosen.tolist(), self.owners.owners(files), strict=True):
            by_owner.setdefault(peer, []).append(position)
        owners = [peer for peer in by_owner if peer is not None]
        if subset is None:
            assembler.expect(seq, planned, len(by_owner), self._slot_for(owners))
        else:
            assembler.add_expected_parts(seq, len(by_owner) - 1)
        slot = assembler.slot(seq)
        sends = []
        for peer, positions in by_owner.items():
            if peer is None:  # rows of files nobody owns now: one part, sent once owned
                self._parked.append((seq, np.asarray(positions, np.int64)))
                continue
            in_slot = slot is not None and _shares_memory(peer)
            unit = self._ledger.issue(peer, seq, (np.asarray(positions, np.int64), in_slot))
            ref = None
            if in_slot and slot is not None:
                ref = messages.SlotRef(os.getpid(), slot.fd, len(rows), tuple(positions))
            unit_rows_ = tuple(rows[p] for p in positions)
            message = messages.Unit(self.job_id, unit.id, seq, planned.epoch, unit_rows_, ref)
            sends.append(Send(peer, message))
        return sends

    def _slot_for(self, owners: list[Peer]) -> Slot | None:
        """A shared-memory slot for a new batch, if a worker on this host makes part of it."""
        if self._pool is None or not any(_shares_memory(peer) for peer in owners):
            return None
        return self._pool.acquire()

    # -- data ------------------------------------------------------------------------------

    def on_data(self, peer: Peer, data: messages.Data) -> list[Batch]:
        unit = self._ledger.get(data.unit)
        samples = None if unit is None else self._samples(unit.seq, unit.work[0])
        if unit is None or unit.peer is not peer or list(data.samples) != samples:
            self._counters.dropped_parts += 1  # the session logs it at a bounded rate
            return []
        positions, in_slot = unit.work
        frames = data.arrays.get("frames")
        if frames is not None and in_slot:  # the worker could not map the slot
            self._counters.parts_copied_into_slots += 1
        if frames is None and in_slot:
            pool = self._pool
            nbytes = 0 if pool is None else pool.nbytes // self.config.options.batch_size
            nbytes *= len(positions)
        elif self._is_bad_part(frames, len(positions)):
            drop_malformed(peer, unit.id, "a bad frames array", self._counters, self._log)
            return []
        else:
            nbytes = frames.nbytes if frames is not None else 0
        invalid = None
        if data.skipped:  # bad frames, zero-filled (on_error): counted, bounded, may raise
            planned = self._require_assembler().planned(unit.seq)
            invalid = self.skips.record(
                self._require_index(), planned, positions, data.skipped, str(peer)
            )
        self._ledger.complete(peer, unit.id)
        self._delivered.add(peer)
        peer.received.record(len(positions), nbytes)
        batch = self._require_assembler().add(unit.seq, positions, frames, invalid)
        return [] if batch is None else self._require_planned().release(unit.seq, batch)

    def _samples(self, seq: int, positions: np.ndarray) -> list[int]:
        planned = self._require_assembler().planned(seq)
        return planned.samples[positions].tolist()  # type: ignore[no-any-return]

    def _is_bad_part(self, frames: np.ndarray | None, rows: int) -> bool:
        """Whether a part's ``frames`` are not uint8 [rows, clip_len, H, W, 3]."""
        clip = self.config.clip
        return (
            frames is None
            or frames.ndim < 1
            or frames.shape[0] != rows
            or (  # a transform decides the rest of the shape and the dtype
                clip.transform is None
                and (
                    frames.dtype != np.uint8
                    or frames.ndim != 5
                    or frames.shape[1] != clip.clip_len
                    or frames.shape[4] != 3
                )
            )
        )

    @property
    def finished(self) -> bool:
        return self._planned is not None and self._planned.finished

    # -- failures --------------------------------------------------------------------------

    def owns(self, peer: Peer) -> bool:
        return self.owners.holds(peer)

    def reassign(self, lost: Peer, heirs: Sequence[Peer], confirmed_dead: bool) -> Reassignment:
        """(Also: FileReadError when ``lost`` died indexing a file that killed its holders
        the restart rule's number of times: see :mod:`~h5feed.consumer.hdf5.index_attempts`.)"""
        # Its own files, and those it was to take over from a lost owner (a live owner keeps
        # the files it was to hand over in a join).
        files = self.owners.release(lost)
        for file_index in self._attempts.left(lost, lost.lost_cause):
            deaths = self._attempts.deaths[file_index]
            raise FileReadError(
                f"every worker that indexed it died ({deaths} times; the last: worker {lost}, "
                f"{lost.lost_cause}): a file that crashes HDF5 or the reader (crafted or "
                "damaged) is refused",
                file=self.config.files[file_index],
                host=lost.host,
                number=file_index,
            )
        self._delivered.discard(lost)
        self._owed.pop(lost, None)
        units = self._ledger.take_back(lost)
        if not files and not units:
            return Reassignment([], 0)
        sends: list[Send] = []
        for file_index in files:
            sends += self._move(file_index) or []  # nobody left: it waits for a joiner
        if units:
            assembler = self._require_assembler()
            for unit in units:
                positions, in_slot = unit.work
                slot = assembler.slot(unit.seq)
                if in_slot and slot is not None and not confirmed_dead and self._pool:
                    self._pool.hold_until_gone(slot, lost.pid)
                sends += self._units(unit.seq, assembler.planned(unit.seq), positions)
        return Reassignment(self._sent(sends, merge=True), len(units))

    def join(self, peer: Peer) -> list[Send]:
        self.owners.add_peer(peer)
        if not self.owners.started:  # before start(): it is shared out with the rest
            return []
        sends: list[Send] = []
        for file_index in self.unowned_files():
            sends += self._move(file_index) or []
        if self._proven(peer):  # files waiting for an unproven peer's INDEX come to it
            for file_index, heir in self.owners.moves():
                if not self._proven(heir) and heir is not peer:
                    self.owners.begin_move(file_index, peer)
                    self._unask(heir, file_index)
                    sends += self._job(peer, [file_index])
        if self.index is not None:  # its share, taken from the most loaded
            for file_index in self.owners.share_for(peer):
                sends += self._job(peer, [file_index])
        return self._sent(sends, merge=True)

    def unreadable(self, peer: Peer, file_index: int, unit_id: int | None) -> list[Send] | None:
        """``peer`` is refused for a file it cannot read, which moves to the live worker with
        the fewest files not refused for it (checked by its INDEX like any move); the failed
        unit is sent again (rows of that file wait for the new owner). None when no live
        worker is left to try: the run ends with the worker's error, naming host and file."""
        if not 0 <= file_index < len(self.config.files):
            self._unexpected(peer, f"{messages.Error.KIND} of file {file_index}")
            return None
        self.owners.refuse(file_index, peer)  # it no longer owns or takes the file
        self._attempts.answered(peer, [file_index])
        self._counters.unreadable_files += 1
        self._log.error(
            "worker %s on host %s cannot read %r: refused for that file, which moves",
            peer.name, peer.host, self.config.files[file_index],
        )  # fmt: skip
        self._answered(peer, [file_index])
        sends: list[Send] = []
        if self.owners.owner(file_index) is None and self.owners.taker(file_index) is None:
            moved = self._move(file_index, exclude=peer)
            if moved is None:
                return None
            sends += moved
        unit = self._ledger.take_one(peer, unit_id) if unit_id is not None else None
        if unit is not None:
            positions, _in_slot = unit.work  # it answered: it writes no more into the slot
            planned = self._require_assembler().planned(unit.seq)
            sends += self._units(unit.seq, planned, positions)
        return self._sent(sends, merge=True)

    def unowned_files(self) -> list[int]:
        """Files with neither an owner nor a worker taking them over."""
        return self.owners.unowned()

    @property
    def waiting_for_workers(self) -> bool:
        return bool(self.unowned_files())

    @property
    def parked_batches(self) -> set[int]:
        """Batches with rows waiting for a file's new owner (its INDEX, or a joiner)."""
        return {seq for seq, _positions in self._parked}

    def _move(self, file_index: int, exclude: Peer | None = None) -> list[Send] | None:
        """Ask the live worker with the fewest files (not refused for it; one that has shown
        it delivers, or a local one, before any other) to take over ``file_index``; None if
        there is none. An indexed file is owned once the worker's INDEX matches; one not
        indexed yet is owned at once (its INDEX is the first); either way the worker owes
        that INDEX within ``unit_timeout_s`` (the session's deadline)."""
        candidates = self.owners.candidates(file_index, exclude)
        if not candidates:
            return None
        count = self.owners.count
        heir = min(candidates, key=lambda p: (not self._proven(p), count(p), p.identity))
        if self.index is not None or file_index in self._videos:
            self.owners.begin_move(file_index, heir)
        else:
            self.owners.assign(file_index, heir)
        return self._job(heir, [file_index])

    def _proven(self, peer: Peer) -> bool:
        """Whether ``peer`` has shown it delivers (or is one of the trainer's own workers)."""
        return peer.local or peer in self._delivered

    def _ask(self, peer: Peer, files: Sequence[int]) -> None:
        """``peer`` is asked for the INDEX of ``files``: it owes one from now on."""
        owed = self._owed.setdefault(peer, set())
        owed.update(files)
        if peer.owes_since is None:
            peer.owes_since = time.monotonic()

    def _answered(self, peer: Peer, files: Sequence[int]) -> None:
        """``peer`` answered for ``files``: its deadline starts again, or ends with its debt."""
        owed = self._owed.get(peer)
        if owed is None:
            return
        owed.difference_update(files)
        peer.owes_since = time.monotonic() if owed else None
        if not owed:
            del self._owed[peer]

    def _unask(self, peer: Peer, file_index: int) -> None:
        """``peer`` no longer owes the INDEX of ``file_index`` (it went to another)."""
        self._attempts.answered(peer, [file_index])  # nor is it blamed should it die
        owed = self._owed.get(peer)
        if owed is None:
            return
        owed.discard(file_index)
        if not owed:
            del self._owed[peer]
            peer.owes_since = None

    def _planned_columns(self, file_index: int) -> FileColumns:
        """The planned videos of ``file_index`` (taken from the index when the plan started
        from a known one)."""
        columns = self._videos.get(file_index)
        if columns is None:
            index = self._require_index()
            where = np.flatnonzero(index.file_of_video == file_index)
            columns = FileColumns(
                tuple(index.names[where].tolist()), index.frames[where], index.labels[where]
            )
            self._videos[file_index] = columns
        return columns

    def _unpark(self) -> list[Send]:
        """Send the parked rows whose files have owners now (the rest are parked again)."""
        if not self._parked:  # also before the plan (a file moved while others index)
            return []
        parked, self._parked = self._parked, []
        assembler = self._require_assembler()
        sends: list[Send] = []
        for seq, positions in parked:
            sends += self._units(seq, assembler.planned(seq), positions)
        return sends

    def describe(self, unit_id: int) -> str:
        unit = self._ledger.get(unit_id)
        if unit is None or self._assembler is None:
            return f"unit {unit_id}"
        planned = self._assembler.planned(unit.seq)
        return f"unit {unit_id} (batch {planned.index} of epoch {planned.epoch})"

    def samples_of(self, unit_id: int) -> list[tuple[Hashable, str]]:
        unit = self._ledger.get(unit_id)
        if unit is None or self._assembler is None or self.index is None:
            return []
        planned, index = self._assembler.planned(unit.seq), self.index
        span = self.config.clip.span
        out: list[tuple[Hashable, str]] = []
        for position in unit.work[0].tolist():
            video, start = int(planned.videos[position]), int(planned.starts[position])
            sample = int(planned.samples[position])
            name = (
                f"{index.file_names[video].decode(errors='replace')} video "
                f"{index.names[video].decode(errors='replace')!r} frames {start}-"
                f"{start + span - 1} (sample {sample} of epoch {planned.epoch})"
            )
            out.append(((planned.epoch, sample), name))
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()  # batches already handed out keep their memory

    # -- helpers ---------------------------------------------------------------------------

    @property
    def shared_memory_slots(self) -> int:
        """Shared-memory batch slots made so far (0: batches come over the socket)."""
        return self._pool.size if self._pool is not None else 0

    @property
    def learnt(self) -> Index | None:
        """The files' index, once built (see ``Scheduler.learnt``)."""
        return self.index

    @property
    def epoch_length(self) -> int | None:
        if self.index is None:
            return None
        options = self.config.options
        return epoch_length(self.index.num_videos * options.clips_per_video, options.plan_options())

    def figures(self) -> Figures:
        return Figures(self.shared_memory_slots, self.owners.count, self.skips.snapshot())

    def _make_pool(self) -> SlotPool | None:
        """A pool of shared-memory batch slots, when the clip's output size is known before
        decoding (``crop`` or ``resize`` set, and no transform, whose output shape only its
        first result tells)."""
        clip, options = self.config.clip, self.config.options
        height, width = clip.frame_shape
        if not (options.shared_memory and supported()):
            return None
        if height is None or width is None or clip.transform is not None:
            return None
        return SlotPool(options.batch_size * int(np.prod(self._clip_shape())), self.job_id)

    def _clip_shape(self) -> tuple[int, ...]:
        height, width = self.config.clip.frame_shape
        return (self.config.clip.clip_len, height or 0, width or 0, 3)

    def _require_index(self) -> Index:
        if self.index is None:  # unreachable: the plan starts after the index is built
            raise RuntimeError("dispatch before the index was built")
        return self.index

    def _require_planned(self) -> PlannedRelease[PlannedBatch, Batch]:
        if self._planned is None:  # unreachable: dispatch and data come after the index
            raise RuntimeError("no batch is planned before the index is built")
        return self._planned

    def _require_assembler(self) -> BatchAssembler:
        if self._assembler is None:  # unreachable: units exist only after the handshake
            raise RuntimeError("no batch is planned before the index is built")
        return self._assembler


def _shares_memory(peer: Peer) -> bool:
    """Whether ``peer`` may map this process's slots: a local worker, or a producer that says
    it runs on this host (one that cannot map them, in a container say, sends its rows over
    the socket after all, so offering costs nothing)."""
    return peer.local or peer.host == _HOST
