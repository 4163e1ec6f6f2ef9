"""A trainer on a shared fleet: ``fleet=`` announces it to every replica, every second.

``h5feed.dataset(..., listen="tcp://*:5555", fleet="tcp://tasks.h5feed_producer:5556")``:
while an iteration runs (while the trainer listens), an :class:`Announcer` thread sends each
replica of the fleet an ATTACH naming the trainer's ``listen`` port; each replica starts
workers of its own for this trainer, which connect to that port as any remote producer
does (:mod:`h5feed.producer.service.fleet`). So the epoch is the trainer's own, with every guarantee
of ``listen=`` (exactly once, its seed and order, hand-over when a replica leaves).

Guarantees:

1. **Every replica, not the first.** libzmq connects a name to its *first* DNS answer and
   re-resolves only on reconnect; h5feed resolves each fleet endpoint itself (every A
   record, or every AAAA record when it has no A record; one connection per address) every
   :data:`RESOLVE_EVERY_S`, so a replica
   added later is announced to within that (and joins the epoch as a producer joins), and a
   replica whose address left the answer is no longer announced to (its workers are handed
   over as any producer's that leaves). A name that does not resolve keeps the addresses it
   had (a DNS outage does not detach a trainer) and is logged once a minute. Names are
   resolved on a thread of their own, so a slow DNS server never delays an ATTACH.
2. **Refusals are said.** A replica that refuses the trainer (its ``--max-trainers`` reached,
   or its workers refused by this trainer) answers with a BYE naming why;
   :meth:`Announcer.refusal` says it once every replica announced to has refused, and the
   iteration ends with :class:`~h5feed.common.errors.NoWorkersError`
   naming it rather than waiting out ``start_timeout_s``.
3. **Bounded.** Replies are read with ``MAXMSGSIZE`` :data:`MAX_REPLY_BYTES` and decoded
   strictly; anything but ATTACHED or BYE is counted (``bad_replies``) and dropped. At most
   :data:`MAX_REPLICAS` addresses are announced to (more are logged and left out).
4. **Keys.** With ``fleet_key=`` (the fleet's public ``.key``) the trainer is a CURVE client
   of each front with its own ``curve_key``; the fleet's workers then check that this trainer
   holds that key when they connect to it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import zmq

from h5feed.common.errors import ProtocolError
from h5feed.common.protocol import messages, wire
from h5feed.common.protocol.liveness import enable_heartbeats
from h5feed.common.protocol.message_types import TRAINER_NAME
from h5feed.common.system.logs import with_ids
from h5feed.common.trust.curve import KeyPair, make_client
from h5feed.common.trust.exposure import endpoint_of
from h5feed.consumer.config.endpoints import parse_endpoint

#: How often the trainer says ATTACH to each replica.
ATTACH_EVERY_S: Final = 1.0
#: How often each fleet endpoint's name is resolved again.
RESOLVE_EVERY_S: Final = 5.0
#: The largest reply read from a front.
MAX_REPLY_BYTES: Final = wire.FLEET_MESSAGE_BYTES
#: The most replica addresses announced to at once.
MAX_REPLICAS: Final = 256
_STEP_S: Final = 0.1
_LOG_EVERY_S: Final = 60.0
_log = with_ids(logging.getLogger("h5feed.consumer"), "consumer")

#: (host, port) -> every address the host resolves to, as ZeroMQ endpoints.
Resolver = Callable[[str, int], list[str]]


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, as ``tcp://`` endpoints at ``port``, sorted, each
    once; OSError when it does not resolve. Its A records when it has any, else its AAAA
    records: a dual-stack replica answers in both families, and announced to at both it
    would start two groups of workers for one trainer."""
    answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = {str(info[4][0]) for info in answers}
    ipv4 = {a for a in addresses if ipaddress.ip_address(a.split("%", 1)[0]).version == 4}
    return sorted(endpoint_of(address, port) for address in (ipv4 or addresses))


def trainer_name() -> str:
    """This trainer's name for the fleet's figures: ``host-pid``, fitted to the ATTACH rule."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{socket.gethostname()}-{os.getpid()}")
    name = name.lstrip("-_.")[-64:] or f"trainer-{os.getpid()}"
    return name if TRAINER_NAME.fullmatch(name) else f"trainer-{os.getpid()}"


class Announcer:
    """Says ATTACH to every replica of ``fleet`` for this trainer's ``port``, on a thread of
    its own, until :meth:`close`."""

    def __init__(
        self,
        fleet: Sequence[str],
        port: int,
        keys: tuple[KeyPair, bytes] | None = None,
        name: str | None = None,
        resolver: Resolver = resolve,
        peer_timeout_s: float = 5.0,
    ) -> None:
        """``keys``: (this trainer's key pair, the fleet's public key)."""
        self._fleet = [parse_endpoint(endpoint) for endpoint in fleet]
        self._attach = messages.encode(messages.Attach(port, name or trainer_name()))
        self._keys = keys
        self._resolver = resolver
        self._peer_timeout_s = peer_timeout_s
        self._context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._sockets: dict[str, zmq.Socket[bytes]] = {}  # replica endpoint -> its socket
        self._lock = threading.Lock()  # the answers: this thread writes, stats() reads
        self._answers: dict[str, messages.Attached | str] = {}  # endpoint -> served / refused
        self._resolved: dict[tuple[str, int], list[str]] = {}  # the DNS thread's only
        self._found: list[str] | None = None  # the latest answer, not yet connected to
        self._known: set[str] = set()  # the replicas announced to (refusal() reads it)
        self._logged: dict[str, float] = {}
        self.bad_replies = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="h5feed-fleet", daemon=True)
        self._thread.start()

    # -- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        next_attach = 0.0
        resolving = threading.Thread(target=self._resolve_forever, name="h5feed-fleet-dns")
        resolving.daemon = True
        resolving.start()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                with self._lock:
                    found, self._found = self._found, None
                if found is not None:
                    self._connect(found)
                if now >= next_attach:
                    for socket_ in self._sockets.values():
                        # Not connected yet (zmq.Again): the next round says it.
                        with contextlib.suppress(zmq.Again):
                            socket_.send_multipart(self._attach, zmq.NOBLOCK)
                    next_attach = now + ATTACH_EVERY_S
                self._read(_STEP_S)
        except Exception:  # said, not swallowed: the fleet stops serving this trainer
            _log.exception("attaching to the fleet failed: no more ATTACH from this trainer")
        finally:
            for socket_ in self._sockets.values():
                socket_.close(linger=0)
            self._context.term()

    def _resolve_forever(self) -> None:
        """Resolve the fleet every :data:`RESOLVE_EVERY_S` on a thread of its own: a DNS
        server that takes seconds to answer never delays an ATTACH (the fleet would take
        the silence for a trainer that left)."""
        while not self._stop.is_set():
            found = self._replicas()
            with self._lock:
                self._found = found
            self._stop.wait(RESOLVE_EVERY_S)

    def _replicas(self) -> list[str]:
        """Every replica endpoint of every fleet endpoint now (guarantee 1)."""
        found: set[str] = set()
        for host, port in self._fleet:
            try:
                self._resolved[(host, port)] = self._resolver(host, port)
            except (OSError, ValueError) as exc:  # keep what it had (ValueError: a bad name)
                self._log_once(f"{host}:{port}", "fleet host %s does not resolve: %s", host, exc)
            found.update(self._resolved.get((host, port), []))
        if len(found) > MAX_REPLICAS:
            self._log_once("max", "the fleet has %d addresses: announcing to the first %d",
                           len(found), MAX_REPLICAS)  # fmt: skip
        return sorted(found)[:MAX_REPLICAS]

    def _connect(self, replicas: list[str]) -> None:
        for gone in set(self._sockets) - set(replicas):
            self._sockets.pop(gone).close(linger=0)
            with self._lock:
                self._answers.pop(gone, None)
            _log.info("fleet replica %s left the answer: no longer attached to it", gone)
        for new in sorted(set(replicas) - set(self._sockets)):
            socket_ = self._context.socket(zmq.DEALER)
            socket_.setsockopt(zmq.LINGER, 0)
            socket_.setsockopt(zmq.IMMEDIATE, 1)  # nothing queued for a replica not there
            socket_.setsockopt(zmq.SNDHWM, 2)
            socket_.setsockopt(zmq.MAXMSGSIZE, MAX_REPLY_BYTES)
            enable_heartbeats(socket_, self._peer_timeout_s)
            if self._keys is not None:
                make_client(socket_, *self._keys)
            socket_.connect(new)
            self._sockets[new] = socket_
        with self._lock:
            self._known = set(self._sockets)

    def _read(self, timeout_s: float) -> None:
        poller = zmq.Poller()
        for socket_ in self._sockets.values():
            poller.register(socket_, zmq.POLLIN)
        if not self._sockets:
            self._stop.wait(timeout_s)
            return
        ready = dict(poller.poll(int(timeout_s * 1000)))
        for endpoint, socket_ in list(self._sockets.items()):
            while ready.get(socket_):
                try:
                    frames = socket_.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._answer(endpoint, frames)

    def _answer(self, endpoint: str, frames: list[bytes]) -> None:
        try:
            reply = messages.decode(frames, wire.FLEET_LIMITS)
        except ProtocolError as exc:
            self.bad_replies += 1
            self._log_once(endpoint, "a bad reply from fleet replica %s: %s", endpoint, exc)
            return
        match reply:
            case messages.Attached():
                with self._lock:
                    if not isinstance(self._answers.get(endpoint), messages.Attached):
                        _log.info(
                            "attached to fleet replica %s (%s): %d workers, %d trainers",
                            endpoint, reply.replica, reply.workers, reply.trainers,
                        )  # fmt: skip
                    self._answers[endpoint] = reply
            case messages.Bye(reason=reason):
                with self._lock:
                    if self._answers.get(endpoint) != reason:
                        _log.warning("fleet replica %s refused this trainer: %s", endpoint, reason)
                    self._answers[endpoint] = reason
            case _:
                self.bad_replies += 1
                self._log_once(endpoint, "fleet replica %s sent a %s", endpoint, reply.KIND)

    def _log_once(self, key: str, text: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._logged.get(key, -_LOG_EVERY_S) >= _LOG_EVERY_S:
            self._logged[key] = now
            _log.warning(text, *args)

    # -- what the trainer reads ----------------------------------------------------------------

    def refusal(self) -> str | None:
        """Why the fleet refuses this trainer, once every replica it knows answered with a
        refusal (guarantee 2); else None (one serves it, or one has not answered yet: a
        replica that never answers leaves the wait to ``start_timeout_s``)."""
        with self._lock:
            answers, known = dict(self._answers), set(self._known)
        if not known or known - set(answers):
            return None
        if any(isinstance(a, messages.Attached) for a in answers.values()):
            return None
        return "; ".join(f"fleet replica {e}: {a}" for e, a in sorted(answers.items()))

    def status(self) -> dict[str, Any]:
        """What ``stats()["fleet"]["shared"]`` says: the replicas that serve this trainer,
        how many trainers each serves (so an input-bound verdict is read as a share of a
        shared fleet, not as the fleet's whole capacity), and the refusals."""
        with self._lock:
            answers = dict(self._answers)
        serving = {e: a for e, a in answers.items() if isinstance(a, messages.Attached)}
        trainers = [a.trainers for a in serving.values()]
        return {
            "endpoints": [f"tcp://{h if ':' not in h else f'[{h}]'}:{p}" for h, p in self._fleet],
            "replicas": len(self._sockets),
            "serving": len(serving),
            "workers": sum(a.workers for a in serving.values()),
            "trainers_max": max(trainers, default=0),
            # With equal groups per trainer, this trainer's share of a replica's CPUs.
            "share": round(sum(1 / n for n in trainers) / len(trainers), 3) if trainers else None,
            "refused": {e: a for e, a in answers.items() if isinstance(a, str)},
            "bad_replies": self.bad_replies,
        }

    def close(self) -> None:
        """Stop announcing (the replicas stop this trainer's workers after their
        ``--attach-timeout-s``); idempotent."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)
