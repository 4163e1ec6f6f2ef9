"""The records inside messages, and the bounds of their fields: small ``NamedTuple``\\ s
that msgpack writes as the plain arrays the wire format describes, with no conversion per row
(a UNIT's :class:`Row`, a DATA's :class:`SkippedRow`, an INDEX's :class:`VideoEntry`, ...),
the limits the message classes of :mod:`h5feed.common.protocol.message_types` put on their
fields, and :func:`cut`, how a sender fits its own text to them. Each record's annotations
are its wire schema too (:mod:`h5feed.common.protocol.message_schema`)."""

from __future__ import annotations

from typing import Annotated, Final, NamedTuple

from h5feed.common.protocol.message_schema import MaxLen, Min, Within

# Every string a peer sends has a bound of its own (message_schema refuses a str field
# without one at import), sized for the largest real value with room, far under the wire's
# 1 MiB per string: a peer's claim is kept and repeated (stats, /metrics, logs) at most so.
#: A worker's name: its ZeroMQ routing id, which libzmq caps at 255 bytes.
MAX_WORKER_NAME: Final = 255
#: A host name: a DNS name (a Kubernetes pod name too) is at most 253 characters.
MAX_HOST: Final = 253
#: An h5feed version, or the version-5 HELLO's legacy form (a 64-character version and its
#: range, ~100 characters: h5feed.common.protocol.versions.legacy_package).
MAX_PACKAGE: Final = 256
#: A HELLO nonce (32 hex characters sent).
MAX_NONCE: Final = 64
#: A job id (32 hex characters sent).
MAX_JOB_ID: Final = 128
#: A path (a file of a JOB, a cache directory, a file named in an ERROR): Linux's PATH_MAX.
MAX_PATH: Final = 4096
#: A name inside a file (a video, an ERROR's video), and a Python name or import path.
MAX_NAME: Final = 1024
#: An ERROR's message, and a BYE's reason; an ERROR's traceback (the longest legal text). A
#: worker cuts its own to these (Error.of), a peer that sends more is refused.
MAX_MESSAGE: Final = 16 << 10
MAX_TRACEBACK: Final = 256 << 10
#: Entries of a SOURCE's sys_path.
MAX_SYS_PATH: Final = 1024

#: At most this many items in a SOURCE_INFO's checks; each digest at most this many bytes.
MAX_CHECKS: Final = 16
MAX_DIGEST_BYTES: Final = 64
#: At most this many code identities in a JOB or SOURCE (one per import path it names).
MAX_CODE_IDENTITIES: Final = 4
#: The most busy seconds a DATA part may say it took (a day: far past any unit_timeout_s).
MAX_BUSY_S: Final = 86400.0
#: The most requests, retries or refusals one DATA part may say it made (a million, each
#: in a unit_timeout_s), and the most bytes (1 TiB): far past any real part.
MAX_PART_REQUESTS: Final = 1_000_000
MAX_PART_BYTES: Final = 1 << 40


def cut(text: str, most: int, *, tail: bool = False) -> str:
    """``text`` if it has at most ``most`` characters, else ``most`` of them saying how many
    were cut (its start, or with ``tail`` its end): what a sender does with its own text
    before a field's bound, never what a receiver does with a peer's."""
    if len(text) <= most:
        return text
    keep = most - len(f" [{len(text)} characters cut] ")  # the count has no more digits
    mark = f" [{len(text) - keep} characters cut] "
    return mark + text[-keep:] if tail else text[:keep] + mark


class CodeIdentity(NamedTuple):
    """A user module a job names, as the trainer found it: its name, the SHA-256 of its file
    and the file's path (h5feed.common.user_code.code_identity)."""

    module: Annotated[str, MaxLen(1024)]
    digest: Annotated[bytes, MaxLen(MAX_DIGEST_BYTES)]
    file: Annotated[str, MaxLen(4096)]


class FileRef(NamedTuple):
    """A file of a JOB: its number in the dataset and its path (relative to the data root)."""

    number: int
    path: Annotated[str, MaxLen(MAX_PATH)]


class VideoEntry(NamedTuple):
    """A video of an INDEX: its name in the file, its frame count (>= 1) and its label."""

    name: Annotated[str, MaxLen(MAX_NAME)]
    frames: Annotated[int, Min(1)]
    label: int


class Row(NamedTuple):
    """One row of an HDF5 UNIT: the sample and everything needed to make its clip."""

    sample: int  # global sample id
    file: int  # file index in the dataset
    video: int  # position of the video in its file's index
    start: int  # first frame of the clip
    crop_top: float  # uniform [0, 1): where the crop goes
    crop_left: float
    flip: bool
    seed: int  # per-sample seed of the user's transform


#: The longest ``reason`` of a :class:`SkippedRow` (the worker cuts a longer message).
MAX_SKIP_REASON: Final = 1000
#: What a JOB's ``on_error`` may say.
ON_ERROR_CHOICES: Final = ("raise", "skip")


class SkippedRow(NamedTuple):
    """A row of a DATA skipped under ``on_error="skip"`` (its clip is all zeros): its position
    in the DATA's ``samples``, the frame that failed, and why (the worker's message, at most
    :data:`MAX_SKIP_REASON` characters)."""

    position: int  # distinct, within the DATA's samples: Data.validate
    frame: Annotated[int, Min(0)]
    reason: Annotated[str, MaxLen(MAX_SKIP_REASON)]


class SlotRef(NamedTuple):
    """Where a UNIT's rows go in shared memory: the consumer's pid and the slot's fd (the
    worker opens ``/proc/PID/fd/FD``), the batch's row count, the rows' positions in it."""

    pid: Annotated[int, Min(0)]
    fd: Annotated[int, Min(0)]
    batch_rows: Annotated[int, Min(0)]
    positions: tuple[int, ...]  # as many as the UNIT's rows, distinct: Unit.validate


class ItemCheck(NamedTuple):
    """One common item as one copy of a user's object makes it: its digest, and whether two
    fetches under the same seeding gave the same (see h5feed.consumer.sources.agreement)."""

    item: int
    digest: Annotated[bytes, MaxLen(MAX_DIGEST_BYTES)]
    reproducible: bool


class StorageReads(NamedTuple):
    """What a worker's reads of object storage cost while it made one DATA part (since its
    previous part): requests (a HEAD or a ranged GET each, read-ahead included), the bytes of
    their bodies, its own retries of a ranged GET or a read (h5feed's, not the client
    library's), and reads refused because the object changed (HTTP 412, or another ETag
    than the one indexed)."""

    requests: Annotated[int, Within(0, MAX_PART_REQUESTS)]
    bytes: Annotated[int, Within(0, MAX_PART_BYTES)]
    retries: Annotated[int, Within(0, MAX_PART_REQUESTS)]
    refused: Annotated[int, Within(0, MAX_PART_REQUESTS)]
