"""Dispatch and data of one HDF5 iteration, from the moment its index is known: each planned
batch cut into UNITs by the owners of its rows' files, the parts taken back, checked and
assembled, the batches released.

Each batch of the plan (:class:`~h5feed.consumer.plan.epoch_plan.EpochPlan`, from the iteration's
start
cursor: :func:`planned_batches`) is one UNIT per worker that owns some of its rows' files
(:class:`~h5feed.consumer.hdf5.file_owners.FileOwners`: read here, changed only by the
scheduler); the parts are assembled (:class:`~h5feed.consumer.core.assembly.BatchAssembler`,
in a shared-memory slot when a worker on this host makes part of the batch:
:mod:`~h5feed.consumer.hdf5.batch_slots`) and released in plan order (``deterministic``) or
as completed. The scheduler (:mod:`h5feed.consumer.hdf5.scheduler`) makes a :class:`Dispatch`
when the plan starts and decides when files and units move; this keeps the units in flight.

Guarantees:

1. Until its batch is released, every row of a dispatched batch is in exactly one unit in
   flight, issued to a reader of the row's file (guarantee 7), or parked (its file has no owner now:
   :attr:`Dispatch.parked_batches`) until :meth:`Dispatch.unpark` finds it one.
2. A part is taken only as :mod:`~h5feed.consumer.hdf5.parts` says (from its unit's peer, for
   its samples, frames well formed); an unexpected part (a re-sent unit's original, a
   duplicate) is dropped and counted, a malformed one as
   :func:`~h5feed.consumer.core.malformed.drop_malformed` says. A unit completes at most
   once: exactly once holds.
3. Units taken back (:meth:`Dispatch.take_back` then :meth:`Dispatch.send_again`, or
   :meth:`Dispatch.send_one_again`) go out again as new units to the files' owners now; a
   slot that a worker which may still run was writing into stays out of the pool until that
   process is gone.
4. A batch is released once, complete: in plan order with ``deterministic``, else as soon as
   it is complete.
5. The padded rows of a padded shard (``shard_remainder="pad"``: plan.py guarantee 3) are in
   no unit: no worker decodes or is sent them; the assembler zero-fills them. A batch of
   padded rows only is complete without any part, once the clips' shape is known: it is
   released from :meth:`Dispatch.next_units` (:meth:`Dispatch.take_released`) or
   :meth:`Dispatch.on_data`. Each padded row released is counted (``padded_samples``).
6. Not thread-safe: the loop's thread owns it.
7. A file may have several readers (its owner, and extra readers:
   :mod:`~h5feed.consumer.hdf5.file_readers`): a batch's rows of one file go whole to one
   of them, the one with the fewest rows in flight (ties: the one given fewest rows so far,
   then the owner, then the extra readers in the order they came), so a reader at half
   speed gets about half of that file's rows, and
   two workers never read (nor decompress the chunks of) one file's rows of one batch. When
   some peers read every file of a batch (a few files on a few workers: every file has a
   second reader), the whole batch goes to the one of them with the fewest rows in flight
   (same ties), so a batch is one unit, not one per file: each unit costs the trainer and
   the worker a message. Not when that one is in doubt, nor when a reader of one of the
   batch's files has fewer rows in flight (a worker reading only some of the files, as
   after a rejoin): then file by file, so balance comes first. A batch is
   still one unit per peer that makes some of its rows.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Hashable, Iterator

import numpy as np

from h5feed.common.errors import H5FeedError
from h5feed.common.protocol import messages
from h5feed.common.system.logs import consumer_log
from h5feed.consumer.core.assembly import Batch, BatchAssembler
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.ledger import Ledger, Peer, Unit
from h5feed.consumer.core.malformed import drop_malformed
from h5feed.consumer.core.ordering import PlannedRelease
from h5feed.consumer.core.scheduler import Send
from h5feed.consumer.hdf5.bad_data import SkipLog
from h5feed.consumer.hdf5.batch_slots import BatchSlots, shares_memory
from h5feed.consumer.hdf5.file_owners import FileOwners
from h5feed.consumer.hdf5.file_readers import FileReaders
from h5feed.consumer.hdf5.parts import bad_frames, is_expected
from h5feed.consumer.hdf5.units import Work, unit_rows
from h5feed.consumer.options import HdfConfig
from h5feed.consumer.plan.epoch_plan import PAD_SAMPLE, Cursor, Index, PlannedBatch
from h5feed.consumer.plan.rest import Rest


def planned_batches(
    index: Index, config: HdfConfig, epochs: Iterator[int], start: Cursor, rest: Rest | None = None
) -> Iterator[PlannedBatch]:
    """The batches of ``epochs``, the first from ``start``'s batch on; ``rest``'s epoch is
    the rest of that epoch after a change of topology (:mod:`h5feed.consumer.plan.rest`). Raises
    H5FeedError for an epoch with no batch (else endless epochs would spin through empty
    ones)."""
    options = config.options
    for epoch in epochs:
        plan = config.epoch_plan(
            index, epoch, rest if rest is not None and rest.epoch == epoch else None
        )
        if len(plan) == 0:
            raise H5FeedError(
                f"an epoch has no batch: {len(plan.order)} samples in shard "
                f"{options.plan.shard} of {index.num_videos} videos, "
                f"batch_size={options.plan.batch_size}, "
                f"drop_remainder={options.plan.drop_remainder}"
            )
        if not (plan.order != PAD_SAMPLE).any():  # nothing would tell the clips' shape
            raise H5FeedError(
                f"shard {options.plan.shard} has no sample: {len(plan.order)} padded rows "
                f"only (shard_remainder='pad'), as the epoch has {index.num_videos} videos x "
                f"{config.data.clips_per_video} clips, fewer than the {options.plan.shard[1]} "
                "shards"
            )
        first = start.batch if epoch == start.epoch else 0
        yield from plan.batches_from(first)


class Dispatch:
    """The units and batches in flight of one HDF5 plan (see the module docstring)."""

    def __init__(
        self,
        config: HdfConfig,
        job_id: str,
        index: Index,
        batches: Iterator[PlannedBatch],
        owners: FileOwners,
        slots: BatchSlots | None,
        counters: Counters,
        skips: SkipLog,
        readers: FileReaders | None = None,
    ) -> None:
        """``batches``: the plan (:func:`planned_batches`); ``owners``, ``readers``: who may
        make each file's rows (read only); ``slots``: None where batches come over the socket."""
        self.config = config
        self.job_id = job_id
        self.index = index
        self._owners = owners
        self._readers = FileReaders() if readers is None else readers
        # Rows in flight per peer: a file's rows go to its reader with the fewest (guarantee 7).
        self._in_flight: dict[Peer, int] = {}
        # Rows ever issued per peer: among readers equally loaded, the one given least so far
        # (with fewer batches in flight than readers, the idle ones take turns).
        self._issued: dict[Peer, int] = {}
        self._slots = slots
        self._counters = counters
        self._skips = skips
        self._log = consumer_log(job_id)
        self._ledger: Ledger[Work] = Ledger()
        self._parked: list[tuple[int, np.ndarray]] = []  # (seq, positions) of unowned files
        pool = None if slots is None else (slots.pool, slots.clip_shape)
        self._assembler = BatchAssembler(index, config.clip.transform, pool)
        self._planned: PlannedRelease[PlannedBatch, Batch] = PlannedRelease(
            batches, config.options.plan.deterministic
        )
        self._padding_only: list[int] = []  # batches of padded rows only, not yet complete
        self._released: list[Batch] = []  # released by a dispatch (take_released)

    @property
    def finished(self) -> bool:
        """Whether every planned batch has been released."""
        return self._planned.finished

    @property
    def parked_batches(self) -> set[int]:
        """Batches with rows waiting for a file's new owner (its INDEX, or a joiner)."""
        return {seq for seq, _positions in self._parked}

    # -- dispatch --------------------------------------------------------------------------

    def next_units(self, gate: CreditGate) -> list[Send]:
        """The units of the batches the gate has credits for (one credit per batch)."""
        sends: list[Send] = []
        for seq, planned in self._planned.dispatch(gate):
            sends += self._units(seq, planned, None)
        self._released += self._complete_padding()
        return sends

    def take_released(self) -> list[Batch]:
        """The batches released by :meth:`next_units` (of padded rows only: guarantee 5),
        in release order; each once."""
        released, self._released = self._released, []
        return released

    def _complete_padding(self) -> list[Batch]:
        """The batches of padded rows only that can be made now, released (guarantee 5)."""
        released: list[Batch] = []
        waiting, self._padding_only = self._padding_only, []
        for seq in waiting:
            batch = self._assembler.complete_padding(seq)
            if batch is None:
                self._padding_only.append(seq)
            else:
                released += self._complete(seq, batch)
        return released

    def _complete(self, seq: int, batch: Batch) -> list[Batch]:
        """Batch ``seq`` is complete: its padded rows counted, the batches released now."""
        self._counters.padded_samples += int((batch.arrays["sample"] == PAD_SAMPLE).sum())
        return self._planned.release(seq, batch)

    def unpark(self) -> list[Send]:
        """Send the parked rows whose files have owners now (the rest are parked again)."""
        if not self._parked:
            return []
        parked, self._parked = self._parked, []
        sends: list[Send] = []
        for seq, positions in parked:
            sends += self._units(seq, self._assembler.planned(seq), positions)
        return sends

    def take_back(self, lost: Peer) -> list[Unit[Work]]:
        """Every unit ``lost`` holds, oldest first, no longer held by it."""
        self._in_flight.pop(lost, None)
        self._issued.pop(lost, None)
        return self._ledger.take_back(lost)

    def send_again(self, units: list[Unit[Work]], lost: Peer, confirmed_dead: bool) -> list[Send]:
        """``lost``'s ``units`` (:meth:`take_back`) as new units to their files' owners now;
        their slots stay out of the pool until ``lost`` is gone, unless ``confirmed_dead``."""
        sends: list[Send] = []
        for unit in units:
            positions, in_slot = unit.work
            slot = self._assembler.slot(unit.seq)
            if in_slot and slot is not None and not confirmed_dead and self._slots is not None:
                self._slots.hold_until_gone(slot, lost.pid)
            sends += self._units(unit.seq, self._assembler.planned(unit.seq), positions)
        return sends

    def send_one_again(self, peer: Peer, unit_id: int) -> list[Send]:
        """Unit ``unit_id`` (it failed at ``peer``) as new units to its files' owners now;
        nothing if ``peer`` does not hold it."""
        unit = self._ledger.take_one(peer, unit_id)
        if unit is None:
            return []
        self._done(peer, len(unit.work[0]))
        positions, _in_slot = unit.work  # it answered: it writes no more into the slot
        return self._units(unit.seq, self._assembler.planned(unit.seq), positions)

    def _units(self, seq: int, planned: PlannedBatch, subset: np.ndarray | None) -> list[Send]:
        """One unit per owner of the rows of batch ``seq`` (all rows, or those at ``subset``)."""
        index, assembler = self.index, self._assembler
        rows = unit_rows(index, planned)
        chosen = planned.real_positions if subset is None else subset  # padding: no unit
        files = index.file_of_video[planned.videos[chosen]].tolist()
        by_owner: dict[Peer | None, list[int]] = {}
        for position, peer in zip(chosen.tolist(), self._readers_of(files), strict=True):
            by_owner.setdefault(peer, []).append(position)
        owners = [peer for peer in by_owner if peer is not None]
        if subset is None:
            slot = None if self._slots is None else self._slots.for_batch(owners)
            assembler.expect(seq, planned, len(by_owner), slot)
            if not by_owner:  # padded rows only: no part will come
                self._padding_only.append(seq)
        else:
            assembler.add_expected_parts(seq, len(by_owner) - 1)
        slot = assembler.slot(seq)
        sends = []
        for peer, positions in by_owner.items():
            if peer is None:  # rows of files nobody owns now: one part, sent once owned
                self._parked.append((seq, np.asarray(positions, np.int64)))
                continue
            in_slot = slot is not None and shares_memory(peer)
            unit = self._ledger.issue(peer, seq, (np.asarray(positions, np.int64), in_slot))
            self._in_flight[peer] = self._in_flight.get(peer, 0) + len(positions)
            self._issued[peer] = self._issued.get(peer, 0) + len(positions)
            ref = None
            if in_slot and slot is not None:
                ref = messages.SlotRef(os.getpid(), slot.fd, len(rows), tuple(positions))
            unit_rows_ = tuple(rows[p] for p in positions)
            message = messages.Unit(self.job_id, unit.id, seq, planned.epoch, unit_rows_, ref)
            sends.append(Send(peer, message))
        return sends

    def _readers_of(self, files: list[int]) -> list[Peer | None]:
        """The peer to make each row of ``files`` (a batch's rows, in order): the file's owner
        when it has no confirmed extra reader (the fast path: one lookup per row), else for
        each file of the batch its reader (owner or extra) with the fewest rows in flight,
        counting the rows just given (guarantee 7), one in doubt last (``Peer.in_doubt``:
        perhaps about to be lost); None: nobody reads the file now. When some peers read
        every file of the batch, the whole batch goes to the one of them with the fewest rows
        in flight, one unit instead of one per file's reader (guarantee 7), unless that one is
        in doubt, or another reader of one of its files has fewer rows in flight: then file by
        file, so a file with another reader passes it over."""
        owners = self._owners.owners(files)
        if not self._readers.any:
            return owners
        in_flight, issued = self._in_flight, self._issued
        given: dict[Peer, int] = {}
        clock = time.monotonic()

        def load(peer: Peer) -> tuple[bool, int, int]:
            now = given.get(peer, 0)
            doubt = peer.in_doubt(clock)
            return doubt, in_flight.get(peer, 0) + now, issued.get(peer, 0) + now

        counts = Counter(files)  # in order of first row
        readers = {file_index: self._readers_of_file(file_index) for file_index in counts}
        common = _common_readers(list(readers.values()))
        whole = min(common, key=load) if common else None  # ties: given least, then order
        if whole is not None and not whole.in_doubt(clock):  # one in doubt: file by file
            # Never at the cost of balance: only when no reader of any of its files has fewer
            # rows in flight (else the one peer reading every file took every mixed batch).
            everyone = {peer for candidates in readers.values() for peer in candidates}
            if load(whole)[:2] <= min(load(peer)[:2] for peer in everyone):
                return [whole] * len(files)
        chosen: dict[int, Peer | None] = {}
        for file_index, count in counts.items():
            candidates = readers[file_index]
            if len(candidates) < 2:
                chosen[file_index] = candidates[0] if candidates else None
                continue
            peer = min(candidates, key=load)  # ties: the one given least so far, then order
            given[peer] = given.get(peer, 0) + count
            chosen[file_index] = peer
        return [chosen[f] for f in files]

    def _readers_of_file(self, file_index: int) -> list[Peer]:
        """Who may make rows of ``file_index`` now: its owner (if any) first, then its
        confirmed extra readers in the order they came."""
        extras = self._readers.confirmed(file_index)
        owner = self._owners.owner(file_index)
        return list(extras) if owner is None else [owner, *extras]

    def _done(self, peer: Peer, rows: int) -> None:
        """``rows`` of ``peer``'s are no longer in flight."""
        left = self._in_flight.get(peer, 0) - rows
        if left > 0:
            self._in_flight[peer] = left
        else:
            self._in_flight.pop(peer, None)

    # -- data ------------------------------------------------------------------------------

    def on_data(self, peer: Peer, data: messages.Data) -> list[Batch] | None:
        """``peer``'s part: the batches complete now, in release order; None when the part
        is dropped (guarantee 2)."""
        unit = self._ledger.get(data.unit)
        if unit is None or not is_expected(unit, peer, data, self._assembler):
            self._counters.dropped_parts += 1  # the session logs it at a bounded rate
            return None
        positions, in_slot = unit.work
        frames = data.arrays.get("frames")
        if frames is not None and in_slot:  # the worker could not map the slot
            self._counters.parts_copied_into_slots += 1
        if frames is None and in_slot:
            nbytes = 0 if self._slots is None else self._slots.part_nbytes(len(positions))
        elif bad_frames(frames, len(positions), self.config.clip):
            drop_malformed(peer, unit.id, "a bad frames array", self._counters, self._log)
            return None
        else:
            nbytes = frames.nbytes if frames is not None else 0
        invalid = None
        if data.skipped:  # bad frames, zero-filled (on_error): counted, bounded, may raise
            planned = self._assembler.planned(unit.seq)
            invalid = self._skips.record(self.index, planned, positions, data.skipped, str(peer))
        self._ledger.complete(peer, unit.id)
        self._done(peer, len(positions))
        peer.received.record(len(positions), nbytes, data.busy_s)
        peer.storage.add(data.storage)
        batch = self._assembler.add(unit.seq, positions, frames, invalid)
        released = [] if batch is None else self._complete(unit.seq, batch)
        return released + self._complete_padding()  # the clips' shape may be known now

    def describe(self, unit_id: int) -> str:
        """Unit ``unit_id`` as error messages name it (its batch and epoch, while in flight)."""
        unit = self._ledger.get(unit_id)
        if unit is None:
            return f"unit {unit_id}"
        planned = self._assembler.planned(unit.seq)
        return f"unit {unit_id} (batch {planned.index} of epoch {planned.epoch})"

    def samples_of(self, unit_id: int) -> list[tuple[Hashable, str]]:
        """The samples of unit ``unit_id`` in flight, keyed by (epoch, sample) and named by
        file, video and frames; empty for a unit not in flight."""
        unit = self._ledger.get(unit_id)
        if unit is None:
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


def _common_readers(readers: list[list[Peer]]) -> list[Peer]:
    """The peers in every list of ``readers``, in the order of the first list."""
    if not readers or not readers[0]:
        return []
    rest = [set(others) for others in readers[1:]]
    return [peer for peer in readers[0] if all(peer in others for others in rest)]
