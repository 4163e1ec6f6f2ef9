"""The rules for a peer that is gone, and for a worker's ERROR: one place to change them.

:func:`recover` decides what a ``PeerLost`` event means:

1. A peer that held units past ``unit_timeout_s`` (``deadline``) ends the iteration with
   :class:`WorkerTimeoutError`, naming the oldest unit it holds.
2. A local worker (one of the iteration's own processes) that exits, becomes unreachable or
   says BYE while it holds work ends the iteration with :class:`WorkerDiedError`, named by its
   exit code when it has one (its socket closes a moment before its process is reaped, so an
   unreachable local worker is given a second to report its exit). A local worker that leaves
   with nothing to do is no loss.
3. A remote producer that says BYE or becomes unreachable has its work handed to the live
   peers by the scheduler (one rule per input kind: see ``Scheduler.reassign``); what cannot
   move ends the iteration with :class:`WorkerDiedError` saying why.
"""

from __future__ import annotations

from h5feed.common import messages
from h5feed.common.errors import WorkerDiedError, WorkerError, WorkerTimeoutError
from h5feed.consumer.events import PeerLost
from h5feed.consumer.scheduler import Reassignment, Scheduler
from h5feed.consumer.session import PeerSession
from h5feed.consumer.work import Peer

_EXIT_REPORT_WAIT_S = 1.0


def recover(
    lost: PeerLost, scheduler: Scheduler, session: PeerSession, unit_timeout_s: float
) -> Reassignment:
    """What to send after ``lost`` (see the module docstring); raises when it is fatal."""
    peer, cause, reason = lost.peer, lost.cause, lost.reason
    held = len(peer.outstanding)
    if cause == "deadline":
        first = scheduler.describe(min(peer.outstanding))
        raise WorkerTimeoutError(
            f"worker {peer} {reason} (unit_timeout_s={unit_timeout_s:g}); it holds {first} "
            f"and {held - 1} more"
        )
    if peer.local:
        if cause == "bye" and not held and not scheduler.owns(peer):
            return Reassignment([], 0)  # a worker with nothing to do left: nothing is lost
        if cause == "unreachable":
            reason = session.wait_for_exit(peer.name, _EXIT_REPORT_WAIT_S) or reason
        if reason.startswith(("exited", "was killed")):
            raise WorkerDiedError(
                f"worker {peer.name} (pid {peer.pid}) {reason} while the iteration needed it "
                f"({held} units outstanding); its output, if any, is on stderr above"
            )
        raise WorkerDiedError(f"worker {peer} left the job: {reason}")
    heirs = list(session.peers.values())
    moved = scheduler.reassign(peer, heirs)
    if moved.unmovable is not None:
        raise WorkerDiedError(f"worker {peer} left the job ({reason}): {moved.unmovable}")
    session.log.warning(
        "worker %s left the job (%s): %d units handed to %d others",
        peer, reason, moved.moved_units, len(heirs),
    )  # fmt: skip
    return moved


def worker_error(peer: Peer, error: messages.Error, scheduler: Scheduler) -> WorkerError:
    """The exception a worker's ERROR becomes, naming the worker and the unit."""
    where = f" in {scheduler.describe(error.unit)}" if error.unit is not None else ""
    return WorkerError(f"{peer}{where}", error.type, error.message, error.traceback)
