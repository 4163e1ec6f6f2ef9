"""A shared fleet: ``h5feed produce --listen``, one set of replicas serving many trainers.

Each replica runs a *front*: a ROUTER socket at ``--listen`` to which trainers announce
themselves. A trainer started with ``h5feed.dataset(..., listen="tcp://*:5555",
fleet="tcp://tasks.h5feed_producer:5556")`` sends every replica an ATTACH every second
(:mod:`h5feed.consumer.processes.fleet_announcer`); the replica starts a
:class:`~h5feed.producer.service.worker_group.
WorkerGroup` of ``--workers`` processes for that trainer, each connecting to it as
``h5feed produce --connect`` would, and stops the group when the ATTACHes stop.

Why trainers announce themselves (rather than each worker serving several trainers' jobs
from per-job queues): each trainer's job runs in processes of its own, so every guarantee of
a fleet of its own holds by the same code (exactly once per epoch, its seed and order, its
code version, hand-over when a replica leaves), batches are byte-identical to a fleet of its
own, and a trainer that leaves takes all its state with it when its group stops. What this
gives up: open files and in-memory indexes are per trainer (the on-disk index cache is
shared), and a trainer must be reachable from the fleet, as with ``--connect``.

Guarantees:

1. **Where the workers connect.** To the address the ATTACH came from (ZeroMQ's
   ``Peer-Address`` of the connection), at the port the ATTACH names; never to a host the
   message names, so a trainer cannot aim a fleet at a third host.
2. **Who may attach.** With ``--key`` and ``--trainer-keys DIR`` the front is a CURVE server
   that admits only the trainers whose public keys DIR lists (refusals counted); the workers
   then check, as CURVE clients, that the trainer they reach holds the key that attached.
   Without keys the front binds beyond loopback only with ``--insecure``. An admitted
   trainer may ask for any file under ``--data-root`` and any code ``--allow-code`` allows.
3. **Limits.** At most ``--max-trainers`` groups at once, the groups of trainers that left
   still stopping included (their processes are not gone yet); another trainer gets a BYE
   refusing it, naming the limit, and the count of refusals grows. So the worker processes
   are bounded in number (``--max-trainers`` x ``--workers``) and their groups' starts in
   rate: a group holds its place at least ``--attach-timeout-s`` (a trainer is detached
   only after that long without an ATTACH, never replaced: guarantee 6), so at most
   ``--max-trainers`` groups start within any ``--attach-timeout-s``, however trainers
   come and go (a worker's own restarts follow its backoff). Messages are bounded before
   they are read (``MAXMSGSIZE``: :data:`MAX_FRONT_MESSAGE_BYTES`) and decoded strictly;
   anything but a well-formed ATTACH is counted and dropped, never answered with work.
   Connections are bounded too (:mod:`h5feed.producer.service.connection_guard`: a flood is shed,
   descriptors stay in reserve for worker starts), and a worker that cannot start is
   retried with a backoff, never an exit of the replica. Refusals are logged at most once
   per 10 s in all, with counts (``h5feed/common/trust/refusal_log.py``).
4. **Leaving.** A trainer whose ATTACHes stop for ``--attach-timeout-s`` (it ended its
   iteration, died, or lost the network) has its group stopped (SIGTERM, as the service's
   own stop); once stopped, nothing of it is left: no process, no worker figures. The
   figures ``attached``, ``worker_processes`` and ``stopping`` (``/metrics``:
   ``h5feed_fleet_*``) say so.
5. **Fair shares.** The groups of attached trainers have equal sizes, and the OS scheduler
   shares the CPUs among runnable processes: two hungry trainers get equal CPU; a trainer
   bounded by its own pace (credits) leaves its workers idle and the others take the rest.
   Each trainer's CPU and busy seconds are exported (``h5feed_fleet_trainer_*``).
6. **One trainer cannot take another's workers.** A port of an address attached under one
   CURVE key is that key's until ``--attach-timeout-s`` after its last ATTACH: an ATTACH
   for it under another key is refused (BYE naming why) and counted, and the attached
   trainer's group goes on. Without keys nothing tells two trainers apart: a front without
   keys serves only its own host (or a network trusted with ``--insecure``).
7. **The port an ATTACH names** is documented, not probed: the workers connect to the
   sender's own address (guarantee 1), so an ATTACH aims them at nothing its sender cannot
   reach itself, and what they send there is a ZMTP greeting and, with keys, a CURVE hello
   that must find the key that attached, never a byte the sender chose. The rate of group
   starts (guarantee 3) bounds the groups it can aim there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import zmq

from h5feed.common.errors import ProtocolError
from h5feed.common.protocol import messages, wire
from h5feed.common.protocol.liveness import enable_heartbeats
from h5feed.common.trust.curve import write_public_key
from h5feed.common.trust.curve_server import CurveServer
from h5feed.common.trust.exposure import endpoint_of
from h5feed.common.trust.refusal_log import RefusalLog
from h5feed.common.worker_settings import WorkerSettings
from h5feed.producer.service.command import DEFAULT_ATTACH_TIMEOUT_S, DEFAULT_MAX_TRAINERS
from h5feed.producer.service.connection_guard import ConnectionGuard, connection_limit
from h5feed.producer.service.metrics import ServiceFigures
from h5feed.producer.service.restarts import Restarts
from h5feed.producer.service.worker_group import Log, WorkerGroup

#: The largest message the front reads.
MAX_FRONT_MESSAGE_BYTES: Final = wire.FLEET_MESSAGE_BYTES
#: A connection must finish its ZMTP (and CURVE) handshake within this (as the trainer's).
_HANDSHAKE_S: Final = 5.0

#: (worker name, its stats file, the trainer's endpoint, its public key file or None)
#: -> the worker's settings.
SettingsFor = Callable[[str, str, str, str | None], WorkerSettings]


@dataclasses.dataclass(eq=False)
class Attachment:
    """One attached trainer and the workers that serve it."""

    trainer: str  # its name and address, the label of its figures
    endpoint: str  # where its workers connect
    key: bytes | None  # its CURVE public key (Z85), with keys
    group: WorkerGroup
    last_seen: float
    refused: str | None = None  # its workers were refused by it: why
    detached: bool = False  # its trainer left: its group, stopping, still holds a place


class Front:
    """The front of one replica: admits trainers and runs a group for each."""

    def __init__(
        self,
        listen: str,
        prefix: str,
        workers: int,
        settings_for: SettingsFor,
        env: dict[str, str],
        stats_dir: str,
        log: Log,
        keys: tuple[str, str] | None = None,
        max_trainers: int = DEFAULT_MAX_TRAINERS,
        attach_timeout_s: float = DEFAULT_ATTACH_TIMEOUT_S,
        max_restarts: int = 3,
        stop_wait_s: float = 20.0,
    ) -> None:
        """``keys``: (this replica's ``.key_secret`` file, the directory of the trainers'
        public ``.key`` files). ``stop_wait_s``: how long each worker of a group being
        stopped may take to finish its unit."""
        self._stop_wait_s = stop_wait_s
        self._prefix = prefix
        self._workers = workers
        self._settings_for = settings_for
        self._env = env
        self._stats_dir = stats_dir
        self._log = log
        self.max_trainers = max_trainers
        self.attach_timeout_s = attach_timeout_s
        self.restarts = Restarts(max_restarts)
        self.figures: ServiceFigures | None = None
        self.attached: dict[tuple[str, int], Attachment] = {}
        self.refused = 0
        self._refusals = RefusalLog(log, "fleet front")
        self._stopping: dict[threading.Thread, Attachment] = {}
        self._lock = threading.Lock()  # attached/stopping: the loop writes, scrapes read
        self._numbers = itertools.count()
        self._context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._curve: CurveServer | None = None
        if keys is not None:
            self._curve = CurveServer(self._context, keys[0], keys[1], role="producer")
            self._curve.secure(self._socket)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, MAX_FRONT_MESSAGE_BYTES)
        self._socket.setsockopt(zmq.HANDSHAKE_IVL, int(_HANDSHAKE_S * 1000))
        self._socket.setsockopt(zmq.SNDTIMEO, 0)  # a reply that cannot go now is dropped
        enable_heartbeats(self._socket, attach_timeout_s)
        self._guard = ConnectionGuard(self._socket, connection_limit(max_trainers))
        self._socket.bind(listen)
        self.endpoint = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)

    # -- the loop ------------------------------------------------------------------------------

    def step(self, timeout_ms: int) -> None:
        """Read what arrived within ``timeout_ms``, then tend the groups: restart what died,
        stop the groups of trainers that left."""
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self._guard.monitor, zmq.POLLIN)
        ready = dict(poller.poll(timeout_ms))
        if self._guard.monitor in ready and self._guard.tend():
            self._refusals.refused("shed", f"connections past {self._guard.limit}")
        if self._socket in ready:
            for _ in range(256):  # bounded per step; the rest waits for the next
                try:
                    frames = self._socket.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                self._receive(frames)
        now = time.monotonic()
        for key, attachment in list(self.attached.items()):
            if now - attachment.last_seen > self.attach_timeout_s:
                self._log.info(
                    "trainer %s stopped attaching (%g s): stopping its %d workers",
                    attachment.trainer, self.attach_timeout_s, len(attachment.group.names),
                )  # fmt: skip
                self._detach(key)
            elif attachment.refused is None and not attachment.group.poll():
                attachment.refused = "its workers were refused by it (another protocol version?)"
                self._stop_group(attachment)
        self._refusals.flush()

    def _receive(self, frames: list[zmq.Frame]) -> None:
        identity, body = frames[0], frames[1:]
        try:
            message = messages.decode(body, wire.FLEET_LIMITS)
            if not isinstance(message, messages.Attach):
                raise ProtocolError(f"a fleet's front takes ATTACH only, got {message.KIND}")
        except ProtocolError as exc:  # VersionMismatchError included
            self._count_refusal("a bad message", str(exc))
            return
        address = str(identity.get("Peer-Address"))
        key = self._user_id(identity)
        endpoint = endpoint_of(address, message.port)
        label = f"{message.trainer}@{endpoint.removeprefix('tcp://')}"
        now = time.monotonic()
        attachment = self.attached.get((address, message.port))
        if attachment is not None and now - attachment.last_seen > self.attach_timeout_s:
            self._detach((address, message.port))  # its trainer left; the loop had not seen
            attachment = None
        if attachment is not None and attachment.key != key:  # guarantee 6
            self._refuse(
                identity, "another key's port", label,
                f"port {message.port} of {address} is attached under another CURVE key until "
                f"{self.attach_timeout_s:g} s after that trainer's last ATTACH "
                f"(h5feed produce --attach-timeout-s): give this trainer a port of its own",
            )  # fmt: skip
            return
        if attachment is None:
            attachment = self._admit(identity, label, endpoint, key)
            if attachment is None:
                return
            with self._lock:
                self.attached[(address, message.port)] = attachment
        attachment.last_seen = now
        if attachment.refused is not None:
            self._reply(identity, messages.Bye.refusing(attachment.refused))
            return
        self._reply(
            identity,
            messages.Attached(self._prefix, len(attachment.group.names), len(self.attached)),
        )

    def _admit(
        self, identity: zmq.Frame, label: str, endpoint: str, key: bytes | None
    ) -> Attachment | None:
        """A group for a trainer not attached yet, or None (refused: guarantee 3; or no
        descriptor for its key file now: its next ATTACH tries again)."""
        held = self.groups_held
        if held >= self.max_trainers:
            self._refuse(
                identity, "the limit of trainers", label,
                f"this fleet serves at most {self.max_trainers} trainers at once (h5feed "
                f"produce --max-trainers); {len(self.attached)} are attached and "
                f"{held - len(self.attached)} that left are stopping",
            )  # fmt: skip
            return None
        try:
            attachment = self._attach(label, endpoint, key)
        except OSError as exc:  # no descriptor for its key file: the next ATTACH tries again
            self._count_refusal("a group not started", f"trainer {label}: {exc}")
            return None
        return attachment

    def _attach(self, label: str, endpoint: str, key: bytes | None) -> Attachment:
        number = next(self._numbers)
        names = [f"{self._prefix}-t{number}-{i}" for i in range(self._workers)]
        key_file = None
        if key is not None:  # the workers check that the trainer they reach holds this key
            key_file = write_public_key(os.path.join(self._stats_dir, f"t{number}.key"), key)

        def settings_of(worker: str, stats_file: str) -> WorkerSettings:
            return self._settings_for(worker, stats_file, endpoint, key_file)

        if self.figures is not None:
            self.figures.add(names)
        group = WorkerGroup(
            names, settings_of, self._env, self._stats_dir, self.restarts, self._log,
            self.figures,
        )  # fmt: skip
        self._log.info("trainer %s attached: %d workers connect to %s", label, len(names), endpoint)
        group.poll()  # start them now
        return Attachment(label, endpoint, key, group, time.monotonic())

    def _detach(self, key: tuple[str, int]) -> None:
        with self._lock:
            attachment = self.attached.pop(key)
            attachment.detached = True
        self.restarts.forget(attachment.group.names)  # here: the loop's thread reads it
        if attachment.refused is None:
            self._stop_group(attachment)

    def _stop_group(self, attachment: Attachment) -> None:
        """Stop a group on a thread of its own (a worker may take ``stop_wait_s`` to finish
        its unit; the front goes on admitting and serving the others meanwhile)."""

        def stop() -> None:
            try:
                attachment.group.stop(self._stop_wait_s)
            finally:
                if self.figures is not None:
                    self.figures.remove(list(attachment.group.names))
                for name in attachment.group.names:
                    _remove(attachment.group.stats_file(name))
                with self._lock:
                    self._stopping.pop(thread, None)

        thread = threading.Thread(target=stop, name="h5feed-fleet-stop", daemon=True)
        with self._lock:
            self._stopping[thread] = attachment
        thread.start()

    def _reply(self, identity: zmq.Frame, message: messages.Message) -> None:
        # A trainer gone or not reading: its next ATTACH gets the next answer.
        with contextlib.suppress(zmq.ZMQError):
            self._socket.send_multipart([identity.bytes, *messages.encode(message)], zmq.NOBLOCK)

    def _user_id(self, frame: zmq.Frame) -> bytes | None:
        """The attaching trainer's CURVE public key (Z85), None without keys."""
        if self._curve is None:
            return None
        return str(frame.get("User-Id")).encode()

    def _refuse(self, identity: zmq.Frame, kind: str, label: str, why: str) -> None:
        """Refuse trainer ``label``'s ATTACH with a BYE naming ``why`` (counted, logged at a
        bounded rate under ``kind``)."""
        self._count_refusal(kind, f"trainer {label}: {why}")
        self._reply(identity, messages.Bye.refusing(why))

    def _count_refusal(self, kind: str, detail: str) -> None:
        self.refused += 1
        self._refusals.refused(kind, detail)

    # -- figures and the end -------------------------------------------------------------------

    @property
    def groups_held(self) -> int:
        """Groups whose processes may not be gone yet: the attached trainers' and those of
        trainers that left, still stopping (guarantee 3)."""
        with self._lock:
            leaving = sum(a.detached for a in self._stopping.values())
            return len(self.attached) + leaving

    @property
    def running(self) -> int:
        """Worker processes running now, every trainer's."""
        with self._lock:
            attachments = list(self.attached.values())
        return sum(a.group.running for a in attachments)

    def snapshot(self) -> dict[str, Any]:
        """The fleet's figures (``/stats`` ``"fleet"``; read from any thread)."""
        with self._lock:
            attachments = list(self.attached.values())
            stopping = len(self._stopping)
        return {
            "listen": self.endpoint,
            "max_trainers": self.max_trainers,
            "attached": len(attachments),
            "worker_processes": sum(a.group.running for a in attachments),
            "stopping": stopping,
            "refused": self.refused + (self._curve.refused_keys if self._curve else 0),
            "connections": self._guard.connections,
            "connections_shed": self._guard.shed,
            "worker_start_failures": self.restarts.start_failures,
            "trainers": [
                {
                    "trainer": a.trainer,
                    "workers": len(a.group.names),
                    "running": a.group.running,
                    "cpu_s": a.group.cpu_seconds(),
                    "busy_s": a.group.busy_seconds(),
                    "refused": a.refused,
                }
                for a in attachments
            ],
        }

    def close(self) -> None:
        """Stop every group, then the socket."""
        for key in list(self.attached):
            self._detach(key)
        with self._lock:
            threads = list(self._stopping)
        for thread in threads:
            thread.join(self._stop_wait_s + 10.0)
        self._guard.close()
        self._socket.close(linger=0)
        if self._curve is not None:
            self._curve.stop()
        self._context.term()


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)
