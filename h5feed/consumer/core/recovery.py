"""The rules for a peer that is gone, and for a worker's ERROR: one place to change them.

:func:`recover` decides what a ``PeerLost`` event means. Every sample still arrives exactly
once per epoch (HDF5, map and keras sources; a generator's lost shard starts over: at least
once), because the lost peer's unanswered units are sent again and anything it sends later is
no longer expected and is dropped by unit id:

1. A local worker (one of the iteration's own processes) that exits, becomes unreachable, is
   stuck past ``unit_timeout_s`` or leaves while it holds work is killed if it still runs
   (so it can never write into shared memory again) and replaced by a new process under its
   name. Only a crash loop ends the iteration: a process that returned no DATA part since it
   started counts toward ``max_restarts`` deaths per worker per minute (then
   :class:`WorkerDiedError`); one that delivered (killed by an OOM killer while working) is
   replaced every time. Its work goes to the live peers at once; the replacement gets a
   share when it joins. A local worker that leaves with nothing to do is no loss. One that
   started over because its connection broke (``reconnected``: the same process, a new
   nonce) is not killed: its work goes to the others and it joins again as a new peer.
2. A remote producer that says BYE, becomes unreachable (no heartbeat answer within
   ``peer_timeout_s``), is stuck past ``unit_timeout_s``, or is replaced by a restarted
   process under its identity has its work handed to the live peers by the scheduler (one
   rule per input kind: see ``Scheduler.reassign``; peers in doubt last, see
   ``ledger.heard_first``). A producer that may still be running is
   not confirmed dead: shared-memory slots it could write stay out of the pool.
3. With no live peer left, the work waits for one to join (a replacement, a restarted
   producer, a new one); the loop ends the iteration if none does within ``start_timeout_s``.
4. A poison unit never loops forever: each time a peer holding units dies (exits, is killed,
   stuck, unreachable or restarted; not a BYE or a refusal), each of the units it held counts
   one attempt for each of its samples (:class:`UnitAttempts`, keyed by epoch and sample, so
   a re-sent unit carries its count); once a sample is at ``max_unit_attempts`` the
   iteration ends with :class:`PoisonUnitError` naming the samples of one unit: of the units
   at the limit, the one most often the oldest its dead holder held (a worker answers its
   units in the order they were sent, ``h5feed.producer.worker.waiting``, so the oldest is
   the one it was making), ties to the one sent first. Every held unit counts because the
   trainer cannot know which one was being made: a worker that dies a millisecond after
   sending a DATA may take that DATA with it (ZeroMQ sends from a thread of its own), so the
   oldest unit held may have been made already; counting only the oldest then missed the
   poison and let it kill more workers than the limit. Units that waited behind the poison
   on the same workers reach the limit with it; the rank names the poison, not them. Its
   worker's deaths need not be a crash loop for this (it delivered other units). A unit
   sent to a peer already in doubt (another worker of its host was lost as unreachable, and
   it was not heard from since: ``Peer.in_doubt``) counts nothing when that peer is lost:
   its host was failing before the unit came, so the death says nothing about the unit.
   Work handed over goes to peers not in doubt first (``heard_first``), so this is the case
   only when every reader of a file is in doubt.
"""

from __future__ import annotations

import collections
from collections.abc import Hashable
from typing import Final, Protocol

from h5feed.common.errors import FileReadError, PoisonUnitError, WorkerDiedError, WorkerError
from h5feed.common.protocol import messages
from h5feed.consumer.core.events import PeerLost
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.scheduler import Reassignment, Scheduler, Send
from h5feed.consumer.core.session import PeerSession, describe_exit

#: The causes of a loss that are a death of the holder (rule 4): not a BYE (it left on
#: purpose) nor a refusal (malformed traffic: the peer, not the unit, is at fault).
_DEATHS: Final = frozenset({"exited", "unreachable", "deadline", "restarted"})


class Replacer(Protocol):
    """The local worker processes (see
    :class:`~h5feed.consumer.processes.local_workers.LocalWorkers`)."""

    def kill(self, name: str) -> int | None: ...

    def replace(self, name: str, hung: bool = False) -> int: ...

    def delivered(self, pid: int) -> None: ...

    def kill_retired(self, pid: int) -> None: ...

    @property
    def pids(self) -> list[int]: ...


class UnitAttempts:
    """How many times the holder of each sample died, in one iteration (rule 4), and how
    many of those times its unit was the oldest the holder held (the one being made)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._deaths: collections.Counter[Hashable] = collections.Counter()
        self._oldest: collections.Counter[Hashable] = collections.Counter()

    def holder_died(self, peer: Peer, scheduler: Scheduler[object], reason: str) -> None:
        """Count one attempt for each sample ``peer`` held; PoisonUnitError naming the
        samples of the unit most likely making it die once a held sample is at the limit."""
        doubted = peer.host_in_doubt_since()
        # Oldest first; a unit sent to a host already failing counts no attempt.
        held = sorted(
            (sent_at, unit_id)
            for unit_id, sent_at in peer.outstanding.items()
            if doubted is None or sent_at < doubted
        )
        units = {unit_id: scheduler.samples_of(unit_id) for _sent_at, unit_id in held}
        for rank, (_sent_at, unit_id) in enumerate(held):
            for key, _name in units[unit_id]:
                self._deaths[key] += 1
                self._oldest[key] += rank == 0
        at_limit = [
            unit_id
            for _sent_at, unit_id in held
            if any(self._deaths[key] >= self.limit for key, _name in units[unit_id])
        ]
        if at_limit:
            # Most often the oldest held; ties to the one sent first (``held`` is in that
            # order, and max keeps the first of equals).
            unit_id = max(at_limit, key=lambda u: max(self._oldest[key] for key, _name in units[u]))
            names = [name for _key, name in units[unit_id]]
            shown = "; ".join(names[:8]) + (
                f"; and {len(names) - 8} more" if len(names) > 8 else ""
            )
            raise PoisonUnitError(
                f"the worker making {scheduler.describe(unit_id)} died {self.limit} times "
                f"(max_unit_attempts={self.limit}); the last: {peer} {reason}. Its "
                f"samples: {shown}",
                names,
            )


def recover(
    lost: PeerLost,
    scheduler: Scheduler[object],
    session: PeerSession,
    workers: Replacer | None,
    attempts: UnitAttempts | None = None,
) -> Reassignment:
    """What to send after ``lost`` (see the module docstring); raises when it is fatal."""
    peer, cause, reason = lost.peer, lost.cause, lost.reason
    held = len(peer.outstanding)
    if attempts is not None and cause in _DEATHS and held:
        attempts.holder_died(peer, scheduler, reason)  # PoisonUnitError at the limit
    if peer.local and workers is not None:
        if cause == "bye" and not held and not scheduler.owns(peer):
            return Reassignment([], 0)  # a worker with nothing to do left: nothing is lost
        if peer.pid not in workers.pids:
            # A process replaced already (a kept worker that died between iterations, whose
            # last HELLO was still queued on the socket): its successor runs; never kill it.
            # Or one retired (workers="auto"): killed if it still runs, never replaced.
            workers.kill_retired(peer.pid)
            if cause == "bye":
                return _hand_over(peer, reason, scheduler, session, confirmed_dead=True)
            session.log.warning("worker %s %s: replaced already", peer, reason)
            return _hand_over(peer, reason, scheduler, session, confirmed_dead=True)
        if cause == "reconnected":  # the same process, started over: not killed
            session.log.warning("worker %s %s (%d units outstanding)", peer, reason, held)
            # It dropped its old socket before its new HELLO, and its one thread finished any
            # slot it was writing before that: it never writes a slot of these units again.
            return _hand_over(peer, reason, scheduler, session, confirmed_dead=True)
        if peer.received.count:
            workers.delivered(peer.pid)  # it was working: its death is no crash loop
        code = workers.kill(peer.name)  # a stuck or stopped one must never write again
        if code is not None and cause in ("unreachable", "deadline"):
            reason = f"{reason}; killed" if code == -9 else f"{reason}; {describe_exit(code)}"
        # WorkerDiedError past max_restarts crash deaths (WorkerTimeoutError: hangs)
        pid = workers.replace(peer.name, hung=cause == "deadline")
        session.counters.workers_replaced += 1
        session.log.warning(
            "worker %s %s (%d units outstanding): replaced by pid %d",
            peer, reason, held, pid,
        )  # fmt: skip
        confirmed_dead = True
    else:
        confirmed_dead = cause == "bye"  # it finished what it held before saying so
    return _hand_over(peer, reason, scheduler, session, confirmed_dead)


def _hand_over(
    peer: Peer,
    reason: str,
    scheduler: Scheduler[object],
    session: PeerSession,
    confirmed_dead: bool,
) -> Reassignment:
    """Give ``peer``'s work to the live peers (WorkerDiedError where it cannot move)."""
    heirs = list(session.peers.values())
    moved = scheduler.reassign(peer, heirs, confirmed_dead)
    if moved.unmovable is not None:
        raise WorkerDiedError(f"worker {peer} left the job ({reason}): {moved.unmovable}")
    session.counters.peers_lost += 1
    if not peer.local:
        session.log.warning(
            "worker %s left the job (%s): %d units handed to %d others",
            peer, reason, moved.moved_units, len(heirs),
        )  # fmt: skip
    return moved


def on_error(peer: Peer, error: messages.Error, scheduler: Scheduler[object]) -> list[Send]:
    """What to send after a worker's ERROR: a file it cannot read (``FileReadError``) moves
    to another worker and its unit is made again; any other error, or a file no live worker
    is left to try, ends the run (raises the worker's error)."""
    if error.type == FileReadError.__name__ and error.file_number is not None:
        sends = scheduler.unreadable(peer, error.file_number, error.unit)
        if sends is not None:
            return sends
    raise worker_error(peer, error, scheduler)


def worker_error(peer: Peer, error: messages.Error, scheduler: Scheduler[object]) -> WorkerError:
    """The exception a worker's ERROR becomes, naming the worker and the unit."""
    where = f" in {scheduler.describe(error.unit)}" if error.unit is not None else ""
    return WorkerError(f"{peer}{where}", error.type, error.message, error.traceback)
