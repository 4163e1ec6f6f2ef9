"""The HELLO that starts every connection, in the form each protocol version gives it.

See :mod:`h5feed.common.protocol.versions` for the rule. A worker says :func:`first_hello`
in the oldest version it speaks; the trainer reads what it says with :func:`hello_says` and
answers in the highest version both speak.
"""

from __future__ import annotations

import dataclasses

from h5feed.common.config import CLIP_SEMANTICS
from h5feed.common.errors import ProtocolError
from h5feed.common.protocol.messages import Hello
from h5feed.common.protocol.versions import (
    SPOKEN,
    VersionRange,
    legacy_package,
    read_legacy_package,
)

#: Between a worker's name and the number of a socket it opened after its first, in that
#: socket's routing id (``NAME~1``, ``NAME~2``...: h5feed/producer/worker/connection.py).
_RENEWAL = "~"


def routing_id(name: bytes, renewals: int) -> bytes:
    """The routing id of a worker's socket: its name, then ``~N`` for the Nth socket it
    opened after its first (a new session on a new connection)."""
    return name + f"{_RENEWAL}{renewals}".encode() if renewals else name


def worker_name(identity: bytes) -> str:
    """The worker name a routing id was made from (:func:`routing_id`)."""
    return identity.decode(errors="replace").partition(_RENEWAL)[0]


@dataclasses.dataclass(frozen=True, slots=True)
class PeerSays:
    """What a HELLO says of its sender: its protocol range, clip semantics and package."""

    versions: VersionRange
    clip_semantics: int
    package: str


def first_hello(worker: str, pid: int, host: str, package: str, nonce: str) -> tuple[Hello, int]:
    """This worker's HELLO and the version to say it in: the oldest spoken, naming them all."""
    version = SPOKEN.lowest
    if version == 5:  # no field for the range yet: said in the package text
        said = legacy_package(package, SPOKEN, CLIP_SEMANTICS)
        return Hello(worker, pid, host, said, nonce), version
    versions = (SPOKEN.lowest, SPOKEN.highest)
    return Hello(worker, pid, host, package, nonce, versions, CLIP_SEMANTICS), version


def hello_says(hello: Hello, version: int) -> PeerSays:
    """What ``hello``, said in protocol ``version``, tells of its sender; ProtocolError when
    the range it names is malformed or leaves out the version it was said in."""
    try:
        if hello.protocols:
            says = PeerSays(VersionRange(*hello.protocols), hello.clip_semantics, hello.package)
        elif (legacy := read_legacy_package(hello.package) if version == 5 else None) is not None:
            says = PeerSays(legacy[1], legacy[2], legacy[0])
        else:  # a peer that speaks only the version it said hello in, of semantics 1
            says = PeerSays(VersionRange(version, version), 1, hello.package)
    except ValueError as exc:
        raise ProtocolError(f"HELLO names a bad protocol range: {exc}") from None
    if version not in says.versions:
        raise ProtocolError(f"HELLO in protocol version {version} names the range {says.versions}")
    return says
