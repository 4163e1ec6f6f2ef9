"""The message types that run a connection rather than a job: HELLO (who speaks, and which
versions), BYE (leaving, or a refusal), PING (is the connection alive) and a shared fleet's
ATTACH and ATTACHED.

Written as :mod:`h5feed.common.protocol.message_types` writes a job's messages (each field
once, its annotation the wire schema, bounds as ``Annotated`` metadata, a rule across fields
its ``validate()``); that module lists them with the others (``CLASSES``) and derives every
schema. Code imports them from :mod:`h5feed.common.protocol.messages`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, ClassVar, Final

from h5feed.common.errors import ProtocolError
from h5feed.common.protocol.message_records import (
    MAX_HOST,
    MAX_MESSAGE,
    MAX_NONCE,
    MAX_PACKAGE,
    MAX_WORKER_NAME,
    cut,
)
from h5feed.common.protocol.message_schema import MaxLen, Min, Since

__all__ = ["MAX_PORT", "REFUSED", "TRAINER_NAME", "Attach", "Attached", "Bye", "Hello", "Ping"]

#: Start of a BYE reason that refuses a peer (e.g. another protocol version): do not retry.
REFUSED: Final = "refused:"


@dataclasses.dataclass(frozen=True, slots=True)
class Hello:
    KIND: ClassVar[str] = "hello"
    worker: Annotated[str, MaxLen(MAX_WORKER_NAME)]
    pid: int
    host: Annotated[str, MaxLen(MAX_HOST)]
    package: Annotated[str, MaxLen(MAX_PACKAGE)]
    #: Random, fixed for the life of one worker process: a HELLO under a known identity with
    #: another nonce is a new process (a restarted worker), never the same one speaking again.
    nonce: Annotated[str, MaxLen(MAX_NONCE)]
    #: [lowest, highest] protocol version the worker speaks ((): only the HELLO's own); in
    #: version 5 said in ``package`` instead (h5feed.common.protocol.versions).
    protocols: Annotated[tuple[int, ...], Since(6), MaxLen(2)] = ()
    #: What a clip is to this worker (h5feed.common.config.CLIP_SEMANTICS).
    clip_semantics: Annotated[int, Since(6), Min(1)] = 1

    def validate(self) -> None:
        said = self.protocols
        if said and not (len(said) == 2 and 0 < said[0] <= said[-1]):
            raise ProtocolError(
                f"HELLO protocols must be [lowest, highest], got {list(self.protocols)}"
            )


@dataclasses.dataclass(frozen=True, slots=True)
class Bye:
    KIND: ClassVar[str] = "bye"
    reason: Annotated[str, MaxLen(MAX_MESSAGE)]

    @classmethod
    def refusing(cls, why: str) -> Bye:
        """A BYE that refuses a peer (another protocol version, say): it must not retry."""
        return cls(cut(f"{REFUSED} {why}", MAX_MESSAGE))

    @property
    def refused(self) -> bool:
        return self.reason.startswith(REFUSED)


@dataclasses.dataclass(frozen=True, slots=True)
class Ping:
    """The consumer's liveness probe of a worker holding units (see
    h5feed.common.protocol.liveness): the worker ignores it; the consumer learns from whether the
    send succeeds, i.e. whether ZeroMQ's heartbeats still hold the connection."""

    KIND: ClassVar[str] = "ping"


#: Characters of a trainer's name in an ATTACH: a metrics label and a worker-name part.
TRAINER_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: The largest TCP port.
MAX_PORT: Final = 65535


@dataclasses.dataclass(frozen=True, slots=True)
class Attach:
    """Trainer -> a shared fleet's front (``h5feed produce --listen``): serve me, with my
    producers connecting to ``port`` at the address this message came from (never another
    host: the front reads the address from the connection, not from the message). Said again
    every :data:`h5feed.consumer.processes.fleet_announcer.ATTACH_EVERY_S`; a front that hears none
    for its
    ``--attach-timeout-s`` stops that trainer's workers."""

    KIND: ClassVar[str] = "attach"
    SINCE: ClassVar[int] = 6
    #: The trainer's ``listen=`` port.
    port: int
    #: A name for the fleet's figures and its workers' names (:data:`TRAINER_NAME`).
    trainer: Annotated[str, MaxLen(64)]

    def validate(self) -> None:
        if not 1 <= self.port <= MAX_PORT:
            raise ProtocolError(f"ATTACH port must be in [1, {MAX_PORT}], got {self.port}")
        if not TRAINER_NAME.fullmatch(self.trainer):
            raise ProtocolError(
                f"ATTACH trainer name {self.trainer!r} must match {TRAINER_NAME.pattern}"
            )


@dataclasses.dataclass(frozen=True, slots=True)
class Attached:
    """A shared fleet's front -> trainer: this replica serves you with ``workers`` worker
    processes, and ``trainers`` trainers in all (you among them); a refusal is a BYE
    (:meth:`Bye.refusing`) naming the limit."""

    KIND: ClassVar[str] = "attached"
    SINCE: ClassVar[int] = 6
    replica: Annotated[str, MaxLen(256)]
    workers: Annotated[int, Min(0)]
    trainers: Annotated[int, Min(1)]
