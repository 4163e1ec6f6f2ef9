"""The real consumer loop in process: fake producers on real sockets around a real FeedLoop.

:class:`LoopDriver` builds an iteration's consumer side as ``BatchStream`` does — a real
:class:`~h5feed.consumer.core.router.Router` (a ROUTER socket on ``ipc://``), waker, credit gate,
:class:`~h5feed.consumer.core.session.PeerSession` and scheduler — and runs the real
:class:`~h5feed.consumer.core.loop.FeedLoop` on its thread, with
:mod:`~h5feed.consumer.core.recovery` deciding every loss. What is fake: the producers
(:class:`WirePeer`, a DEALER socket in the test's thread answering what a
:class:`~fake_peers.FakeWorker` answers, encoded by the real wire module), the local processes
(:class:`~fake_peers.FakeLocalWorkers`), and the trainer (the driver takes batches and returns
their credits, as ``BatchStream.__next__`` does).

Why the real socket rather than a fake transport under the session: the loop's pass is what
these tests pin — poll, read what waits, health checks every 0.2 s, sends that fail with
``ROUTER_MANDATORY`` once a connection is gone — and a producer whose socket closes is lost
the way a killed process is (``unreachable``), with no hook into the loop.

No assertion depends on a sleep: the driver pumps (answers, takes) until a condition holds,
each wait bounded by :data:`WAIT_S`, after which it fails saying what it waited for.
"""

from __future__ import annotations

import contextlib
import math
import queue
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import zmq
from fake_peers import FakeLocalWorkers, FakeWorker

from h5feed.common.protocol import messages
from h5feed.consumer.config.groups import FeedOptions
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.loop import END, FAILED, FeedLoop
from h5feed.consumer.core.router import Router
from h5feed.consumer.core.scheduler import Scheduler
from h5feed.consumer.core.session import PeerSession
from h5feed.consumer.core.waker import Waker

#: Every wait of these tests is bounded by this (a bug fails, it does not hang).
WAIT_S = 30.0
#: A fake producer says HELLO this often until the consumer says anything to it (a real
#: worker does every second), so a HELLO that crossed a closing connection is said again.
_HELLO_EVERY_S = 0.2
_POLL_MS = 10

Respond = Callable[[messages.Message], list[messages.Message]]


class WirePeer:
    """One fake producer on a DEALER socket (identity: its name). It answers each message
    with :attr:`respond` (by default its worker's answers); a test swaps that to make it fail
    (an ERROR), go silent, or die (:meth:`LoopDriver.kill`)."""

    def __init__(
        self,
        context: zmq.Context[Any],
        address: str,
        worker: FakeWorker,
        hello: Sequence[Any] | None = None,
        routing_id: bytes | None = None,
    ) -> None:
        """``routing_id``: its socket's (default: its name; a worker's renewed socket has
        one of its own, ``NAME~1``...)."""
        self.worker = worker
        self.name = worker.peer.name
        self.received: list[messages.Message] = []
        self.sent: list[messages.Message] = []
        self.respond: Respond = worker.answer
        self.closed = False
        peer = worker.peer
        own = messages.Hello(peer.name, peer.pid, peer.host, "h5feed-test", secrets.token_hex(8))
        self._hello = list(hello) if hello is not None else messages.encode(own)
        self._last_hello = -math.inf
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTING_ID, routing_id or self.name.encode())
        self.socket.connect(address)

    def tick(self, now: float) -> None:
        """Say HELLO (again) while the consumer has said nothing to it."""
        if not self.closed and not self.received and now - self._last_hello >= _HELLO_EVERY_S:
            self._last_hello = now
            self.socket.send_multipart(self._hello)

    def read(self) -> None:
        """Answer every message waiting."""
        while not self.closed:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            message = messages.decode(frames)
            self.received.append(message)
            for reply in self.respond(message):
                if self.closed:  # it died answering
                    return
                self.send(reply)

    def send(self, message: messages.Message) -> None:
        self.sent.append(message)
        self.socket.send_multipart(messages.encode(message))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.socket.close(linger=0)

    def got(self, kind: type[messages.Message]) -> list[Any]:
        """The messages of ``kind`` it received, in order."""
        return [m for m in self.received if isinstance(m, kind)]


class LoopDriver:
    """One iteration's consumer (see the module docstring), its fake producers and trainer.

    ``address``: where its ROUTER binds (:func:`short_ipc_address`); ``make_scheduler(counters,
    gate)``: the iteration's scheduler; ``local``: the local
    workers (the loop waits for each to say hello, as it waits for its own processes);
    ``make_worker(name, pid)``: the fake worker a replacement process runs.
    """

    def __init__(
        self,
        address: str,
        options: FeedOptions,
        make_scheduler: Callable[[Counters, CreditGate], Scheduler],
        job: str,
        local: FakeLocalWorkers | None = None,
        make_worker: Callable[[str, int, bool], FakeWorker] | None = None,
    ) -> None:
        self.address = address
        self.local = local
        self.make_worker = make_worker
        self.context: zmq.Context[Any] = zmq.Context()
        self.counters = Counters()
        self.waker = Waker()
        self.router = Router(options, [self.address], self.waker.fileno)
        self.gate = CreditGate(options.processes.inflight_batches, self.waker.wake)
        self.session = PeerSession(
            job, self.router, local, options.processes.unit_timeout_s, self.counters
        )
        self.scheduler = make_scheduler(self.counters, self.gate)
        expected = len(local.names) if local is not None else 0
        self.loop = FeedLoop(
            options, self.router, self.waker, self.session, self.gate, self.scheduler,
            expected, self.counters, local,
        )  # fmt: skip
        self.peers: list[WirePeer] = []
        self.taken: list[Batch] = []
        self.ended: object | None = None  # END or FAILED, once the loop put it
        self.taking = True  # the trainer takes batches (False: it pauses)
        self.take_until: int | None = None  # it pauses once it has taken this many
        #: Called with each new peer before it says anything (a replacement's too), so a
        #: test's :attr:`WirePeer.respond` is in place before its first answer.
        self.on_connect: Callable[[WirePeer], None] | None = None
        self._started = False
        self._replaced = 0  # of local.replacements, started so far

    # -- peers -----------------------------------------------------------------------------

    def connect(
        self,
        worker: FakeWorker,
        hello: Sequence[Any] | None = None,
        routing_id: bytes | None = None,
    ) -> WirePeer:
        """A new producer running ``worker`` (``hello``: other HELLO frames than its own;
        ``routing_id``: its socket's, see :class:`WirePeer`)."""
        peer = WirePeer(self.context, self.address, worker, hello, routing_id)
        self.peers.append(peer)
        if self.on_connect is not None:
            self.on_connect(peer)
        peer.tick(time.monotonic())
        return peer

    def kill(self, peer: WirePeer) -> None:
        """``peer``'s process dies: its socket closes; a local one's exit is reported."""
        peer.close()
        if self.local is not None and peer.name in self.local.names:
            self.local.exit(peer.name, -9)

    def _start_replacements(self) -> None:
        """Start, as a new producer, each process recovery put in place of a dead one."""
        if self.local is None:
            return
        fresh = self.local.replacements[self._replaced :]
        self._replaced += len(fresh)
        for name, pid in fresh:
            if self.make_worker is None:
                raise AssertionError(f"worker {name} was replaced, and no make_worker given")
            self.connect(self.make_worker(name, pid, True))

    # -- running ---------------------------------------------------------------------------

    def start(self) -> None:
        self._started = True
        self.loop.start()

    def pump(self, until: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
        """Answer, take and start replacements until ``until()`` holds; AssertionError
        naming ``what`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not until():
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout_s:g} s for {what}")
            self._step()

    def pump_for(self, seconds: float) -> None:
        """Answer and take for ``seconds`` whatever happens (many of the loop's passes: its
        poll is 50 ms, its health check every 0.2 s). For a test that shows the loop keeps
        waiting; nothing it asserts depends on how long this takes."""
        end = time.monotonic() + seconds
        self.pump(lambda: time.monotonic() >= end, f"{seconds:g} s", seconds + WAIT_S)

    def finish(self, timeout_s: float = WAIT_S) -> object:
        """Run to the end of the iteration: END or FAILED (the loop's error in ``error``)."""
        self.pump(lambda: self.ended is not None, "the end of the iteration", timeout_s)
        self.loop.stop(timeout_s)
        if not self.loop.stopped:
            raise AssertionError(f"the loop's thread did not end within {timeout_s:g} s")
        return self.ended

    @property
    def error(self) -> BaseException | None:
        return self.loop.error

    def _step(self) -> None:
        now = time.monotonic()
        self._start_replacements()
        live = [peer for peer in self.peers if not peer.closed]
        poller = zmq.Poller()
        for peer in live:
            peer.tick(now)
            poller.register(peer.socket, zmq.POLLIN)
        ready = dict(poller.poll(_POLL_MS))  # without peers: waits _POLL_MS
        for peer in live:
            if ready.get(peer.socket):
                peer.read()
        self._take()

    def _take(self) -> None:
        """The trainer: take what the loop released, returning each batch's credit."""
        while self.ended is None and self.taking:
            if self.take_until is not None and len(self.taken) >= self.take_until:
                return
            try:
                item = self.loop.out.get_nowait()
            except queue.Empty:
                return
            if item is END or item is FAILED:
                self.ended = item
                return
            self.gate.take()
            self.taken.append(item)

    def close(self) -> None:
        """Stop the loop (it closes the router and waker) and close every peer."""
        if self._started:
            self.loop.stop()
        else:
            self.router.close()
            self.waker.close()
        for peer in self.peers:
            peer.close()
        self.context.term()
        self.scheduler.close()


@contextlib.contextmanager
def short_ipc_address() -> Iterator[str]:
    """An ``ipc://`` address in a private directory of its own, removed afterwards (short:
    an ipc path must fit in 107 bytes, which pytest's ``tmp_path`` may not)."""
    directory = tempfile.mkdtemp(prefix="h5l-")
    try:
        yield f"ipc://{directory}/feed.sock"
    finally:
        shutil.rmtree(directory, ignore_errors=True)
