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
4. Only files that waited for the dead worker are blamed: the HDF5 scheduler marks a joiner's
   share (a file its live owner goes on making) answered when the joiner is lost, so a peer
   that dies, or re-says hello under new nonces, while taking one over never refuses it.
5. Not thread-safe: the loop's thread owns it.
"""

from __future__ import annotations

import collections
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
        self.deaths: collections.Counter[int] = collections.Counter()

    @property
    def suspects(self) -> set[int]:
        """Files a worker died indexing at least once (sent alone from then on)."""
        return set(self.deaths)

    def sent(self, sends: Sequence[Send]) -> None:
        """Record the JOBs among ``sends`` that ask for an INDEX, in the order sent."""
        for send in sends:
            message = send.message
            if isinstance(message, messages.Job) and message.send_index and message.files:
                pending = self._pending.setdefault(send.peer.identity, [])
                pending.append({ref.number for ref in message.files})

    def answered(self, peer: Peer, files: Iterable[int]) -> None:
        """``peer`` answered ``files`` (INDEX, or an ERROR naming them)."""
        pending = self._pending.get(peer.identity)
        if not pending:
            return
        done = set(files)
        for job in pending:
            job -= done
        while pending and not pending[0]:
            pending.pop(0)

    def left(self, peer: Peer, cause: str | None) -> list[int]:
        """``peer`` is gone (``cause``: a ``LossCause``); when it died, count one death for
        each file of the JOB it was working on. Returns the files at the limit."""
        pending = self._pending.pop(peer.identity, [])
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
