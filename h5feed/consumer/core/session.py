"""The peer session: who the consumer's workers are, and what happens to them, as events.

One :class:`PeerSession` per iteration, used by the loop thread only. It owns no socket: it is
given a :class:`Transport` (the ROUTER, or a fake in tests) and the local worker processes (or
a fake), so every rule here is testable without sockets or processes.

Guarantees:

1. HELLO from a new identity makes a :class:`Peer` and a ``PeerJoined`` event, before the
   work is shared out and during the iteration alike (elastic join). Under a known identity:
   the same nonce is the same process speaking again (a persistent producer says hello every
   second): ignored while it is a peer; after it was lost, it is refused and counted
   (``refused_reconnects``: a process whose work went to others cannot come back as if
   nothing happened; it is sent BYE, and a persistent producer then says hello with a new
   nonce). A new nonce is a new process (a restarted worker): accepted — the old peer, if
   still listed, is lost with cause ``restarted``; a HELLO of a listed process (name, pid,
   host and CURVE key) with a new nonce, under its identity or a new one (a worker that
   started over on a new socket as its connection broke, which lost what was on the way),
   loses that peer as ``reconnected``: its units go to others; no death, and a local one is
   not killed — but with CURVE only from the same public key as before; from another key
   it is refused and counted, so nobody who reaches the port can take over an identity. A
   HELLO from a local process replaced already (``retired``: a kept worker that died
   between iterations, its hello still queued) is ignored: no work for the dead.
2. Protocol versions (:mod:`h5feed.common.protocol.versions`): a HELLO says its sender's
   range; the peer is spoken to in the highest version both sides speak (``Peer.protocol``),
   and everything sent to it is encoded in that version. A peer with no version in common (or
   whose HELLO is in a version this side does not decode), or that cuts clips of another
   semantics (:data:`~h5feed.common.config.CLIP_SEMANTICS`), is refused (BYE ``refused:
   ...`` naming both sides' ranges or semantics, which tells it not to retry), named in
   :attr:`refused` once, and never becomes a peer. A message its version cannot carry (the
   job needs a feature of a later version: ``FeatureVersionError``) is never sent: the peer
   is refused for the job, naming the field, and lost with cause ``refused``.
3. A message that does not decode is dropped and counted (``malformed_messages``); so is one
   from an identity that never said hello. Such drops and the refusals are logged at most
   once per 10 s for all identities together (``h5feed/common/trust/refusal_log.py``: identities
   cost a sender nothing), with the counts since the last line. An identity whose
   drops pass ``_MALFORMED_LIMIT`` (100) is refused (BYE ``refused: ...``; a peer is lost
   with cause ``refused``) and from then on its messages are not even decoded: they are
   dropped and counted in ``malformed_messages``. A DATA part from a peer that left, or of
   another job (an earlier consumer's), is dropped and counted (``dropped_parts``). A part
   from a peer for a unit it does not hold (forged, or a duplicate), dropped and counted
   in ``dropped_parts`` by the scheduler, counts towards the same limit and log rate
   (:meth:`PeerSession.unexpected_part`).
4. BYE, a failed send, a local worker's exit and a missed deadline (a peer holding units that
   returned none for ``unit_timeout_s``, or one that owes an INDEX it was asked for and sent
   none for ``unit_timeout_s``: ``Peer.owes_since``) each become one ``PeerLost`` event, at
   most one per peer: the peer is removed at once, so nothing is sent to it again (nor to a
   new process under its identity: :meth:`send` and :meth:`lose` act on the very peer listed).
   So every piece of work a peer is given has a deadline, whatever else it holds. A local
   worker's exit is matched by name and pid, never by a remote peer's pid.
5. :meth:`send` never raises for a peer that is gone and never calls back into the loop: it
   queues ``PeerLost`` and returns False.
6. Liveness: every socket runs ZeroMQ heartbeats (see :mod:`h5feed.common.protocol.liveness`), which
   close a connection whose peer stops answering them; the session probes every peer it has
   not heard from for ``PROBE_EVERY_S`` with a PING, whose send fails (``ROUTER_MANDATORY``)
   once the connection is gone: the peer is lost (``unreachable``) within ``peer_timeout_s``.
   Any message sent to it counts as such a probe (its send would have failed the same way).
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Sequence
from typing import Protocol

import zmq

from h5feed.common.config import CLIP_SEMANTICS
from h5feed.common.errors import FeatureVersionError, ProtocolError, VersionMismatchError
from h5feed.common.protocol import messages
from h5feed.common.protocol.handshake import hello_says, worker_name
from h5feed.common.protocol.liveness import PROBE_EVERY_S
from h5feed.common.protocol.versions import SPOKEN
from h5feed.common.system.logs import consumer_log
from h5feed.common.trust.refusal_log import RefusalLog
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.events import Arrived, Event, LossCause, PeerJoined, PeerLost
from h5feed.consumer.core.identities import Identities, Identity
from h5feed.consumer.core.ledger import Peer, doubt_host
from h5feed.consumer.core.router import user_id

#: Malformed messages one identity may send before it is refused and ignored: enough that a
#: peer's one-off bug is survived, few enough that a flood costs at most this many decodes.
_MALFORMED_LIMIT = 100
#: Identities whose drops are tracked; beyond it the tracking starts over (bounded memory).
_TRACKED_IDENTITIES = 4096


class Transport(Protocol):
    """Sends one message to one peer; raises ``zmq.ZMQError`` when it cannot be delivered."""

    def send(
        self, identity: bytes, message: messages.Message, flags: int = 0, version: int = 0
    ) -> None: ...


class LocalProcesses(Protocol):
    """The iteration's own worker processes (see :class:`~h5feed.consumer.processes.local_workers.
    LocalWorkers`)."""

    names: list[str]
    retired: set[int]  # pids of processes replaced already

    def exited(self) -> list[tuple[str, int, int]]: ...


class PeerSession:
    """The peers of one iteration of job ``job_id`` (see the module docstring)."""

    def __init__(
        self,
        job_id: str,
        transport: Transport,
        local: LocalProcesses | None,
        unit_timeout_s: float,
        counters: Counters,
        curve: bool = False,
    ) -> None:
        """``curve``: the transport authenticates peers by CURVE key (HELLO frames carry the
        key as their ``User-Id``), so a new process under a known identity must show the same
        key."""
        self.job_id = job_id
        self.log = consumer_log(job_id)  # ids in every line; the loop's parts share it
        self._transport = transport
        self._local = local
        self._local_names = frozenset(local.names) if local is not None else frozenset()
        self._unit_timeout_s = unit_timeout_s
        self._curve = curve
        self.peers: dict[bytes, Peer] = {}
        #: The listed peers by process (name, pid, host): one that says hello again with a
        #: new nonce, on a new socket (so under a new routing id), is the same process.
        self._processes: dict[tuple[str, int, str], Peer] = {}
        self.events: collections.deque[Event] = collections.deque()
        self.refused: list[str] = []  # "identity: why", for error messages
        self.counters = counters  # malformed_messages, dropped_parts (shared with the loop's)
        # Per identity two places, no third: its live Peer (what it holds, when heard from and
        # probed: gone with it) and one record of its past (core/identities.py), so a join or
        # a loss touches one thing and no collection of its own can outlive a peer.
        self._known = Identities(_TRACKED_IDENTITIES)
        # Local name -> its pids whose end was reported (lost as a peer, or exited), by name
        # as exits are: a remote peer's pid is another host's, no local process's.
        self._ended: dict[str, set[int]] = {}
        # One line per 10 s for every identity together: identities cost a sender nothing.
        self._refusals = RefusalLog(self.log, "worker messages")

    # -- what arrives ----------------------------------------------------------------------

    def receive(self, identity: bytes, frames: Sequence[object]) -> None:
        """Decode one message from ``identity`` and queue what it means."""
        known = self._known.get(identity)
        if known is not None and known.banned:
            self.counters.malformed_messages += 1
            return
        try:
            message, version = messages.decode_said(frames)
        except VersionMismatchError as exc:
            self._refuse(identity, str(exc))
            return
        except ProtocolError as exc:
            self.drop(identity, f"malformed message: {exc}")
            return
        peer = self.peers.get(identity)
        match message:
            case messages.Hello():
                key = user_id(frames) if self._curve else None
                self._on_hello(identity, message, version, key)
            case _ if peer is None and known is not None and known.gone:
                if isinstance(message, messages.Data):  # its units went to others
                    self.counters.dropped_parts += 1
            case _ if (
                peer is None
                and worker_name(identity) in self._local_names
                and getattr(message, "job", self.job_id) != self.job_id
            ):  # a kept local worker finishing the last iteration's units before its hello
                self.counters.dropped_parts += 1
            case _ if peer is None:
                self.drop(
                    identity, f"{message.KIND} message from an identity that never said hello"
                )
            case messages.Bye(reason=reason) if peer is not None:
                self.lose(peer, "bye", reason)
            case _ if peer is not None and getattr(message, "job", self.job_id) != self.job_id:
                self.counters.dropped_parts += 1  # an earlier job of a restarted consumer
                self._strike(identity, f"a {message.KIND} of another job")  # or a forgery
            case _ if peer is not None:
                self.events.append(Arrived(peer, message))
        if peer is not None:
            peer.last_heard = time.monotonic()

    def _on_hello(
        self, identity: bytes, hello: messages.Hello, version: int, key: str | None
    ) -> None:
        """See rules 1 and 2 of the module docstring."""
        known = self._known.get(identity)
        if known is not None and known.refused:  # banned ones are refused too
            return
        try:
            says = hello_says(hello, version)
        except ProtocolError as exc:
            self.drop(identity, f"malformed hello: {exc}")
            return
        protocol = SPOKEN.common(says.versions)
        if protocol is None:
            why = f"no protocol version in common: it speaks {says.versions}, this side {SPOKEN}"
            self._refuse(identity, why, version)
            return
        if says.clip_semantics != CLIP_SEMANTICS:
            why = (
                f"{hello.worker} cuts clips of semantics {says.clip_semantics}; this trainer "
                f"needs {CLIP_SEMANTICS} (the same pixels from every worker)"
            )
            self._refuse(identity, why, protocol)
            return
        if self._local is not None and hello.pid in self._local.retired:
            # A local process replaced already (a kept worker that died between iterations):
            # its last HELLO was still queued on the socket. Its successor says its own.
            self.log.debug("ignored the stale hello of %s (pid %d)", hello.worker, hello.pid)
            return
        current = self.peers.get(identity)
        if known is not None and hello.nonce == known.nonce:
            if current is None:  # lost (its work went to others) and back as the same process
                self._stale(identity, known, hello, protocol)
            return  # else a persistent producer's periodic hello
        if known is not None and known.nonce is not None and key != known.key:
            self.counters.refused_reconnects += 1
            why = f"{hello.worker} said hello with another CURVE key than before"
            self._refuse_once(identity, why, protocol)
            return
        process = (hello.worker, hello.pid, hello.host)
        same = self._processes.get(process)  # listed under this identity or its last one
        if same is not None and same.key == key:  # (a new socket has a new routing id)
            self.lose(same, "reconnected", "started over: its connection broke")
        if current is not None and self.peers.get(identity) is current:
            self.lose(current, "restarted", f"restarted: pid {hello.pid} said hello under its name")
        peer = Peer(identity, hello.worker, hello.pid, hello.host, nonce=hello.nonce, key=key)
        peer.protocol, peer.package = protocol, says.package
        peer.local = hello.worker in self._local_names
        peer.last_heard = time.monotonic()
        self.peers[identity] = self._processes[process] = peer
        known = self._known.of(identity)
        known.nonce, known.key, known.gone = hello.nonce, key, False
        self.events.append(PeerJoined(peer))

    def _stale(
        self, identity: bytes, known: Identity, hello: messages.Hello, protocol: int
    ) -> None:
        """A lost peer's process is back with its old nonce: refused (once per process), and
        told so with a BYE that is not final, so a persistent producer starts over with a new
        nonce (a local worker is replaced by the consumer instead)."""
        if hello.nonce in known.told_stale:
            return
        known.told_stale.add(hello.nonce)
        self.counters.refused_reconnects += 1
        self.log.warning(
            "refused %s (pid %d on %s): it was declared lost and its work given to others; "
            "it must say hello as a new process (a new nonce)",
            hello.worker, hello.pid, hello.host,
        )  # fmt: skip
        with contextlib.suppress(zmq.ZMQError):
            bye = messages.Bye("lost: start over")
            self._transport.send(identity, bye, zmq.NOBLOCK, protocol)

    def _refuse_once(self, identity: bytes, why: str, version: int) -> None:
        if identity in self.peers:  # the listed peer keeps its place; the newcomer is refused
            self.log.error("refused a hello under %r: %s", identity, why)
            return
        self._refuse(identity, why, version)

    def _refuse(self, identity: bytes, why: str, version: int = SPOKEN.lowest) -> None:
        known = self._known.of(identity)
        known.refused = True
        if not known.gone:
            known.gone = True
            self.refused.append(f"{identity.decode(errors='replace')}: {why}")
            self._refusals.refused("refused", f"{identity!r}: {why}")
        with contextlib.suppress(zmq.ZMQError):  # it may be gone already; nothing to tell then
            self._transport.send(identity, messages.Bye.refusing(why), zmq.NOBLOCK, version)

    def drop(self, identity: bytes, why: str) -> None:
        """Count a malformed or stray message from ``identity``, log it at a bounded rate,
        and refuse the identity once it has sent more than ``_MALFORMED_LIMIT``."""
        self.counters.malformed_messages += 1
        self._strike(identity, why)

    def unexpected_part(self, peer: Peer, unit: int) -> None:
        """``peer`` sent a part the scheduler did not expect of it (a unit it never held, or
        a duplicate; counted there in ``dropped_parts``): logged at a bounded rate, and the
        peer refused past ``_MALFORMED_LIMIT`` such parts and malformed messages together."""
        self._strike(peer.identity, f"a part of unit {unit}, which it does not hold")

    def _strike(self, identity: bytes, why: str) -> None:
        """One more bad message from ``identity``: see :meth:`drop`."""
        known = self._known.strike(identity)
        count = known.strikes
        self._refusals.refused("dropped", f"from {identity!r}: {why}")
        if count > _MALFORMED_LIMIT:
            known.banned = True
            reason = f"sent {count} malformed messages or unexpected parts (the last: {why})"
            self._refuse(identity, reason)  # named in `refused` once, told not to retry
            peer = self.peers.get(identity)
            if peer is not None:  # its units go to the others (or the iteration ends)
                self.lose(peer, "refused", reason)

    # -- what is sent ----------------------------------------------------------------------

    def send(self, peer: Peer, message: messages.Message) -> bool:
        """Send ``message`` to ``peer``; False (and ``PeerLost`` queued) when it cannot."""
        if self.peers.get(peer.identity) is not peer:
            return False  # lost already (its event is queued or handled), maybe restarted
        try:
            self._transport.send(peer.identity, message, 0, peer.protocol)
            # A send that went through proves the connection as a PING would (rule 6): no
            # probe for PROBE_EVERY_S. At full rate with a thousand workers, each heard about
            # once a second, the probes were as many sends as the units.
            peer.probed = time.monotonic()
        except zmq.ZMQError as exc:  # EHOSTUNREACH (gone) or EAGAIN (not reading at all)
            self.lose(peer, "unreachable", f"cannot send to it: {exc}")
            return False
        except FeatureVersionError as exc:  # the job needs what its version cannot say
            why = f"{peer.name} speaks protocol {peer.protocol}, too old for this job: {exc}"
            self._refuse(peer.identity, why, peer.protocol)
            self.lose(peer, "refused", why)
            return False
        return True

    def say_bye(self) -> None:
        """Tell every peer the iteration is over (best effort: never blocks)."""
        for peer in self.peers.values():
            try:
                bye = messages.Bye("iteration over")
                self._transport.send(peer.identity, bye, zmq.NOBLOCK, peer.protocol)
            except zmq.ZMQError as exc:
                self.log.debug("no bye to %s: %s", peer.name, exc)

    # -- membership and health -------------------------------------------------------------

    def lose(self, peer: Peer, cause: LossCause, reason: str) -> None:
        """``peer`` is gone: remove it and queue one ``PeerLost`` (nothing if it is not
        listed: lost already, or its identity's new process listed in its place)."""
        if self.peers.get(peer.identity) is peer:
            del self.peers[peer.identity]
            if self._processes.get((peer.name, peer.pid, peer.host)) is peer:
                del self._processes[peer.name, peer.pid, peer.host]
            peer.lost_cause = cause
            if cause == "unreachable" and not peer.local:  # its host may be down
                doubt_host(self.peers.values(), peer.host, time.monotonic())
            self._known.of(peer.identity).gone = True
            if peer.local and cause != "reconnected":  # else its process lives on as a peer
                self._ended.setdefault(peer.name, set()).add(peer.pid)
            self.events.append(PeerLost(peer, cause, reason))

    def check(self, now: float) -> None:
        """Queue ``PeerLost`` for local workers that exited and peers past their deadline;
        probe the peers not heard from lately (a failed probe queues ``PeerLost``)."""
        for name, pid, code in self.exited_locals():
            ended = self._ended.setdefault(name, set())
            if pid in ended:
                continue  # reported, or its peer was lost already (BYE, unreachable)
            ended.add(pid)
            how = describe_exit(code)
            peer = next((p for p in self.peers.values() if p.name == name), None)
            if peer is not None:
                self.lose(peer, "exited", how)
            else:  # it exited before its hello (a first start, or a replacement)
                ghost = Peer(name.encode(), name, pid, "localhost")
                ghost.local = True
                self.events.append(PeerLost(ghost, "exited", how))
        for peer in list(self.peers.values()):
            owed = peer.owes_since
            if peer.outstanding and now - peer.last_progress > self._unit_timeout_s:
                self.lose(
                    peer, "deadline", f"returned nothing for {now - peer.last_progress:.0f} s"
                )
            elif owed is not None and now - owed > self._unit_timeout_s:
                self.lose(peer, "deadline", f"sent no INDEX it was asked for in {now - owed:.0f} s")
            elif now - peer.last_heard >= PROBE_EVERY_S and now - peer.probed >= PROBE_EVERY_S:
                peer.probed = now
                self._probe(peer)

    def _probe(self, peer: Peer) -> None:
        """PING ``peer``: the send fails once ZeroMQ's heartbeats have closed its connection."""
        try:
            self._transport.send(peer.identity, messages.Ping(), zmq.NOBLOCK, peer.protocol)
        except zmq.Again:
            pass  # its queue is full: it is there, only busy
        except zmq.ZMQError as exc:
            self.lose(peer, "unreachable", f"its connection stopped answering heartbeats ({exc})")

    def exited_locals(self) -> list[tuple[str, int, int]]:
        """(name, pid, exit code) of the local workers that are no longer running."""
        return self._local.exited() if self._local is not None else []


def describe_exit(code: int) -> str:
    return f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
