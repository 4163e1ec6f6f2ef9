"""Files whose indexing kills the worker: found, and reported as such, never as a timeout.

A crafted or damaged file can kill the process that opens it (a crash inside HDF5, the
kernel's OOM killer): the worker is replaced (or restarted by its producer service) and the
file goes to another worker, which dies the same way. Without a count this loops until the
handshake's timeout, which names no cause. :class:`IndexAttempts` is the one owner of "which
files was this worker indexing": the JOBs sent to each worker that still await its INDEX, in
the order sent (a worker answers its JOBs in that order, each one's files in one or more
INDEX_BATCHes).

Guarantees:

1. When a worker's process dies (:data:`DEATHS`: a local worker exits or is killed, a
   producer's worker is replaced by a new process or its connection is gone), the files of
   the first JOB it had not fully answered — the one it was working on — count one death
   each (:meth:`left`); its later JOBs, not started, count nothing.
2. A file with a death is suspect: it is sent alone in a JOB of its own (:attr:`suspects`,
   see ``merge_jobs``), so the next death pins the file down and innocent files that shared
   its first JOB are answered on their own and never count again.
3. A file at ``limit`` deaths (the restart rule's attempts: ``max_unit_attempts``, as for a
   poison unit, but at least 2, so a file that merely shared a JOB with the culprit once is
   never reported) is returned by
   :meth:`left`; :meth:`check_left` raises it as a ``FileReadError`` naming the file, the
   host and the last death, which ends the iteration.
4. A suspect's JOB is in a worker's hands alone (:meth:`gate`): it goes only once nothing
   else the worker was asked awaits its INDEX, and no JOB that asks for one follows it until
   it is answered (held back, they go with the next :meth:`gate` that finds them free to, or
   :meth:`release`). A worker killed by a file loses what it had queued but not yet sent
   (libzmq's I/O thread dies with it), so the INDEX of the JOB before would be lost with it,
   and that JOB, still unanswered here, blamed for the death (a good file refused after its
   neighbour's crashes). One at a time, the JOB in hand is the only one unanswered.
5. Only files that waited for the dead worker are blamed: the HDF5 scheduler marks a joiner's
   share (a file its live owner goes on making) answered when the joiner is lost, so a peer
   that dies, or re-says hello under new nonces, while taking one over never refuses it.
6. Not thread-safe: the loop's thread owns it.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Final

from h5feed.common.errors import FileReadError
from h5feed.common.protocol import messages
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.scheduler import Send

#: Causes of a loss that show the worker's process died: a local worker that exited, a
#: producer's worker replaced by a new process under its name (its service restarts it), or
#: whose connection is gone (``unreachable``: libzmq answers heartbeats for any live process,
#: so a dead one is seen so when its restart is slower than ``peer_timeout_s``). Not a BYE (it
#: left on purpose), a refusal (its traffic was at fault), nor a silence (``deadline``: a
#: stuck read, or a peer that never answers): a peer that merely goes quiet blames no file.
DEATHS: Final = frozenset({"exited", "restarted", "unreachable"})


class IndexAttempts:
    """See the module docstring."""

    def __init__(self, limit: int) -> None:
        self.limit = max(2, limit)
        self._pending: dict[bytes, list[set[int]]] = {}  # identity -> unanswered JOBs' files
        self._held: dict[bytes, list[Send]] = {}  # identity -> JOBs held back, in order
        self.deaths: collections.Counter[int] = collections.Counter()

    @property
    def suspects(self) -> set[int]:
        """Files a worker died indexing at least once (sent alone from then on)."""
        return set(self.deaths)

    def gate(self, sends: Sequence[Send]) -> list[Send]:
        """``sends`` to go now, recorded as sent (:meth:`sent`), after the JOBs held back
        before that may go now (an answer came since): all but the JOBs held back so that a
        suspect's JOB is in its worker's hands alone (guarantee 4)."""
        going = [send for identity in list(self._held) for send in self._release(identity)]
        for send in sends:
            if not _asks_index(send):
                going.append(send)
            elif send.peer.identity in self._held or not self._may_go(send):
                self._held.setdefault(send.peer.identity, []).append(send)
            else:
                self.sent([send])
                going.append(send)
        return going

    def release(self, peer: Peer) -> list[Send]:
        """The JOBs held back for ``peer`` that may go now (after an answer), recorded as sent."""
        return self._release(peer.identity)

    def _release(self, identity: bytes) -> list[Send]:
        held = self._held.get(identity)
        going: list[Send] = []
        while held and self._may_go(held[0]):
            going.append(held.pop(0))
            self.sent(going[-1:])
        if not held:
            self._held.pop(identity, None)
        return going

    def _may_go(self, send: Send) -> bool:
        """Whether ``send`` (a JOB asking for an INDEX) may go: its worker has nothing
        unanswered, or neither it nor what is unanswered holds a suspect."""
        pending = self._pending.get(send.peer.identity)
        if not pending:
            return True
        in_hand = any(f in job for f in self.deaths for job in pending)  # deaths: few, or none
        return not in_hand and not self._is_suspect(send)

    def _is_suspect(self, send: Send) -> bool:
        assert isinstance(send.message, messages.Job)
        return any(ref.number in self.deaths for ref in send.message.files)

    def sent(self, sends: Sequence[Send]) -> None:
        """Record the JOBs among ``sends`` that ask for an INDEX, in the order sent."""
        for send in sends:
            if _asks_index(send):
                assert isinstance(send.message, messages.Job)
                pending = self._pending.setdefault(send.peer.identity, [])
                pending.append({ref.number for ref in send.message.files})

    def answered(self, peer: Peer, files: Iterable[int]) -> None:
        """``peer`` answered ``files`` (INDEX, or an ERROR naming them)."""
        done = set(files)
        held = self._held.get(peer.identity)
        if held:  # a file handed on before its JOB went: the JOB goes without it
            kept = [k for k in (_without(send, done) for send in held) if k is not None]
            if kept:
                self._held[peer.identity] = kept
            else:
                del self._held[peer.identity]
        pending = self._pending.get(peer.identity)
        if not pending:
            return
        for job in pending:
            job -= done
        while pending and not pending[0]:
            pending.pop(0)

    def left(self, peer: Peer, cause: str | None) -> list[int]:
        """``peer`` is gone (``cause``: a ``LossCause``); when it died, count one death for
        each file of the JOB it was working on. Returns the files at the limit."""
        pending = self._pending.pop(peer.identity, [])
        self._held.pop(peer.identity, None)  # its files move with the rest of its own
        if cause not in DEATHS or not pending:
            return []
        blamed = sorted(pending[0])
        for file_index in blamed:
            self.deaths[file_index] += 1
        return [f for f in blamed if self.deaths[f] >= self.limit]

    def check_left(self, peer: Peer, paths: Sequence[str]) -> None:
        """:meth:`left` for ``peer``, gone for its ``lost_cause``; raises FileReadError for the
        first file at the limit (``paths``: the files' paths, by file index)."""
        for file_index in self.left(peer, peer.lost_cause):
            raise FileReadError(
                f"every worker that indexed it died ({self.deaths[file_index]} times; the last: "
                f"worker {peer}, {peer.lost_cause}): a file that crashes HDF5 or the reader "
                "(crafted or damaged) is refused",
                file=paths[file_index],
                host=peer.host,
                number=file_index,
            )


def _asks_index(send: Send) -> bool:
    message = send.message
    return isinstance(message, messages.Job) and message.send_index and bool(message.files)


def _without(send: Send, files: set[int]) -> Send | None:
    """``send`` (a JOB) less ``files``; None when nothing is left of it."""
    assert isinstance(send.message, messages.Job)
    refs = tuple(ref for ref in send.message.files if ref.number not in files)
    if len(refs) == len(send.message.files):
        return send
    return Send(send.peer, dataclasses.replace(send.message, files=refs)) if refs else None
