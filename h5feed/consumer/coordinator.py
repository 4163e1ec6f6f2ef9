"""The consumer's background thread: it drives the workers and assembles batches.

One ROUTER socket (:mod:`h5feed.consumer.router`), owned by one thread (ZeroMQ sockets are
not thread-safe). The thread:

1. waits for the expected workers' HELLO, gives each a share of the files (JOB) and collects
   the index of every file (INDEX);
2. walks the plan, epoch after epoch, and hands each batch's rows to the workers that own the
   rows' files, as one UNIT per worker, while the global credit budget allows: at most
   ``inflight_batches`` batches are dispatched and not yet taken by the trainer (a credit
   the trainer returns wakes this thread only when a worker is about to run dry; else the
   next DATA part does, see ``consumed``);
3. collects the DATA parts, assembles each batch and queues it for the trainer, in plan order
   (``deterministic=True``) or as soon as complete (``deterministic=False``);
4. answers control messages and watches the workers, so credits keep flowing while the trainer
   computes.

Guarantees: a batch is queued once, complete, or not at all. A part that is not expected (a
duplicate, another job's, an unknown unit) is dropped and counted; so is a malformed message.
A worker ERROR, a worker process that exits, a worker that holds a unit longer than
``unit_timeout_s`` or no worker connecting within ``start_timeout_s`` ends the iteration with an
exception that the trainer's ``next()`` raises; nothing waits forever.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import zmq

from h5feed.common import wire
from h5feed.common.errors import (
    H5FeedError,
    NoWorkersError,
    ProtocolError,
    VersionMismatchError,
    WorkerDiedError,
    WorkerError,
    WorkerTimeoutError,
)
from h5feed.common.logs import with_ids
from h5feed.consumer.assembly import Batch, BatchAssembler
from h5feed.consumer.local_workers import LocalWorkers
from h5feed.consumer.options import FeedConfig
from h5feed.consumer.plan import EpochPlan, Index, PlannedBatch
from h5feed.consumer.router import Router
from h5feed.consumer.slots import Slot, SlotPool, supported
from h5feed.consumer.waker import Waker
from h5feed.consumer.work import (
    Peer,
    Unit,
    assign_files,
    hand_over_files,
    is_valid_index,
    unit_rows,
)

_log = logging.getLogger("h5feed.consumer")
_HOST = socket.gethostname()

_POLL_MS = 50
_HEALTH_EVERY_S = 0.2
_EXIT_REPORT_WAIT_S = 1.0
_MAX_MESSAGES_PER_PASS = 256


END = object()  # queued after the last batch of the iteration
FAILED = object()  # queued when the iteration failed; the error is ``Coordinator.error``


class Coordinator:
    """Runs one iteration (a range of epochs) of one dataset over one ROUTER socket."""

    def __init__(
        self,
        config: FeedConfig,
        epochs: Iterator[int],
        addresses: list[str],
        job_id: str,
        expected_workers: int,
        local_workers: LocalWorkers | None,
    ) -> None:
        self.config = config
        self.job_id = job_id
        self._log = with_ids(_log, "consumer", job=job_id[:8])  # ids in every line
        self.addresses = addresses
        self.expected_workers = expected_workers
        self.refused: list[str] = []  # peers turned away (another protocol version)
        self.local_workers = local_workers
        self.out: queue.Queue[Any] = queue.Queue()
        self.error: BaseException | None = None
        self.counters = {
            "malformed_messages": 0,
            "dropped_parts": 0,
            "batches_dispatched": 0,
            "reassigned_units": 0,
            "parts_copied_into_slots": 0,
            "max_inflight_batches": 0,
            "batches": 0,
            "clips": 0,
            "bytes": 0,
        }
        self.index: Index | None = None
        self._epochs = epochs
        self._stop = threading.Event()
        self._waker = Waker()
        self._router = Router(config.options, addresses, self._waker.fileno)
        # The local workers' CURVE keys (made for this iteration) and the consumer's key.
        self.local_keys = self._router.local_keys
        self.server_public = self._router.server_public
        self._peers: dict[bytes, Peer] = {}
        self._videos_by_file: dict[int, list[Any]] = {}
        self._units: dict[int, Unit] = {}
        self._assembler: BatchAssembler | None = None
        self._pool: SlotPool | None = None
        self._owner_slot: np.ndarray = np.zeros(0, np.int64)
        self._slots: list[bytes] = []
        self._next_unit = 0
        self._dispatched = 0
        self._taken = 0
        self._started = False
        self._plan_done = False
        self._next_health = 0.0
        self._credit_wanted = True  # wake this thread when the trainer takes a batch
        self._taken_at_dispatch = 0  # batches taken when this thread last dispatched
        self._assigned = False
        self._late: set[bytes] = set()  # peers seen after the assignment, or refused
        self._batches: Iterator[tuple[int, PlannedBatch]] = iter(())
        self._thread = threading.Thread(target=self._run, name=f"h5feed-{job_id[:8]}", daemon=True)

    # -- called from the trainer's threads -------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self._started = True

    def consumed(self) -> None:
        """The trainer took a batch: its credit returns to the budget.

        The coordinator thread is woken for it only when it asked to be (see ``_pump``): a
        worker is about to run out of units. Otherwise the next DATA part wakes it anyway
        and it dispatches then, which saves a wake-up of that thread per batch."""
        self._taken += 1  # only the trainer's next() writes it, one call at a time
        if self._credit_wanted:
            self._waker.wake()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread (it says BYE to the workers) and release the socket and pipe."""
        self._stop.set()
        self._waker.wake()  # at once
        if threading.current_thread() is self._thread:
            return  # a finalizer run by garbage collection on this very thread: it ends itself
        if not self._started:  # never ran: release what __init__ opened
            self._router.close()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._waker.close()

    @property
    def inflight(self) -> int:
        """Batches dispatched and not yet taken by the trainer (never above the budget)."""
        return self._dispatched - self._taken

    @property
    def shared_memory_slots(self) -> int:
        """Shared-memory batch slots made so far (0: batches come over the socket)."""
        return self._pool.size if self._pool is not None else 0

    def worker_info(self) -> list[dict[str, Any]]:
        """Per worker: identity, files owned, units held, and what it delivered (rates)."""
        return [
            {
                "name": p.name,
                "pid": p.pid,
                "host": p.host,
                "files": len(p.files),
                "outstanding_units": len(p.outstanding),
                "unit_latency_s": p.unit_latency_s,
                **p.received.snapshot(),
            }
            for p in list(self._peers.values())
        ]

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._handshake()
            self._serve()
        except BaseException as exc:  # every failure must reach the trainer's next()
            self.error = exc
            self.out.put(FAILED)
        finally:
            self._say_bye()
            self._router.close()
            if self._pool is not None:
                self._pool.close()  # batches already handed out keep their memory
            if self._stop.is_set() and threading.current_thread() is self._thread:
                self._waker.close()  # nobody may be left to join this thread and close it

    def _handshake(self) -> None:
        if not self._wait_for_peers():
            return
        self._assigned = True
        self._assign_files()
        options = self.config.options
        last_progress = time.monotonic()
        indexed = 0
        while len(self._videos_by_file) < len(self.config.files):
            if self._stop.is_set():
                return
            self._pump()
            if len(self._videos_by_file) > indexed:
                indexed, last_progress = len(self._videos_by_file), time.monotonic()
            elif time.monotonic() - last_progress > options.unit_timeout_s:
                missing = sorted(set(range(len(self.config.files))) - set(self._videos_by_file))
                raise WorkerTimeoutError(
                    f"no worker indexed {self.config.files[missing[0]]!r} "
                    f"({len(missing)} files left) within {options.unit_timeout_s:g} s"
                )
        files = self.config.files
        self.index = Index.build(files, [self._videos_by_file[i] for i in range(len(files))])
        self._assembler = BatchAssembler(
            self.index,
            self.config.options.deterministic,
            self._release,
            self.config.clip.transform,
            self._make_slots(),
        )
        self._log.info("indexed %d files, %d videos", len(files), self.index.num_videos)
        self._batches = self._plan_batches(self.index)

    def _wait_for_peers(self) -> bool:
        """Wait for the workers (see ``start_timeout_s``, ``join_grace_s``); False if stopped."""
        options = self.config.options
        deadline = time.monotonic() + options.start_timeout_s
        # Local workers must all connect; with `listen`, at least one worker of any kind.
        needed = max(self.expected_workers, 1 if options.listen else 0)
        while len(self._peers) < needed:
            if time.monotonic() > deadline:
                raise NoWorkersError(self._no_workers_message(needed))
            if self._stop.is_set():
                return False
            self._pump()
        if options.listen:  # producers already waiting say hello within about a second
            grace_end = time.monotonic() + options.join_grace_s
            while time.monotonic() < grace_end and not self._stop.is_set():
                self._pump()
        return not self._stop.is_set()

    def _make_slots(self) -> tuple[SlotPool, tuple[int, ...]] | None:
        """A pool of shared-memory batch slots (used for batches that a worker on this host
        makes part of), when the clip's output size is known before decoding (``crop`` or
        ``resize`` set, and no transform, whose output shape only its first result tells)."""
        clip, options = self.config.clip, self.config.options
        height, width = clip.frame_shape
        if not (options.shared_memory and supported()):
            return None
        if height is None or width is None or clip.transform is not None:
            return None
        clip_shape = (clip.clip_len, height, width, 3)
        self._pool = SlotPool(options.batch_size * int(np.prod(clip_shape)), self.job_id)
        return self._pool, clip_shape

    def _assign_files(self) -> None:
        """Give every file to one worker: largest files first, each to the least loaded."""
        self._slots = sorted(self._peers)
        root = self.config.options.data_root
        sizes = [_file_size(os.path.join(root, p) if root else p) for p in self.config.files]
        self._owner_slot = assign_files(sizes, len(self._slots))
        for file_index, slot in enumerate(self._owner_slot.tolist()):
            self._peers[self._slots[slot]].files.append(file_index)
        for identity in self._slots:
            peer = self._peers[identity]
            self._send_job(peer, sorted(peer.files))

    def _send_job(self, peer: Peer, files: list[int]) -> None:
        """The job, with ``files`` to open; a worker that has the job already adds them."""
        self._send(
            peer,
            wire.JOB,
            {
                "job": self.job_id,
                "files": [[i, self.config.files[i]] for i in files],
                "clip": self.config.clip.to_wire(),
                "layout": self.config.layout.to_wire(),  # protocol 3: apart from the clip
                "cache_dir": self.config.options.index_cache,
            },
        )

    def _plan_batches(self, index: Index) -> Iterator[tuple[int, PlannedBatch]]:
        seq = 0
        options = self.config.options
        for epoch in self._epochs:
            plan = EpochPlan(index, self.config.clip, options.plan_options(), epoch)
            if len(plan) == 0:  # else epochs=None would spin through empty epochs forever
                raise H5FeedError(
                    f"an epoch has no batch: {len(plan.order)} samples in shard {options.shard} "
                    f"of {index.num_videos} videos, batch_size={options.batch_size}, "
                    f"drop_remainder={options.drop_remainder}"
                )
            for planned in plan:
                yield seq, planned
                seq += 1

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._taken_at_dispatch = self._taken
            self._dispatch()
            if self._plan_done and self._released() == self._dispatched:
                self.out.put(END)
                return
            self._pump()

    def _pump(self) -> None:
        """Wait up to one poll interval, handle what arrived, check the workers' health."""
        # Whether a returned credit must wake this thread: only when a worker holds at most
        # one unit (it may run dry before its next DATA would wake us). The flag is set
        # before the look at ``_taken`` below and ``consumed`` counts before it reads the
        # flag, so a credit returned meanwhile is never missed: either that look sees it (and
        # the poll does not wait), or ``consumed`` sees the flag and wakes us.
        self._credit_wanted = any(len(peer.outstanding) <= 1 for peer in self._peers.values())
        timeout = 0 if self._taken != self._taken_at_dispatch else _POLL_MS
        messages, woken = self._router.poll(timeout)
        if woken:
            self._waker.drain()
        if messages:
            for frames in self._router.waiting(_MAX_MESSAGES_PER_PASS):
                self._receive(frames)
        now = time.monotonic()
        if now >= self._next_health:
            self._next_health = now + _HEALTH_EVERY_S
            self._check_health(now)

    def _receive(self, frames: list[zmq.Frame]) -> None:
        identity = frames[0].bytes
        try:
            message = wire.decode(frames[1:])
        except VersionMismatchError as exc:
            self._refuse(identity, str(exc))
            return
        except ProtocolError as exc:
            self._drop(f"malformed message from {identity!r}: {exc}")
            return
        peer = self._peers.get(identity)
        if message.kind == wire.HELLO:
            self._on_hello(identity, message.fields)
        elif peer is None and identity in self._late:
            if message.kind == wire.DATA:  # from a worker that left: its units went to others
                self.counters["dropped_parts"] += 1
        elif peer is None:
            self._drop(f"{message.kind} message from {identity!r}, which never said hello")
        elif message.fields.get("job", self.job_id) != self.job_id:
            self.counters["dropped_parts"] += 1  # from an earlier job of a restarted consumer
        elif message.kind == wire.INDEX:
            self._on_index(peer, message.fields)
        elif message.kind == wire.DATA:
            self._on_data(peer, message)
        elif message.kind == wire.ERROR:
            self._on_error(peer, message.fields)
        elif message.kind == wire.BYE:
            self._on_bye(peer, message.fields["reason"])
        else:
            self._on_other(peer, message)

    def _on_bye(self, peer: Peer, reason: str) -> None:
        if not peer.files and not peer.outstanding:
            self._peers.pop(peer.identity, None)
        elif self._is_local(peer) or self._assembler is None:
            # A local worker is this iteration's own: leaving is a failure. So is any
            # leaving before the index is complete (its files' index may be missing).
            raise WorkerDiedError(
                f"worker {peer.name} (pid {peer.pid} on {peer.host}) left the job: {reason}"
            )
        else:
            self._hand_over(peer, reason)

    def _on_other(self, peer: Peer, message: wire.Message) -> None:
        """A message of a kind this coordinator does not expect (a subclass may)."""
        self._drop(f"unexpected {message.kind} message from worker {peer.name}")

    def _refuse(self, identity: bytes, why: str) -> None:
        if identity not in self._late:
            self._late.add(identity)
            self.refused.append(f"{identity.decode(errors='replace')}: {why}")
            self._log.error("refused worker %r: %s", identity, why)
        reason = f"{wire.REFUSED} {why}"
        with contextlib.suppress(zmq.ZMQError):  # it may be gone already; nothing to tell then
            self._router.send(identity, wire.BYE, {"reason": reason}, zmq.NOBLOCK)

    def _no_workers_message(self, needed: int) -> str:
        where = ", ".join(self.addresses)
        timeout = self.config.options.start_timeout_s
        if self.config.options.listen and not self.expected_workers:
            text = f"no producer connected to {self.config.options.listen} within {timeout:g} s"
        else:
            text = f"only {len(self._peers)} of {needed} workers connected to {where} within "
            text += f"{timeout:g} s"
        if self.refused:
            text += f"; refused: {'; '.join(self.refused)}"
        return text

    def _drop(self, why: str) -> None:
        self.counters["malformed_messages"] += 1
        self._log.warning("dropped %s", why)

    def _on_hello(self, identity: bytes, fields: dict[str, Any]) -> None:
        if identity in self._peers:
            return  # an idle persistent worker says hello every second
        if self._assigned:
            if identity not in self._late:
                self._late.add(identity)
                self._log.info(
                    "worker %s joined after the files were shared out: idle until the "
                    "next iteration",
                    fields["worker"],
                )
            return
        self._peers[identity] = Peer(identity, fields["worker"], fields["pid"], fields["host"])

    def _on_index(self, peer: Peer, fields: dict[str, Any]) -> None:
        file_index = fields["file"]
        videos = fields["videos"]
        if file_index not in peer.files or not is_valid_index(videos):
            self._drop(f"bad index of file {file_index} from worker {peer.name}")
            return
        self._videos_by_file[file_index] = videos

    def _on_error(self, peer: Peer, fields: dict[str, Any]) -> None:
        where = ""
        unit = self._units.get(fields["unit"]) if fields["unit"] is not None else None
        if unit is not None:
            where = f" in {self._unit_label(unit)}"
        raise WorkerError(
            f"{peer.name} (pid {peer.pid} on {peer.host}){where}",
            fields["type"],
            fields["message"],
            fields["traceback"],
        )

    def _on_data(self, peer: Peer, message: wire.Message) -> None:
        fields = message.fields
        unit = self._units.get(fields["unit"])
        if unit is None or unit.peer != peer.identity or fields["samples"] != unit.samples:
            self.counters["dropped_parts"] += 1
            self._log.warning(
                "dropped an unexpected part (unit %s) from %s", fields["unit"], peer.name
            )
            return
        frames = message.arrays.get("frames")
        if frames is not None and unit.in_slot:  # the worker could not map the slot
            self.counters["parts_copied_into_slots"] += 1
        if frames is None and unit.in_slot:
            nbytes = self._slot_part_bytes(len(unit.samples))
        elif self._is_bad_part(frames, len(unit.samples)):
            self._drop(f"part of unit {unit.id} from {peer.name} with a bad frames array")
            return
        else:
            nbytes = frames.nbytes if frames is not None else 0
        del self._units[unit.id]
        peer.unit_done(unit.id, time.monotonic())
        peer.received.record(len(unit.samples), nbytes)
        self._require_assembler().add(unit.seq, unit.positions, frames)

    def _is_bad_part(self, frames: np.ndarray | None, rows: int) -> bool:
        """Whether a part's ``frames`` are not uint8 [rows, clip_len, H, W, 3]."""
        return (
            frames is None
            or frames.ndim < 1
            or frames.shape[0] != rows
            or (  # a transform decides the rest of the shape and the dtype
                self.config.clip.transform is None
                and (
                    frames.dtype != np.uint8
                    or frames.ndim != 5
                    or frames.shape[1] != self.config.clip.clip_len
                    or frames.shape[4] != 3
                )
            )
        )

    def _slot_part_bytes(self, rows: int) -> int:
        pool = self._pool
        return 0 if pool is None else pool.nbytes // self.config.options.batch_size * rows

    def _dispatch(self) -> None:
        budget = self.config.options.inflight_batches
        while not self._plan_done and self._dispatched - self._taken < budget:
            item = next(self._batches, None)
            if item is None:
                self._plan_done = True
                return
            seq, planned = item
            self._count_dispatch()
            self._send_units(seq, planned)

    def _count_dispatch(self) -> None:
        """One more batch dispatched: it holds a credit until the trainer takes it."""
        self._dispatched += 1
        self.counters["batches_dispatched"] = self._dispatched
        self.counters["max_inflight_batches"] = max(
            self.counters["max_inflight_batches"], self.inflight
        )

    def _send_units(self, seq: int, planned: PlannedBatch, subset: np.ndarray | None = None) -> int:
        """Hand the rows of batch ``seq`` (all, or those at ``subset``) to the workers owning
        their files, one UNIT per worker; returns the number of units sent."""
        index = self.index
        if index is None:  # unreachable: the plan starts after the handshake built the index
            raise RuntimeError("dispatch before the index was built")
        rows = unit_rows(index, planned)
        chosen = np.arange(len(rows)) if subset is None else subset
        owners = self._owner_slot[index.file_of_video[planned.videos[chosen]]]
        slots = sorted(set(owners.tolist()))
        assembler = self._require_assembler()
        if subset is None:
            assembler.expect(seq, planned, len(slots), self._batch_slot(slots))
        batch_slot = assembler.slot(seq)
        for slot in slots:
            positions = chosen[owners == slot]
            peer = self._peers[self._slots[slot]]
            in_slot = batch_slot is not None and self._shares_memory(peer)
            self._issue_unit(
                peer,
                seq,
                planned.epoch,
                [rows[p] for p in positions.tolist()],
                positions,
                [rows[p][0] for p in positions.tolist()],
                [os.getpid(), batch_slot.fd, len(rows), positions.tolist()]
                if in_slot and batch_slot is not None
                else None,
            )
        return len(slots)

    def _issue_unit(
        self,
        peer: Peer,
        seq: int,
        epoch: int,
        rows: list[Any],
        positions: np.ndarray,
        samples: list[Any],
        slot: list[Any] | None,
    ) -> Unit:
        """Send ``peer`` a UNIT of batch ``seq`` (the rows at ``positions``, into ``slot`` if
        given) and count it as held by ``peer`` from now (for timeouts and hand-over)."""
        unit = Unit(self._next_unit, seq, peer.identity, positions, samples, slot is not None)
        self._next_unit += 1
        self._units[unit.id] = unit
        now = time.monotonic()
        if not peer.outstanding:
            peer.last_progress = now
        peer.outstanding[unit.id] = now
        self._send(
            peer,
            wire.UNIT,
            {
                "job": self.job_id,
                "unit": unit.id,
                "batch": seq,
                "epoch": epoch,
                "rows": rows,
                "slot": slot,
            },
        )
        return unit

    def _batch_slot(self, owner_slots: list[int]) -> Slot | None:
        """A shared-memory slot for a new batch, if a local worker makes part of it."""
        if self._pool is None:
            return None
        if not any(self._shares_memory(self._peers[self._slots[s]]) for s in owner_slots):
            return None
        return self._pool.acquire()

    def _shares_memory(self, peer: Peer) -> bool:
        """Whether ``peer`` may map this process's slots: a local worker, or a producer that
        says it runs on this host (one that cannot map them, in a container say, sends its
        rows over the socket after all, so offering costs nothing)."""
        return self._is_local(peer) or peer.host == _HOST

    def _hand_over(self, leaver: Peer, reason: str) -> None:
        """A producer left the job on purpose (SIGTERM, scale-down): give its files to the
        others and send again, to the files' new owners, every unit it had not returned.

        Exactly once still holds: a part of a re-sent unit that the leaver sends after all is
        no longer expected, and is dropped (``dropped_parts``)."""
        del self._peers[leaver.identity]
        self._late.add(leaver.identity)  # a hello from it later does not make it an owner
        heirs = [self._peers[i] for i in self._slots if i in self._peers]
        if not heirs:
            raise WorkerDiedError(
                f"worker {leaver.name} (pid {leaver.pid} on {leaver.host}) left the job "
                f"({reason}) and no other worker is left to take its files"
            )
        adopted = hand_over_files(leaver.files, heirs)
        for identity, files in adopted.items():
            self._owner_slot[files] = self._slots.index(identity)
            self._send_job(self._peers[identity], files)
        assembler = self._require_assembler()
        for unit_id in sorted(leaver.outstanding):
            unit = self._units.pop(unit_id)
            parts = self._send_units(unit.seq, assembler.planned(unit.seq), unit.positions)
            assembler.add_expected_parts(unit.seq, parts - 1)
        self.counters["reassigned_units"] += len(leaver.outstanding)
        self._log.warning(
            "worker %s (%s) left the job (%s): %d files and %d units handed to %d others",
            leaver.name, leaver.host, reason, len(leaver.files), len(leaver.outstanding),
            len(adopted),
        )  # fmt: skip

    def _can_hand_over(self) -> bool:
        """Whether a producer's work can go to the others now (once the index is built)."""
        return self._assembler is not None

    def _require_assembler(self) -> BatchAssembler:
        if self._assembler is None:  # unreachable: units exist only after the handshake
            raise RuntimeError("no batch is planned before the index is built")
        return self._assembler

    def _released(self) -> int:
        return self._assembler.released if self._assembler is not None else 0

    def _release(self, batch: Batch) -> None:
        rows = len(batch.arrays["sample"])
        self.counters["batches"] += 1
        self.counters["clips"] += rows
        self.counters["bytes"] += batch.arrays["frames"].nbytes
        self.out.put(batch)

    def _check_health(self, now: float) -> None:
        if self.local_workers is not None:
            for name, pid, code in self.local_workers.exited():
                how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                peer = next((p for p in self._peers.values() if p.name == name), None)
                held = len(peer.outstanding) if peer else 0
                raise WorkerDiedError(
                    f"worker {name} (pid {pid}) {how} while the iteration needed it "
                    f"({held} units outstanding); its output, if any, is on stderr above"
                )
        timeout = self.config.options.unit_timeout_s
        for peer in self._peers.values():
            if peer.outstanding and now - peer.last_progress > timeout:
                unit = self._units[min(peer.outstanding)]
                raise WorkerTimeoutError(
                    f"worker {peer.name} (pid {peer.pid} on {peer.host}) returned nothing for "
                    f"{now - peer.last_progress:.0f} s (unit_timeout_s={timeout:g}); it holds "
                    f"{self._unit_label(unit)} and {len(peer.outstanding) - 1} more"
                )

    def _unit_label(self, unit: Unit) -> str:
        """A unit as error messages name it."""
        planned = self._require_assembler().planned(unit.seq)
        return f"unit {unit.id} (batch {planned.index} of epoch {planned.epoch})"

    def _send(self, peer: Peer, kind: str, fields: dict[str, Any]) -> None:
        try:
            self._router.send(peer.identity, kind, fields)
        except zmq.ZMQError as exc:  # EHOSTUNREACH (gone) or EAGAIN (not reading at all)
            if not self._is_local(peer) and self._can_hand_over():
                # A producer that is leaving (its BYE still on the way) or gone: its work
                # goes to the others, as when its BYE arrives.
                self._hand_over(peer, f"unreachable: {exc}")
                return
            # A local worker that exited is better reported with its exit code, which its
            # process gives once it is fully gone (its socket closes a moment earlier).
            deadline = time.monotonic() + _EXIT_REPORT_WAIT_S
            while self.local_workers is not None and time.monotonic() < deadline:
                self._check_health(time.monotonic())
                time.sleep(0.02)
            raise WorkerDiedError(
                f"cannot send to worker {peer.name} (pid {peer.pid} on {peer.host}): {exc}"
            ) from exc

    def _is_local(self, peer: Peer) -> bool:
        """Whether ``peer`` is one of this iteration's own local worker processes."""
        return self.local_workers is not None and peer.name in self.local_workers.names

    def _say_bye(self) -> None:
        for peer in self._peers.values():
            try:
                self._router.send(
                    peer.identity, wire.BYE, {"reason": "iteration over"}, zmq.NOBLOCK
                )
            except zmq.ZMQError as exc:
                self._log.debug("no bye to %s: %s", peer.name, exc)


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0  # the owning worker reports the unreadable file with its name
