"""The codec, and the protocol's one entrance: a typed message in, its frames out, and back.

:mod:`h5feed.common.protocol.wire` owns the frames (magic, version, header, raw array
frames) and the strict, field-level check of each kind's header (``wire.SCHEMAS``). This
module is the layer
above it that code uses: a sender builds a message with its constructor (mypy checks every
field) and calls :func:`encode`; a receiver calls :func:`decode` and dispatches with
``match``. Nothing outside this module and ``wire`` builds or reads a header dict.

The classes are written once, in :mod:`h5feed.common.protocol.message_types` (a job's),
:mod:`h5feed.common.protocol.control_types` (the connection's) and
:mod:`h5feed.common.protocol.message_records` (the records inside them; all re-exported
here): their
fields' annotations are the wire schema, so :func:`encode` writes and :func:`parse` builds
each message from that one schema (:mod:`h5feed.common.protocol.message_schema`), every nested value
checked on decode before anything trusts it; a bad one raises :class:`ProtocolError`, like
any other malformed message.

The kinds (worker = a producer process; consumer = the trainer's side):

=============  ==================  ======================================================
kind           direction           what
=============  ==================  ======================================================
HELLO          worker -> consumer  who I am (name, pid, host, package version)
JOB            consumer -> worker  HDF5 files to open (number, path), clip spec, layout, on_error
INDEX          worker -> consumer  the videos of one file (name, frames, label)
INDEX_BATCH    worker -> consumer  the videos of several files, as columns (UTF-8 names; frames and
                                   labels as int64 arrays): one message, not one per file
UNIT           consumer -> worker  HDF5: make these :class:`Row`\\ s of one batch
SOURCE         consumer -> worker  load the user's code (import path, args, shard, spec)
SOURCE_INFO    worker -> consumer  what that code is (kind, length, element spec)
ITEMS          consumer -> worker  map/keras source: make these items of one batch
PULL           consumer -> worker  generator source: the next ``count`` elements of a pass
DATA           worker -> consumer  a unit's rows, as arrays (or written to its slot); skipped rows
ERROR          worker -> consumer  a unit or the job failed: type, message, traceback, where
BYE            either way          stop / I am leaving (``refused:`` reasons: do not retry)
ATTACH         trainer -> fleet    a shared fleet's front: serve me at this port (protocol 6)
ATTACHED       fleet -> trainer    served by this replica: its workers, its trainers (protocol 6)
=============  ==================  ======================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from h5feed.common.errors import FeatureVersionError, ProtocolError
from h5feed.common.protocol import wire
from h5feed.common.protocol.message_records import (
    MAX_CHECKS,
    MAX_CODE_IDENTITIES,
    MAX_DIGEST_BYTES,
    MAX_SKIP_REASON,
    ON_ERROR_CHOICES,
    CodeIdentity,
    FileRef,
    ItemCheck,
    Row,
    SkippedRow,
    SlotRef,
    StorageReads,
    VideoEntry,
)
from h5feed.common.protocol.message_types import (
    SCHEMAS_BY_VERSION,
    Attach,
    Attached,
    Bye,
    Check,
    Data,
    Error,
    Hello,
    Index,
    IndexBatch,
    Items,
    Job,
    Ping,
    Pull,
    Source,
    SourceInfo,
    Unit,
)
from h5feed.common.protocol.versions import PROTOCOL_VERSION

__all__ = [
    "MAX_CHECKS",
    "MAX_CODE_IDENTITIES",
    "MAX_DIGEST_BYTES",
    "MAX_SKIP_REASON",
    "ON_ERROR_CHOICES",
    "Attach",
    "Attached",
    "Bye",
    "Check",
    "CodeIdentity",
    "Data",
    "Error",
    "FileRef",
    "Hello",
    "Index",
    "IndexBatch",
    "ItemCheck",
    "Items",
    "Job",
    "Message",
    "Ping",
    "Pull",
    "Row",
    "SkippedRow",
    "SlotRef",
    "Source",
    "SourceInfo",
    "StorageReads",
    "Unit",
    "VideoEntry",
    "decode",
    "encode",
    "parse",
]

Message = (
    Hello
    | Job
    | Index
    | IndexBatch
    | Unit
    | Items
    | Pull
    | Data
    | Error
    | Bye
    | Source
    | SourceInfo
    | Check
    | Ping
    | Attach
    | Attached
)


def encode(message: Message, version: int = PROTOCOL_VERSION) -> list[Any]:
    """The frames of ``message`` in protocol ``version`` (see
    :func:`h5feed.common.protocol.wire.encode`);
    FeatureVersionError when it holds a field that version cannot carry, ProtocolError when
    its kind is not in that version."""
    schema = SCHEMAS_BY_VERSION[version].get(message.KIND)
    if schema is None:
        raise FeatureVersionError(
            f"{message.KIND.upper()} messages need a later protocol version than {version}"
        )
    header = schema.header(message)
    return wire.encode(message.KIND, header, schema.array_frames(message), version)


def decode(frames: Sequence[wire.Frame], limits: wire.Limits = wire.DEFAULT_LIMITS) -> Message:
    """The typed message of ``frames`` (routing frames removed). Strict: ProtocolError for
    anything malformed, nested values included; VersionMismatchError for a version not
    spoken."""
    return parse(wire.decode(frames, limits))


def decode_said(
    frames: Sequence[wire.Frame], limits: wire.Limits = wire.DEFAULT_LIMITS
) -> tuple[Message, int]:
    """The typed message of ``frames`` and the protocol version it was said in."""
    raw = wire.decode(frames, limits)
    return parse(raw), raw.version


def parse(raw: wire.Message) -> Message:
    """The typed form of a decoded wire message (top-level field types already checked by
    ``wire``): built from its kind's schema in its version, every nested value and bound
    checked (a field its version lacks gets its default)."""
    schema = SCHEMAS_BY_VERSION.get(raw.version, {}).get(raw.kind)
    if schema is None:  # unreachable: wire checks the kind
        raise ProtocolError(f"unknown message kind {raw.kind!r}")
    message: Message = schema.build(raw.fields, raw.arrays)
    return message
