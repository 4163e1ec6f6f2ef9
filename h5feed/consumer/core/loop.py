"""The consumer's loop: one thread that composes the session, the gate and a scheduler.

Made last, from parts made before it (one direction of wiring: keys and socket, then local
workers, then this loop): nothing is patched in afterwards. Each pass, in order:

1. handle the queued peer events (:mod:`h5feed.consumer.core.events`), here and only here: a DATA
   part goes to the scheduler and its complete batches to the trainer's queue; an ERROR ends
   the iteration; a lost peer's work is re-assigned (and a local worker replaced) as
   :mod:`h5feed.consumer.core.recovery` says; a peer that joins during the iteration gets a share
   of the work (``Scheduler.join``);
2. dispatch units while the credit gate has credits;
3. end the iteration when the scheduler has released every batch;
4. wait for the socket (or a returned credit, or :meth:`stop`) for at most one poll interval,
   and turn what arrived, and the health checks, into events.

Failure rules: a worker ERROR (with the worker's traceback), no worker within
``start_timeout_s`` (at the start, or while work waits for a worker after every worker was
lost), a handshake with no answer for ``unit_timeout_s`` (while no producer owes one: such a
producer is lost by its own deadline first, and its files move on), a local worker that dies
more than ``max_restarts`` times a minute before returning any data (a crash loop), a unit
whose holder died ``max_unit_attempts`` times, or work that cannot move end the iteration with
an exception that the trainer's ``next()`` raises. Everything else a peer does (exit, SIGKILL,
vanish, stop, hang past ``unit_timeout_s``, say hello and nothing else, leave) costs only its
re-assignment. Nothing waits
forever.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable
from typing import Any, Protocol

from h5feed.common.errors import NoWorkersError, WorkerTimeoutError
from h5feed.common.protocol import messages
from h5feed.consumer.config.groups import FeedOptions
from h5feed.consumer.core import recovery
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.credits import CreditGate, RunningDry, grown_budget
from h5feed.consumer.core.events import Arrived, PeerJoined, PeerLost
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.router import Router
from h5feed.consumer.core.scheduler import Scheduler, Send
from h5feed.consumer.core.session import PeerSession
from h5feed.consumer.core.start_report import StartReport
from h5feed.consumer.core.waker import Waker

_POLL_MS = 50
_HEALTH_EVERY_S = 0.2
_MAX_MESSAGES_PER_PASS = 256
#: The messages that ask a worker for a unit of a batch (of any input kind).
_WORK = (messages.Unit, messages.Items, messages.Pull)

END = object()  # queued after the last batch of the iteration
FAILED = object()  # queued when the iteration failed; the error is ``FeedLoop.error``


class Autoscale(Protocol):
    """``workers="auto"`` (:class:`~h5feed.consumer.processes.autoscale.AutoWorkers`):
    started or retired local workers join or leave as any peer does."""

    def step(self, now: float, peers: Iterable[Peer]) -> None: ...


def all_connected(peers: Iterable[Peer], local_workers: int, listen: str | None) -> bool:
    """Whether the iteration may start: every one of its ``local_workers`` said hello (a
    producer that said hello first does not stand in for one, or it could take a whole short
    epoch from a local worker still starting), and with ``listen`` at least one worker of any
    kind."""
    connected = list(peers)
    local = sum(peer.local for peer in connected)
    return local >= local_workers and len(connected) >= (1 if listen else 0)


class FleetRefusal(Protocol):
    """What the loop asks ``fleet=``'s announcer (h5feed/consumer/processes/fleet_announcer.py)."""

    def refusal(self) -> str | None: ...


class FeedLoop:
    """Runs one iteration on its own thread; ``out`` gets batches, then END or FAILED."""

    def __init__(
        self,
        options: FeedOptions,
        router: Router,
        waker: Waker,
        session: PeerSession,
        gate: CreditGate,
        scheduler: Scheduler[object],
        expected_workers: int,
        counters: Counters,
        workers: recovery.Replacer | None = None,
        keep_socket: bool = False,
        autoscale: Autoscale | None = None,
        fleet: FleetRefusal | None = None,
    ) -> None:
        """``counters``: shared with the session and the scheduler; the loop adds
        ``peers_joined`` and ``reassigned_units``. ``keep_socket``: the router and
        waker outlive this iteration (persistent workers): the loop does not close them.
        ``autoscale``: ``workers="auto"``, stepped between units once the work is shared.
        ``fleet``: ``fleet=``'s announcer: a fleet that refuses this trainer ends the wait
        for producers at once, naming why."""
        self.options = options
        self.session = session
        self.gate = gate
        self.scheduler = scheduler
        self.out: queue.Queue[Any] = queue.Queue()
        self.error: BaseException | None = None
        self._router = router
        self._waker = waker
        self._expected = expected_workers
        self._workers = workers  # the local processes, to kill and replace
        self._attempts = recovery.UnitAttempts(options.processes.max_unit_attempts)
        self._counters = counters
        self._started = False  # the scheduler has shared out the work
        self._waiting_since: float | None = None  # work waits for a worker to join
        self._remote_losses = 0  # producers (not local workers) lost in this iteration
        self._keep_socket = keep_socket
        self._autoscale = autoscale
        self._fleet = fleet
        self._stop = threading.Event()
        self._next_health = 0.0
        self._batch_bytes = 0  # of the first batch assembled: the budget's memory bound
        self._units_sent = 0  # by next_units: units per batch dispatched, for the budget
        self._dry = RunningDry()  # the peers holding at most one unit: the wake-up rule
        self._thread = threading.Thread(target=self._run, name="h5feed-loop", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread (it says BYE to the workers) and wait for it to end."""
        self._stop.set()
        self._waker.wake()  # at once
        if threading.current_thread() is not self._thread and self._thread.is_alive():
            self._thread.join(timeout_s)

    @property
    def stopped(self) -> bool:
        """Whether the thread has ended (or never started)."""
        return not self._thread.is_alive()

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            if self._handshake():
                self._serve()
        except BaseException as exc:  # every failure must reach the trainer's next()
            self.error = exc
            self.out.put(FAILED)
        finally:
            self._tell_delivered()
            self.session.say_bye()
            # The scheduler (its shared-memory slots) is not closed here: workers may still
            # make units of this job that name those slots. The stream closes it once they
            # cannot (:func:`h5feed.consumer.stream._end`, ``WorkerPool.retire``).
            if not self._keep_socket:
                self._router.close()
                self._waker.close()  # a credit returned later wakes nothing (Waker allows it)

    def _tell_delivered(self) -> None:
        """Kept workers outlive the iteration: the ones that returned a DATA part are no
        crash loop if they die later (between iterations, or in the next one)."""
        if self._workers is None:
            return
        for peer in self.session.peers.values():
            if peer.local and peer.received.count:
                self._workers.delivered(peer.pid)

    def _handshake(self) -> bool:
        """Wait for the workers, share out the work, wait for the scheduler to be ready;
        False if stopped meanwhile."""
        options, session = self.options, self.session
        if not self._await_workers():
            return False
        self._send(self.scheduler.start(list(session.peers.values())))
        self._started = True
        progress, last_progress = self._handshake_progress(), time.monotonic()
        report = StartReport(session.log)  # a long first indexing is never silent
        while not self.scheduler.ready:
            if not self._pass():
                return False
            report.tick(self.scheduler.handshake_answers, self.scheduler.handshake_waiting)
            if self._handshake_progress() != progress:
                progress, last_progress = self._handshake_progress(), time.monotonic()
            elif time.monotonic() - last_progress > options.processes.unit_timeout_s and not any(
                peer.owes_since is not None and not peer.local for peer in session.peers.values()
            ):  # a producer that owes an answer is lost by its own deadline first
                raise WorkerTimeoutError(
                    f"{self.scheduler.handshake_waiting()} within "
                    f"{options.processes.unit_timeout_s:g} s (unit_timeout_s)"
                )
        report.done(self.scheduler.handshake_answers)
        return True

    def _await_workers(self) -> bool:
        """Wait for the workers the iteration starts with, then ``join_grace_s`` for more
        producers; False if stopped meanwhile.

        A producer lost inside the grace (BYE, disconnect, silence) is a lost producer like
        any other: when the ones left still make a start (:func:`all_connected`) the work is
        shared out among them; when nobody is left the wait starts again, up to
        ``start_timeout_s`` from that loss, and the grace with it. The plan never starts
        with no worker to share it with."""
        options, session = self.options, self.session
        listen = options.network.listen
        deadline = time.monotonic() + options.processes.start_timeout_s
        lost_in_grace = 0
        while True:
            while not all_connected(session.peers.values(), self._expected, listen):
                if time.monotonic() > deadline:
                    raise NoWorkersError(self._no_workers(lost_in_grace))
                refusal = self._fleet.refusal() if self._fleet is not None else None
                if refusal is not None and not session.peers:
                    raise NoWorkersError(f"the shared fleet refused this trainer: {refusal}")
                if not self._pass():
                    return False
            grace_end = time.monotonic() + (options.network.join_grace_s if listen else 0)
            while time.monotonic() < grace_end:  # producers already waiting say hello in 1 s
                if not self._pass():
                    return False
            if all_connected(session.peers.values(), self._expected, listen):
                return True
            lost_in_grace = self._counters.peers_lost
            session.log.warning("every producer was lost in the join grace: waiting again")
            deadline = time.monotonic() + options.processes.start_timeout_s

    def _handshake_progress(self) -> tuple[int, int]:
        """What counts as progress in the handshake: answers, and producers lost (their
        files went to others, who now owe the answers)."""
        return self.scheduler.handshake_answers, self._remote_losses

    def _pass(self) -> bool:
        """One pass without dispatching (the handshake's); False once stopped."""
        self._handle_events()
        self._pump(_POLL_MS)
        self._handle_events()
        self._check_waiting()
        return not self._stop.is_set()

    def _serve(self) -> None:
        gate, scheduler = self.gate, self.scheduler
        for peer in self.session.peers.values():  # from here on, what each pass touches
            self._dry.touch(peer)
        while not self._stop.is_set():
            self._handle_events()
            self._check_waiting()
            if self._autoscale is not None:  # between units: no message is half handled
                self._autoscale.step(time.monotonic(), self.session.peers.values())
            taken_at_dispatch = gate.taken
            units = scheduler.next_units(gate, list(self.session.peers.values()))
            # Work only: an HDF5 dispatch may send the JOBs of files dealt to more readers
            # first (hdf5/sharing.py), which are no units of a batch.
            self._units_sent += sum(isinstance(s.message, _WORK) for s in units)
            self._send(units)
            for batch in scheduler.take_released():  # complete without a part (padding)
                self.out.put(batch)
            if scheduler.finished:
                self._account_for_exits()
                self.out.put(END)
                return
            # Whether a returned credit must wake this thread: only when a worker holds at
            # most one unit (it may run dry before its next DATA would wake us). Set before
            # the look at ``taken`` below: see h5feed.consumer.core.credits.
            gate.want_wakeup(self._dry.any(self.session.peers))
            self._pump(0 if gate.changed_since(taken_at_dispatch) else _POLL_MS)

    def _account_for_exits(self) -> None:
        """One last health check before the end: a local worker that exited before its
        hello (a replacement killed while starting) holds no work, so the iteration can end
        before the periodic check sees it. Seen now, it is replaced and counted, and the
        iteration's ``stats()`` count every exit that happened during it."""
        self.session.check(time.monotonic())
        self._handle_events()

    def _pump(self, timeout_ms: int) -> None:
        """Wait up to ``timeout_ms`` and queue what arrived; check health now and then."""
        ready, woken = self._router.poll(timeout_ms)
        if woken:
            self._waker.drain()
        if ready:
            for frames in self._router.waiting(_MAX_MESSAGES_PER_PASS):
                self.session.receive(frames[0].bytes, frames[1:])
        now = time.monotonic()
        if now >= self._next_health:
            self._next_health = now + _HEALTH_EVERY_S
            self.session.check(now)

    def _send(self, sends: list[Send]) -> None:
        for send in sends:
            self._dry.touch(send.peer)
            self.session.send(send.peer, send.message)  # a failure is queued as PeerLost

    # -- events ----------------------------------------------------------------------------

    def _handle_events(self) -> None:
        events = self.session.events
        while events:
            event = events.popleft()
            if not isinstance(event, PeerLost):  # its units may have changed (RunningDry)
                self._dry.touch(event.peer)
            match event:
                case Arrived(peer, messages.Data() as data):
                    dropped = self._counters.dropped_parts
                    for batch in self.scheduler.on_data(peer, data):
                        self.out.put(batch)  # counted as the trainer takes it
                        if not self._batch_bytes:
                            self._learn_batch_bytes(batch)
                    if self._counters.dropped_parts > dropped:  # not a unit it holds
                        self.session.unexpected_part(peer, data.unit)
                case Arrived(peer, messages.Error() as error):
                    self._send(recovery.on_error(peer, error, self.scheduler))
                case Arrived(peer, message):
                    self._send(self.scheduler.on_control(peer, message))
                case PeerLost() as lost:
                    self._recover(lost)
                case PeerJoined(peer):
                    if self._started:  # else the handshake counts it (session.peers)
                        self._counters.peers_joined += 1
                        self._send(self.scheduler.join(peer))
                    self._grow_budget()

    def _learn_batch_bytes(self, batch: Batch) -> None:
        """The first batch's size bounds the budget's growth; grow it now."""
        self._batch_bytes = batch.nbytes or sum(a.nbytes for a in batch.arrays.values())
        self._grow_budget()

    def _grow_budget(self) -> None:
        """Grow the credit budget with the connected workers, unless the user set it
        (see :mod:`h5feed.consumer.core.credits`): a thousand producers do not share 4."""
        gate = self.gate
        if self.options.processes.grows_budget and gate.dispatched:
            workers, per_batch = len(self.session.peers), self._units_sent / gate.dispatched
            grown = grown_budget(
                gate.budget, workers, per_batch, self._batch_bytes, units_each=gate.units_each
            )
            gate.grow_to(grown)

    def _recover(self, lost: PeerLost) -> None:
        """A peer is gone: hand its work over (and count it), or fail as the rules say."""
        self._dry.forget(lost.peer)
        moved = recovery.recover(lost, self.scheduler, self.session, self._workers, self._attempts)
        self._remote_losses += not lost.peer.local
        self._send(moved.sends)
        self._counters.reassigned_units += moved.moved_units
        if lost.cause == "bye":  # it finished the unit in hand first: these it never made
            self._counters.units_handed_back += moved.moved_units
        else:  # it may have made some before it was lost
            self._counters.units_remade += moved.moved_units

    def _check_waiting(self) -> None:
        """End the iteration when work has waited ``start_timeout_s`` for a worker to join."""
        if not (self._started and self.scheduler.waiting_for_workers):
            self._waiting_since = None
            return
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
            self.session.log.warning("every worker that could take some work is gone: waiting")
        elif now - self._waiting_since > self.options.processes.start_timeout_s:
            raise NoWorkersError(
                f"work waited {self.options.processes.start_timeout_s:g} s (start_timeout_s) "
                f"for a worker after its workers were lost; {len(self.session.peers)} connected"
            )

    def _no_workers(self, lost_in_grace: int = 0) -> str:
        options = self.options
        if options.network.listen and not self._expected:
            text = (
                f"no producer connected to {options.network.listen} within "
                f"{options.processes.start_timeout_s:g} s"
            )
        else:
            local = sum(peer.local for peer in self.session.peers.values())
            text = (
                f"only {local} of {self._expected} local workers connected within "
                f"{options.processes.start_timeout_s:g} s"
            )
        if lost_in_grace:
            text += f" (lost {lost_in_grace} in the join grace)"
        if self.session.refused:
            text += f"; refused: {'; '.join(self.session.refused)}"
        return text
