"""Tiny fake peers for the consumer's parts, in-process: no sockets, no processes, no files.

As grain tests its worker pool with tiny producers, the consumer's parts (credit gate, peer
session, schedulers) are tested here against fakes that speak the protocol in memory:

* :class:`FakeTransport`: records what a :class:`~h5feed.consumer.core.session.PeerSession`
  sends, and fails (``zmq.ZMQError``) for the identities a test chooses;
* :class:`FakeLocalProcesses`: the iteration's local worker processes, exiting on demand;
* :func:`hello_frames`: the frames of a HELLO, as a worker sends them;
* :class:`FakeWorker`: one producer behind a :class:`~h5feed.consumer.core.ledger.Peer`; answers JOB
  with INDEX, UNIT with DATA whose ``frames`` are filled with each row's sample id, SOURCE with
  SOURCE_INFO, ITEMS and PULL with DATA of packed elements;
* :class:`Fleet`: fake workers around one scheduler, the network between them in memory, so a
  test decides who answers what and when, and when the trainer takes a batch.

Configurations are built by :func:`hdf_config` and :func:`source_config` only (the config
classes are being reshaped: adapting the tests is an edit here).
"""

from __future__ import annotations

import collections
import dataclasses
import mmap
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import zmq

from h5feed.common.config import ClipSpec
from h5feed.common.elements import values as elements
from h5feed.common.elements.values import ElementSpec
from h5feed.common.protocol import messages
from h5feed.common.protocol.versions import PROTOCOL_VERSION
from h5feed.consumer.config.groups import FeedOptions
from h5feed.consumer.core import recovery
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.events import LossCause, PeerLost
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.scheduler import Reassignment, Scheduler, Send
from h5feed.consumer.core.session import PeerSession
from h5feed.consumer.options import DataOptions, HdfConfig, LayoutArgs
from h5feed.consumer.plan.epoch_plan import Index
from h5feed.consumer.sources.options import SourceConfig

#: A host name no fake peer shares with this machine, so no batch goes to shared memory.
FAKE_HOST = "fake-host.invalid"
#: Frame size of fake clips when the clip spec leaves it open (no resize, no crop).
DEFAULT_FRAME_HW = (2, 2)

# -- configurations ---------------------------------------------------------------------

_CLIP_FIELDS = frozenset(f.name for f in dataclasses.fields(ClipSpec))
_DATA_FIELDS = frozenset(f.name for f in dataclasses.fields(DataOptions))
_OPTION_DEFAULTS: dict[str, Any] = {
    "batch_size": 4,
    "workers": 1,
    "index_cache": None,
    "shared_memory": False,
    "tune_malloc": False,
}
_HDF_DEFAULTS: dict[str, Any] = {"clip_len": 2, **_OPTION_DEFAULTS}


def hdf_config(files: Sequence[str], **options: Any) -> HdfConfig:
    """An HDF5 feed over ``files`` (paths need not exist); ``options`` are the keyword
    arguments of ``h5feed.batches`` (clip spec and feed options), over small test defaults."""
    values = {**_HDF_DEFAULTS, **options}
    clip = ClipSpec.of(**{k: v for k, v in values.items() if k in _CLIP_FIELDS})
    rest = {k: v for k, v in values.items() if k not in _CLIP_FIELDS}
    data = {k: v for k, v in rest.items() if k in _DATA_FIELDS}
    unknown = set(rest) - set(data) - set(FeedOptions.names())
    if unknown:
        raise TypeError(f"hdf_config: unknown options {sorted(unknown)}")
    options = FeedOptions.of(rest)
    return HdfConfig(tuple(files), clip, LayoutArgs().resolve(), options, DataOptions(**data))


def source_config(
    source: str = "fake_sources:make",
    *,
    spec: ElementSpec | None = None,
    ragged: bool | tuple[str, ...] = False,
    steps_per_epoch: int | None = None,
    **options: Any,
) -> SourceConfig:
    """A user source's feed; ``spec`` stands for ``output_signature``; ``options`` are feed
    options, over small test defaults."""
    values = {k: v for k, v in {**_OPTION_DEFAULTS, **options}.items() if k != "index_cache"}
    unknown = set(values) - set(FeedOptions.names())
    if unknown:
        raise TypeError(f"source_config: options {sorted(unknown)} do not apply to a source")
    return SourceConfig(
        source=source,
        ragged=ragged,
        steps_per_epoch=steps_per_epoch,
        spec=spec,
        sys_path=("/nonexistent",),
        options=FeedOptions.of(values),
    )


# -- peers, frames, the transport -------------------------------------------------------


def make_peer(name: str, *, local: bool = False, host: str = FAKE_HOST, pid: int = 1) -> Peer:
    """A peer as the session makes it from a HELLO (identity = the name's bytes)."""
    peer = Peer(name.encode(), name, pid, host)
    peer.local = local
    return peer


def hello_frames(worker: str, pid: int = 1, host: str = FAKE_HOST) -> list[Any]:
    """The frames of worker ``worker``'s HELLO (routing frame removed)."""
    return messages.encode(
        messages.Hello(worker, pid, host, "h5feed-test", f"nonce-{worker}-{pid}")
    )


def frames_of(message: messages.Message) -> list[Any]:
    """The frames of any message, as a peer sends them."""
    return messages.encode(message)


def over_the_wire(message: messages.Message) -> messages.Message:
    """``message`` encoded and decoded, as the other side sees it (read-only arrays)."""
    return messages.decode(messages.encode(message))


class FakeTransport:
    """Records sends; ``send`` to an identity in :attr:`failing` raises ``zmq.ZMQError``.
    Each message is encoded in the version it is sent in, as the ROUTER does (so a field that
    version cannot carry raises ``FeatureVersionError`` here too); :attr:`versions` holds
    the version of each send."""

    def __init__(self, failing: Iterable[bytes] = ()) -> None:
        self.failing = set(failing)
        self.sent: list[tuple[bytes, messages.Message, int]] = []
        self.versions: list[int] = []

    def send(
        self, identity: bytes, message: messages.Message, flags: int = 0, version: int = 0
    ) -> None:
        if identity in self.failing:
            raise zmq.ZMQError(zmq.EHOSTUNREACH)
        messages.encode(message, version or PROTOCOL_VERSION)
        self.sent.append((identity, message, flags))
        self.versions.append(version or PROTOCOL_VERSION)

    def to(self, identity: bytes) -> list[messages.Message]:
        """What was sent to ``identity``, in order."""
        return [message for who, message, _flags in self.sent if who == identity]


class FakeLocalProcesses:
    """Local worker processes by name; :meth:`exit` makes one exit with a code (< 0: killed
    by that signal), as ``LocalWorkers.exited`` then reports it."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = list(names)
        self.retired: set[int] = set()  # pids replaced already (their hellos are stale)
        self._exited: list[tuple[str, int, int]] = []

    def exit(self, name: str, code: int, pid: int = 4242) -> None:
        self._exited.append((name, pid, code))

    def exited(self) -> list[tuple[str, int, int]]:
        return list(self._exited)


class FakeLocalWorkers:
    """The iteration's local worker processes as the loop and recovery use them: the
    session's ``LocalProcesses`` and recovery's ``Replacer`` in one, one pid per name.

    :meth:`exit` makes the current process of a name exit (as a SIGKILL or a crash would);
    ``kill`` and ``replace`` are what recovery calls: ``replace`` retires the old pid and
    gives the name a new one, listed in :attr:`replacements` for the test to start as a new
    peer. Never a crash loop: that rule is ``LocalWorkers``' own, pinned with real processes
    in tests/system/test_failures.py. Thread-safe (the loop's thread replaces, a test's thread
    exits).
    """

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.names = list(pids)
        self.retired: set[int] = set()
        self.replacements: list[tuple[str, int]] = []  # (name, new pid), in order
        self.delivered_pids: set[int] = set()
        self._pids = dict(pids)
        self._codes: dict[str, int] = {}  # name -> exit code of its current process
        self._next_pid = max(self._pids.values(), default=0) + 1000
        self._lock = threading.Lock()

    def exit(self, name: str, code: int) -> None:
        with self._lock:
            self._codes[name] = code

    def exited(self) -> list[tuple[str, int, int]]:
        with self._lock:
            return [(name, self._pids[name], code) for name, code in self._codes.items()]

    def kill(self, name: str) -> int | None:
        with self._lock:
            return self._codes.setdefault(name, -signal.SIGKILL)

    def replace(self, name: str, hung: bool = False) -> int:
        with self._lock:
            self.retired.add(self._pids[name])
            self._codes.pop(name, None)
            pid = self._pids[name] = self._next_pid
            self._next_pid += 1
            self.replacements.append((name, pid))
            return pid

    def delivered(self, pid: int) -> None:
        with self._lock:
            self.delivered_pids.add(pid)

    def kill_retired(self, pid: int) -> None:
        return None  # nothing here is retired (workers="auto" retires real processes)

    @property
    def pids(self) -> list[int]:
        with self._lock:
            return list(self._pids.values())

    def pid(self, name: str) -> int:
        with self._lock:
            return self._pids[name]


# -- datasets and sources ---------------------------------------------------------------


def fake_videos(
    counts: Sequence[int], frames: int = 8
) -> dict[str, tuple[messages.VideoEntry, ...]]:
    """Files ``f0.h5``, ``f1.h5``, ... with ``counts[i]`` videos each (labels: the global
    video number), as their INDEX messages list them."""
    videos: dict[str, tuple[messages.VideoEntry, ...]] = {}
    number = 0
    for file_index, count in enumerate(counts):
        entries = []
        for position in range(count):
            entries.append(messages.VideoEntry(f"v{position:03d}", frames + position, number))
            number += 1
        videos[f"f{file_index}.h5"] = tuple(entries)
    return videos


def fake_index(videos: Mapping[str, Sequence[messages.VideoEntry]]) -> Index:
    """The index the scheduler builds from these files' INDEX answers."""
    files = list(videos)
    return Index.build(files, [videos[f] for f in files])


def planned_batches(config: HdfConfig, index: Index, epochs: Iterable[int]) -> list[list[int]]:
    """The samples of every planned batch of ``epochs``, straight from :class:`EpochPlan`."""
    out = []
    for epoch in epochs:
        plan = config.epoch_plan(index, epoch)
        out += [batch.samples.tolist() for batch in plan]
    return out


@dataclasses.dataclass
class FakeSource:
    """A user source as the fake workers run it: ``kind`` ("map", "keras", "generator"),
    ``length`` (items, keras batches, or a generator's elements over all shards), and
    ``element(i)``: item ``i`` (map), batch ``i`` (keras), element ``i`` (generator; worker
    ``w`` of ``W`` yields ``i = w, w + W, w + 2W, ...`` below ``length``)."""

    kind: str
    length: int
    element: Callable[[int], Any]

    @property
    def spec(self) -> ElementSpec:
        return elements.infer_spec([self.element(0), self.element(1)])


def map_element(i: int) -> dict[str, Any]:
    """A map source's item ``i``: its id, and a small float vector holding it."""
    return {"id": np.int64(i), "x": np.full(2, i, np.float32)}


def keras_batch(b: int) -> dict[str, Any]:
    """A keras source's batch ``b``: 3 rows, each holding ``b``."""
    return {"x": np.full((3, 2), b, np.float32), "y": np.full(3, b, np.int64)}


def generator_element(i: int) -> dict[str, Any]:
    return {"id": np.int64(i)}


# -- the fake producer -------------------------------------------------------------------


class FakeWorker:
    """One fake producer behind ``peer`` (see the module docstring).

    ``videos``: the dataset's files (path -> INDEX entries); a UNIT row of a file this worker
    was not given by a JOB raises AssertionError (the scheduler sent work to a non-owner).
    ``source``: the user source it runs. ``slots``: whether it writes a UNIT's rows into the
    batch's shared-memory slot when offered one (as a local worker does).
    """

    def __init__(
        self,
        peer: Peer,
        videos: Mapping[str, Sequence[messages.VideoEntry]] | None = None,
        source: FakeSource | None = None,
        slots: bool = False,
    ) -> None:
        self.peer = peer
        self.videos = videos or {}
        self.source = source
        self.slots = slots
        self.files: set[int] = set()  # the files its JOBs gave it
        self.received: list[messages.Message] = []
        self._clip: tuple[int, int, int] = (1, *DEFAULT_FRAME_HW)  # clip_len, H, W
        self._shard: tuple[int, int] | None = None  # worker, workers
        self._pass: int | None = None
        self._position = 0  # next element of its shard in the pass
        #: Its copy's checks at an epoch's start (see h5feed.consumer.sources.agreement).
        self.checks: Callable[[int], tuple[messages.ItemCheck, ...]] = lambda epoch: ()

    def answer(self, message: messages.Message) -> list[messages.Message]:
        """What the worker sends back for ``message`` (nothing for BYE or a second SOURCE)."""
        self.received.append(message)
        match message:
            case messages.Job():
                return self._on_job(message)
            case messages.Unit():
                return [self._on_unit(message)]
            case messages.Source():
                return self._on_source(message)
            case messages.Items():
                return [self._on_items(message)]
            case messages.Pull():
                return [self._on_pull(message)]
            case messages.Check():
                return [self._info(message.job, message.epoch)]
        return []

    def _on_job(self, job: messages.Job) -> list[messages.Message]:
        clip = ClipSpec.from_wire(dict(job.clip))
        height, width = clip.frame_shape
        self._clip = (clip.clip_len, height or DEFAULT_FRAME_HW[0], width or DEFAULT_FRAME_HW[1])
        answers: list[messages.Message] = []
        for number, path in job.files:
            self.files.add(number)
            if job.send_index:
                answers.append(messages.Index(job.job, number, tuple(self.videos[path])))
        return answers

    def _on_unit(self, unit: messages.Unit) -> messages.Data:
        strangers = {row.file for row in unit.rows} - self.files
        if strangers:
            raise AssertionError(f"{self.peer.name} got rows of files {strangers} it never opened")
        samples = tuple(row.sample for row in unit.rows)
        frames = self.frames(samples)
        if unit.slot is not None and self.slots:
            self._write_slot(unit.slot, frames)
            return messages.Data(unit.job, unit.unit, unit.batch, samples)
        return messages.Data(unit.job, unit.unit, unit.batch, samples, {"frames": frames})

    def frames(self, samples: Sequence[int]) -> np.ndarray:
        """uint8 [rows, clip_len, H, W, 3], row ``i`` filled with ``samples[i] % 256``."""
        clip_len, height, width = self._clip
        frames = np.empty((len(samples), clip_len, height, width, 3), np.uint8)
        for row, sample in enumerate(samples):
            frames[row] = sample % 256
        return frames

    def _write_slot(self, slot: messages.SlotRef, frames: np.ndarray) -> None:
        fd = os.open(f"/proc/{slot.pid}/fd/{slot.fd}", os.O_RDWR)
        try:
            rows = frames.shape[1:]
            nbytes = slot.batch_rows * int(np.prod(rows))
            with mmap.mmap(fd, nbytes) as memory:
                batch = np.frombuffer(memory, np.uint8, nbytes).reshape(slot.batch_rows, *rows)
                batch[list(slot.positions)] = frames
                del batch
        finally:
            os.close(fd)

    def _require_source(self) -> FakeSource:
        if self.source is None:
            raise AssertionError(f"{self.peer.name} runs no source")
        return self.source

    def _on_source(self, message: messages.Source) -> list[messages.Message]:
        self._require_source()
        if self._shard is not None:
            return []  # the second SOURCE: the spec to check elements against
        self._shard = (message.worker, message.workers)
        return [self._info(message.job, message.epoch)]

    def _info(self, job: str, epoch: int) -> messages.SourceInfo:
        """SOURCE_INFO, with :attr:`checks` of ``epoch`` (the answer to SOURCE and CHECK)."""
        source = self._require_source()
        length = None if source.kind == "generator" else source.length
        spec = source.spec.to_wire()
        return messages.SourceInfo(job, source.kind, length, spec, epoch, self.checks(epoch))

    def _pack(self, spec_source: FakeSource, values: Sequence[Any]) -> dict[str, np.ndarray]:
        spec = spec_source.spec
        return dict(elements.pack(spec, [elements.flatten_checked(v, spec) for v in values]))

    def _on_items(self, items: messages.Items) -> messages.Data:
        source = self._require_source()
        arrays = self._pack(source, [source.element(i) for i in items.items])
        return messages.Data(items.job, items.unit, items.batch, items.items, arrays)

    def shard(self) -> list[int]:
        """The ids of the elements this worker's generator yields in one pass."""
        source = self._require_source()
        if self._shard is None:
            raise AssertionError(f"{self.peer.name} got no SOURCE")
        worker, workers = self._shard
        return list(range(worker, source.length, workers))

    def _on_pull(self, pull: messages.Pull) -> messages.Data:
        source = self._require_source()
        if pull.pass_ != self._pass:
            self._pass, self._position = pull.pass_, 0  # a new pass starts from the start
        ids = self.shard()[self._position : self._position + pull.count]
        ordinals = tuple(range(self._position, self._position + len(ids)))
        self._position += len(ids)
        arrays = self._pack(source, [source.element(i) for i in ids])
        return messages.Data(pull.job, pull.unit, pull.batch, ordinals, arrays)


# -- the fleet ---------------------------------------------------------------------------


class Fleet:
    """Fake workers around one scheduler, with the network in memory: what the scheduler sends
    waits in the worker's inbox (in order) until the test lets that worker answer; released
    batches wait in :attr:`released` until the trainer takes them (:meth:`take`).

    Every message crosses :func:`over_the_wire` both ways. :meth:`dispatch` checks the credit
    rule: each ``next_units`` call dispatches one credit per new batch it sends units of, and
    never more than the budget is in flight.

    The fleet drives the scheduler through its protocol, one call at a time, in an order the
    test chooses; it is no second loop. A loss goes through the real rules: the fleet's peers
    are listed in a real :class:`~h5feed.consumer.core.session.PeerSession` (as their HELLOs
    would list them), and :meth:`lose` is the session's ``lose`` and then
    :func:`~h5feed.consumer.core.recovery.recover` with :class:`FakeLocalWorkers`, as the
    loop handles a ``PeerLost``. The loop itself (pass order, timeouts, the socket) is driven
    in process by tests/support/wire_peers.py.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        workers: Sequence[FakeWorker],
        gate: CreditGate,
        counters: Counters,
    ) -> None:
        self.scheduler = scheduler
        self.workers = {w.peer: w for w in workers}
        self.gate = gate
        self.counters = counters
        #: The peers that answer (a test removes one to make it silent: it stays connected).
        self.live: list[Peer] = [w.peer for w in workers]
        self.local = FakeLocalWorkers({p.name: p.pid for p in self.live if p.local})
        #: Who is connected: the heirs recovery hands a lost peer's work to.
        self.session = PeerSession("fleet", FakeTransport(), self.local, 60.0, counters)
        for peer in self.live:
            self.session.peers[peer.identity] = peer
        self._attempts = recovery.UnitAttempts(FeedOptions().processes.max_unit_attempts)
        self.inbox: dict[Peer, collections.deque[messages.Message]] = {
            w.peer: collections.deque() for w in workers
        }
        self.released: collections.deque[Batch] = collections.deque()
        self.taken: list[Batch] = []
        self.posted: list[Send] = []  # everything the scheduler sent, in order
        self.dispatched_batches: set[int] = set()  # seqs of batches sent by next_units
        self.most_ahead = 0  # most batches dispatched and not taken (nor refunded)

    # -- the network -----------------------------------------------------------------------

    def post(self, sends: Sequence[Send]) -> None:
        for send in sends:
            self.posted.append(send)
            self.inbox[send.peer].append(over_the_wire(send.message))

    def pending(self) -> list[Peer]:
        """The live peers with a message waiting."""
        return [peer for peer in self.live if self.inbox[peer]]

    def answer_one(self, peer: Peer) -> list[Batch]:
        """``peer`` answers its oldest message; the batches that answer completes."""
        message = self.inbox[peer].popleft()
        batches: list[Batch] = []
        for reply in self.workers[peer].answer(message):
            reply = over_the_wire(reply)
            peer.last_heard = time.monotonic()  # as the session notes every message received
            if isinstance(reply, messages.Data):
                batches += self.scheduler.on_data(peer, reply)
            else:
                self.post(self.scheduler.on_control(peer, reply))
        self.released.extend(batches)
        return batches

    def answer_all(self, peer: Peer) -> list[Batch]:
        batches: list[Batch] = []
        while self.inbox[peer]:
            batches += self.answer_one(peer)
        return batches

    # -- the loop's steps ------------------------------------------------------------------

    def handshake(self) -> None:
        """Share out the work and answer until the scheduler is ready and every handshake
        message has been answered."""
        self.post(self.scheduler.start(self.live))
        for _ in range(1000):
            if self.scheduler.ready:
                for peer in self.live:  # a source's second SOURCE (the spec)
                    if self.answer_all(peer):
                        raise AssertionError("a batch before any unit was sent")
                return
            waiting = self.pending()
            if not waiting:
                raise AssertionError(f"handshake stuck: {self.scheduler.handshake_waiting()}")
            self.answer_one(waiting[0])
        raise AssertionError("handshake never ends")

    def dispatch(self) -> list[Send]:
        before = self.gate.dispatched
        parked_before = set(getattr(self.scheduler, "parked_batches", ()))
        sends = self.scheduler.next_units(self.gate, self.live)
        # A JOB may go ahead of units: extra readers dealt at a dispatch (hdf5/sharing.py).
        seqs = {
            batch_of(s.message)
            for s in sends
            if not isinstance(s.message, (messages.Check, messages.Job))
        }
        if seqs & self.dispatched_batches:
            raise AssertionError(f"next_units sent units of batches {seqs} dispatched before")
        self.dispatched_batches |= seqs
        # A batch whose rows all wait for a file's new owner is dispatched but parked.
        seqs |= set(getattr(self.scheduler, "parked_batches", ())) - parked_before
        if len(seqs) != self.gate.dispatched - before:
            raise AssertionError(
                f"next_units sent units of {len(seqs)} batches for "
                f"{self.gate.dispatched - before} credits"
            )
        if not 0 <= self.gate.inflight <= self.gate.budget:
            raise AssertionError(
                f"{self.gate.inflight} batches in flight, budget {self.gate.budget}"
            )
        self.most_ahead = max(self.most_ahead, self.gate.inflight)
        self.post(sends)
        return sends

    def take(self) -> Batch:
        """The trainer takes the oldest released batch (its credit returns)."""
        batch = self.released.popleft()
        self.gate.take()
        self.taken.append(batch)
        return batch

    def join(self, worker: FakeWorker) -> list[Send]:
        """``worker`` joins during the iteration (a replacement, an added producer)."""
        self.workers[worker.peer] = worker
        self.inbox[worker.peer] = collections.deque()
        self.live.append(worker.peer)
        self.session.peers[worker.peer.identity] = worker.peer
        sends = self.scheduler.join(worker.peer)
        self.post(sends)
        return sends

    def lose(self, peer: Peer, cause: LossCause = "bye", reason: str = "") -> Reassignment:
        """``peer`` is gone, for ``cause`` (a BYE by default: it left on purpose): the session
        drops it and :func:`~h5feed.consumer.core.recovery.recover` hands its work over (or
        raises), exactly as the loop does. Its inbox stays, for late parts."""
        if peer in self.live:  # a silent peer is connected but not live
            self.live.remove(peer)
        self.session.lose(peer, cause, reason or cause)
        event = self.session.events.pop()
        if not (isinstance(event, PeerLost) and event.peer is peer):
            raise AssertionError(f"{peer} was not a peer of the session: {event}")
        moved = recovery.recover(event, self.scheduler, self.session, self.local, self._attempts)
        self.post(moved.sends)
        return moved

    def run(
        self, rng: random.Random | None = None, take_chance: float = 0.3, max_steps: int = 100_000
    ) -> list[Batch]:
        """Dispatch, answer and take in an order drawn from ``rng`` (None: answer everything
        first, take only when nothing else can move) until the scheduler has finished; every
        batch taken, in the order taken."""
        for _ in range(max_steps):
            if self.scheduler.finished:
                break
            self.dispatch()
            waiting = self.pending()
            if self.released and (not waiting or (rng is not None and rng.random() < take_chance)):
                self.take()
            elif waiting:
                self.answer_one(rng.choice(waiting) if rng is not None else waiting[0])
            elif not self.scheduler.finished:
                raise AssertionError("stuck: nothing to answer, nothing to take")
        else:
            raise AssertionError(f"not finished after {max_steps} steps")
        while self.released:
            self.take()
        return self.taken


def batch_of(message: messages.Message) -> int:
    if isinstance(message, (messages.Unit, messages.Items, messages.Pull)):
        return message.batch
    raise AssertionError(f"next_units sent a {message.KIND}")
