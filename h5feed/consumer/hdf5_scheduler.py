"""The scheduler of HDF5 clips: files shared out, indexed, planned, cut into units.

Handshake: every file goes to one worker (largest first, each to the least loaded: see
:func:`assign_files`), which opens it once and answers its INDEX; once every file is indexed
the plan starts. Each batch of the plan (:class:`~h5feed.consumer.plan.EpochPlan`, from the
iteration's start cursor) is one UNIT per worker that owns some of its rows' files; the parts
are assembled (:class:`~h5feed.consumer.assembly.BatchAssembler`, in a shared-memory slot when
a local worker makes part of the batch) and released in plan order (``deterministic``) or as
completed.

Hand-over: a lost producer's files go to the live workers (fewest files first) with a JOB
each, and every unit it had not answered is sent again to the files' new owners. A part the
lost producer sends after all is no longer expected and is dropped: exactly once still holds.
Before the index is complete nothing can move (the lost peer's files may lack their index).
"""

from __future__ import annotations

import collections
import itertools
import os
import socket
from collections.abc import Iterator, Sequence

import numpy as np

from h5feed.common import messages
from h5feed.common.errors import H5FeedError
from h5feed.common.logs import consumer_log
from h5feed.consumer.assembly import Batch, BatchAssembler
from h5feed.consumer.bad_data import SkipLog
from h5feed.consumer.credits import CreditGate
from h5feed.consumer.options import HdfConfig
from h5feed.consumer.ordering import PlannedRelease
from h5feed.consumer.plan import Cursor, EpochPlan, Index, PlannedBatch
from h5feed.consumer.scheduler import Reassignment, Send
from h5feed.consumer.slots import Slot, SlotPool, supported
from h5feed.consumer.work import Ledger, Peer

_HOST = socket.gethostname()

#: A unit's record: the positions of its rows in the batch, and whether they go to a slot.
_Work = tuple[np.ndarray, bool]


class HdfScheduler:
    """Runs the HDF5 plan of one iteration (see the module docstring)."""

    resumable = True

    def __init__(
        self,
        config: HdfConfig,
        job_id: str,
        epochs: Iterator[int],
        start: Cursor,
        counters: collections.Counter[str],
    ) -> None:
        self.config = config
        self.job_id = job_id
        self._log = consumer_log(job_id)
        self.index: Index | None = None
        self._epochs = epochs
        self._start = start
        self._counters = counters
        self._ledger: Ledger[_Work] = Ledger()
        self._owners: dict[int, Peer] = {}  # file -> the peer that owns it
        self._videos: dict[int, tuple[messages.VideoEntry, ...]] = {}
        self._assembler: BatchAssembler | None = None
        self._planned: PlannedRelease[PlannedBatch, Batch] | None = None  # once indexed
        self._pool = self._make_pool()
        options = config.options
        self.skips = SkipLog(  # on_error: samples skipped for bad frames
            options.on_error, options.max_skipped, options.shard, options.clips_per_video,
            self._log,
        )  # fmt: skip

    # -- handshake -------------------------------------------------------------------------

    def start(self, peers: Sequence[Peer]) -> list[Send]:
        root = self.config.options.data_root
        files = self.config.files
        sizes = [_file_size(os.path.join(root, p) if root else p) for p in files]
        order = sorted(peers, key=lambda p: p.identity)
        for file_index, slot in enumerate(assign_files(sizes, len(order)).tolist()):
            self._owners[file_index] = order[slot]
            order[slot].files.append(file_index)
        return [self._job(peer, sorted(peer.files)) for peer in order]  # all get the clip spec

    def _job(self, peer: Peer, files: list[int]) -> Send:
        """The job, with ``files`` to open; a worker that has the job already adds them."""
        refs = tuple(messages.FileRef(i, self.config.files[i]) for i in files)
        clip = self.config.clip
        return Send(
            peer,
            messages.Job(
                self.job_id, refs, clip.to_wire(), self.config.layout.to_wire(),
                self.config.options.index_cache, self.config.options.on_error,
            ),
        )  # fmt: skip

    def on_control(self, peer: Peer, message: messages.Message) -> list[Send]:
        if isinstance(message, messages.Index) and self._owners.get(message.file) is peer:
            self._videos[message.file] = message.videos
            if len(self._videos) == len(self.config.files) and self.index is None:
                self._plan_start()
        else:
            self._counters["malformed_messages"] += 1
            self._log.warning("dropped an unexpected %s message from %s", message.KIND, peer)
        return []

    def _plan_start(self) -> None:
        files = self.config.files
        self.index = Index.build(files, [self._videos[i] for i in range(len(files))])
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
        by_owner: dict[Peer, list[int]] = {}
        for position, file_index in zip(chosen.tolist(), files, strict=True):
            by_owner.setdefault(self._owners[file_index], []).append(position)
        if subset is None:
            assembler.expect(seq, planned, len(by_owner), self._slot_for(list(by_owner)))
        else:
            assembler.add_expected_parts(seq, len(by_owner) - 1)
        slot = assembler.slot(seq)
        sends = []
        for peer, positions in by_owner.items():
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
            self._counters["dropped_parts"] += 1
            self._log.warning("dropped an unexpected part (unit %s) from %s", data.unit, peer)
            return []
        positions, in_slot = unit.work
        frames = data.arrays.get("frames")
        if frames is not None and in_slot:  # the worker could not map the slot
            self._counters["parts_copied_into_slots"] += 1
        if frames is None and in_slot:
            pool = self._pool
            nbytes = 0 if pool is None else pool.nbytes // self.config.options.batch_size
            nbytes *= len(positions)
        elif self._is_bad_part(frames, len(positions)):
            self._counters["malformed_messages"] += 1
            self._log.warning(
                "dropped part of unit %d from %s with a bad frames array", unit.id, peer
            )
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
        return bool(peer.files)

    def reassign(self, lost: Peer, heirs: Sequence[Peer]) -> Reassignment:
        if not lost.files and not lost.outstanding:
            return Reassignment([], 0)
        if self.index is None:
            return Reassignment([], 0, "the index of its files may be incomplete")
        if not heirs:
            return Reassignment([], 0, "no other worker is left to take its files")
        adopted = hand_over_files(lost.files, heirs)
        sends = []
        for heir, files in adopted.items():
            for file_index in files:
                self._owners[file_index] = heir
            sends.append(self._job(heir, files))
        units = self._ledger.take_back(lost)
        assembler = self._require_assembler()
        for unit in units:
            sends += self._units(unit.seq, assembler.planned(unit.seq), unit.work[0])
        lost.files.clear()
        return Reassignment(sends, len(units))

    def describe(self, unit_id: int) -> str:
        unit = self._ledger.get(unit_id)
        if unit is None or self._assembler is None:
            return f"unit {unit_id}"
        planned = self._assembler.planned(unit.seq)
        return f"unit {unit_id} (batch {planned.index} of epoch {planned.epoch})"

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()  # batches already handed out keep their memory

    # -- helpers ---------------------------------------------------------------------------

    @property
    def shared_memory_slots(self) -> int:
        """Shared-memory batch slots made so far (0: batches come over the socket)."""
        return self._pool.size if self._pool is not None else 0

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


def assign_files(sizes: Sequence[int], workers: int) -> np.ndarray:
    """The worker slot owning each file: largest files first, each to the least loaded slot.

    Deterministic (ties go to the lower index). Every file has exactly one owner; with more
    workers than files, some workers own nothing.
    """
    load = [0] * workers
    owner = np.zeros(len(sizes), np.int64)
    for file_index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        slot = min(range(workers), key=lambda s: (load[s], s))
        owner[file_index] = slot
        load[slot] += max(sizes[file_index], 1)
    return owner


def hand_over_files(files: Sequence[int], heirs: Sequence[Peer]) -> dict[Peer, list[int]]:
    """Give each of ``files`` (a leaving worker's) to the heir owning the fewest files so far
    (ties: the lowest identity); the heirs' ``files`` grow. Returns the files each heir took."""
    adopted: dict[Peer, list[int]] = {}
    for file_index in files:
        heir = min(heirs, key=lambda p: (len(p.files), p.identity))
        heir.files.append(file_index)
        adopted.setdefault(heir, []).append(file_index)
    return adopted


def unit_rows(index: Index, planned: PlannedBatch) -> list[messages.Row]:
    """One UNIT row per sample of ``planned``, in batch order."""
    rows = zip(
        planned.samples.tolist(),
        index.file_of_video[planned.videos].tolist(),
        index.video_in_file[planned.videos].tolist(),
        planned.starts.tolist(),
        planned.crop_uniforms[:, 0].tolist(),
        planned.crop_uniforms[:, 1].tolist(),
        planned.flips.tolist(),
        planned.seeds.tolist(),
        strict=True,
    )
    return list(itertools.starmap(messages.Row, rows))


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0  # the owning worker reports the unreadable file with its name
