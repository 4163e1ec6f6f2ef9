"""The consumer's bookkeeping of workers and units: who is connected, who holds what.

A :class:`Ledger` is the one record of the units sent and not yet answered, for every kind of
input: it writes each :class:`Peer`'s ``outstanding`` units and ``last_progress`` (which the
session's deadline reads), answers whether a part is expected, and gives back a lost peer's
units for re-assignment. Used by the loop thread only.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from typing import Generic, TypeVar

from h5feed.common.protocol.liveness import PROBE_EVERY_S
from h5feed.common.protocol.versions import PROTOCOL_VERSION
from h5feed.consumer.core.counters import RateMeter, StorageTotals

W = TypeVar("W")

#: A peer that holds work (units, or an INDEX it owes) and has sent nothing for this long is
#: in doubt (:meth:`Peer.in_doubt`): two probe periods, well under the heartbeat timeout
#: that declares a silent one lost.
SILENT_WITH_WORK_S = 2 * PROBE_EVERY_S


@dataclasses.dataclass(eq=False)
class Peer:
    """A connected worker: one process under one identity, from its HELLO to its loss. What
    belongs to it alone is here and goes with it; what its identity keeps after it is lost
    (its nonce, key, refusal, strikes) is the session's record of the identity
    (:mod:`h5feed.consumer.core.identities`)."""

    identity: bytes
    name: str
    pid: int
    host: str
    outstanding: dict[int, float] = dataclasses.field(default_factory=dict)  # unit -> sent at
    last_progress: float = 0.0
    received: RateMeter = dataclasses.field(default_factory=RateMeter)  # its DATA parts
    #: what its parts said their reads of object storage cost (DATA ``storage``)
    storage: StorageTotals = dataclasses.field(default_factory=StorageTotals)
    unit_latency_s: float | None = None  # moving average, from UNIT sent to its DATA received
    local: bool = False  # one of the iteration's own worker processes
    nonce: str = ""  # its process's HELLO nonce (a new one under this identity: a new process)
    key: str | None = None  # its CURVE public key (Z85), when the consumer uses CURVE
    last_heard: float = 0.0  # when its last message arrived (liveness probes go to the quiet)
    probed: float = 0.0  # when it was last sent a PING or any message (each proves the link)
    lost_cause: str | None = None  # why it was lost (a LossCause), once it is
    #: When another peer of its host was lost as unreachable (its host may be down): in
    #: doubt until it is heard from again (:meth:`in_doubt`).
    host_doubted: float | None = None
    #: Since when it owes a handshake answer (an INDEX of files it was asked to take) with
    #: none sent: the session's deadline runs from here as from ``last_progress`` for units.
    owes_since: float | None = None
    #: The protocol version chosen with it (h5feed.common.protocol.versions): everything
    #: sent to it is said in this version.
    protocol: int = PROTOCOL_VERSION
    package: str = ""  # its h5feed package version, as its HELLO said

    def __str__(self) -> str:
        return f"{self.name} (pid {self.pid} on {self.host})"

    def host_in_doubt_since(self) -> float | None:
        """When another peer of its host was lost as unreachable, if it has not been heard
        from since (else None: no such loss, or the doubt was cleared)."""
        doubted = self.host_doubted
        return doubted if doubted is not None and self.last_heard < doubted else None

    def in_doubt(self, now: float) -> bool:
        """Whether it may be about to be lost: not heard from since another peer of its host
        was lost as unreachable, or holding work (units, an INDEX it owes) and silent for
        :data:`SILENT_WITH_WORK_S`. A stopped or cut-off host looks so until its heartbeats
        time out; so does a worker in one long unit (passed over as an heir, it loses
        nothing but a turn)."""
        if self.host_in_doubt_since() is not None:
            return True
        holds = bool(self.outstanding) or self.owes_since is not None
        return holds and now - self.last_heard > SILENT_WITH_WORK_S


def doubt_host(peers: Iterable[Peer], host: str, now: float) -> None:
    """A remote peer of ``host`` stopped answering heartbeats: the host may be down or cut
    off, so its other remote ``peers`` are in doubt until heard from again
    (:meth:`Peer.in_doubt`): work handed over goes to others first."""
    for peer in peers:
        if peer.host == host and not peer.local:
            peer.host_doubted = now


def heard_first(peers: list[Peer], now: float) -> list[Peer]:
    """``peers`` less those in doubt (:meth:`Peer.in_doubt`), or all of them if that leaves
    none.

    Work handed over from a lost peer must not go to one that is about to be lost too: when
    a host with many workers stops, their connections time out one by one over a second or
    two, and a file or unit moved to the next of them dies with it, until three such deaths
    end the run as a "poison" unit (``max_unit_attempts``) or file that is nothing of the
    kind."""
    heard = [peer for peer in peers if not peer.in_doubt(now)]
    return heard or peers


@dataclasses.dataclass(slots=True)
class Unit(Generic[W]):
    """Work of one batch (``seq``) handed to one peer; ``work`` is the scheduler's record of
    what it asked for (rows and their positions, items, a pull)."""

    id: int
    seq: int
    peer: Peer
    work: W


class Ledger(Generic[W]):
    """The units in flight (see the module docstring).

    Guarantees: a unit id is never reused within an iteration; a unit is completed at most
    once, by the peer it was issued to (a part from anyone else, or a second one, is
    unexpected: :meth:`complete` returns None and changes nothing).
    """

    def __init__(self) -> None:
        self._units: dict[int, Unit[W]] = {}
        self._next_id = 0

    def issue(self, peer: Peer, seq: int, work: W) -> Unit[W]:
        """A new unit of batch ``seq`` held by ``peer`` from now."""
        unit = Unit(self._next_id, seq, peer, work)
        self._next_id += 1
        self._units[unit.id] = unit
        now = time.monotonic()
        if not peer.outstanding:  # the deadline runs from the first unit it holds
            peer.last_progress = now
        peer.outstanding[unit.id] = now
        return unit

    def complete(self, peer: Peer, unit_id: int) -> Unit[W] | None:
        """The unit ``peer`` answered, now done; None if no such unit is expected from it."""
        unit = self._units.get(unit_id)
        if unit is None or unit.peer is not peer:
            return None
        del self._units[unit_id]
        now = time.monotonic()
        sent = peer.outstanding.pop(unit_id, now)
        previous, latency = peer.unit_latency_s, now - sent
        peer.unit_latency_s = latency if previous is None else 0.8 * previous + 0.2 * latency
        peer.last_progress = now
        return unit

    def take_back(self, peer: Peer) -> list[Unit[W]]:
        """Every unit ``peer`` holds, oldest first, no longer held by it (to re-assign)."""
        units = [self._units.pop(unit_id) for unit_id in sorted(peer.outstanding)]
        peer.outstanding.clear()
        return units

    def take_one(self, peer: Peer, unit_id: int) -> Unit[W] | None:
        """Unit ``unit_id``, no longer held by ``peer`` (to send again), or None if ``peer``
        does not hold it (it was completed, or taken back already)."""
        unit = self._units.get(unit_id)
        if unit is None or unit.peer is not peer:
            return None
        del self._units[unit_id]
        peer.outstanding.pop(unit_id, None)
        return unit

    def get(self, unit_id: int) -> Unit[W] | None:
        return self._units.get(unit_id)

    def __len__(self) -> int:
        return len(self._units)
