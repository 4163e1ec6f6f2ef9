"""The frames: how one message lies on the socket (a msgpack header frame, then one raw frame
per array), and the strict check of both on decode.

Every message is a multipart ZeroMQ message (a ROUTER socket adds its routing frame in front;
that frame is the transport's, not part of this format)::

    frame 0  header  msgpack array of 5 elements:
                       [0] magic     str  "h5feed"
                       [1] version   int  one of SPOKEN (PROTOCOL_VERSION, N, and N-1: see
                                          h5feed.common.protocol.versions); another is
                                          refused (VersionMismatchError)
                       [2] kind      str  one of KINDS ("hello", "job", "index", "unit", ...;
                                          the typed messages: h5feed.common.protocol.messages)
                       [3] fields    map  str -> msgpack value; the keys and types of each kind are
                                          fixed per version by SCHEMAS_BY_VERSION (derived from
                                          the message classes of
                                          h5feed.common.protocol.message_types) and checked on
                                          decode;
                                          map keys are written sorted: one message, one encoding
                       [4] arrays    array of [name str, dtype str, shape array of int], one per
                                          frame that follows; dtype is numpy's ``dtype.str``
                                          (e.g. "|u1", "<i8") from ALLOWED_DTYPES only
    frame 1+ arrays  the C-order bytes of each array, exactly prod(shape) * itemsize long

msgpack uses its bin type for bytes and str for text. Nothing is pickled: headers hold plain
values only, arrays are raw bytes with a declared dtype that excludes object dtypes.

The envelope (magic, version, kind, fields, arrays) is the same in every version; what a
version changes is which kinds and fields its schemas hold. Decoding is strict: wrong magic,
a version not spoken, unknown kind, missing (but for a kind's few optional fields:
``OPTIONAL_BY_VERSION``) or unknown fields,
wrong field types, a frame count or byte length that does not match the declared arrays, an
array beyond the size limits, or an oversized header (``Limits``: 2 MiB, and msgpack's own
per-string, -array and -map limits, checked before it builds the object) all raise
:class:`ProtocolError` (or :class:`VersionMismatchError`). Decoded arrays are read-only views
over the received frames (``np.frombuffer``): receiving copies nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgpack
import numpy as np

from h5feed.common.errors import ProtocolError, VersionMismatchError
from h5feed.common.protocol import message_types as typed
from h5feed.common.protocol.frame_cap import (  # re-exported: its documented home
    DEFAULT_MAX_MESSAGE_BYTES as DEFAULT_MAX_MESSAGE_BYTES,
)
from h5feed.common.protocol.versions import PROTOCOL_VERSION, SPOKEN, VersionRange

MAGIC: Final = "h5feed"
# 2: UNIT slot field; clip layout, transform. 3: ITEMS and PULL (source units, which were
# UNITs whose rows meant items or [count, pass]); JOB layout apart from the clip; nested
# values checked by h5feed.common.protocol.messages. 4: HELLO nonce; JOB on_error, send_index and
# DATA skipped (bad data, a known index: added in the same round).
# 5: SOURCE batched; SOURCE_INFO epoch and checks; CHECK (the copies of a user's object
# agree: issue 22). 6: negotiation, N and N-1 spoken (HELLO protocols and clip_semantics,
# JOB clip_semantics): h5feed.common.protocol.versions; ATTACH and ATTACHED (a shared
# fleet's front: issue 26).

# The kinds, each named once by its class (h5feed.common.protocol.message_types); worker = a
# producer.
HELLO: Final = typed.Hello.KIND  # worker -> consumer: who I am
JOB: Final = typed.Job.KIND  # consumer -> worker: the files it owns and how to cut clips
INDEX: Final = typed.Index.KIND  # worker -> consumer: one file's videos (name, frames, label)
UNIT: Final = typed.Unit.KIND  # consumer -> worker: produce these rows of one batch
DATA: Final = typed.Data.KIND  # worker -> consumer: a unit's rows, as arrays (or in its slot)
ERROR: Final = typed.Error.KIND  # worker -> consumer: a unit (or the job) failed, and why
BYE: Final = typed.Bye.KIND  # either way: stop / I am leaving
SOURCE: Final = typed.Source.KIND  # consumer -> worker: run the user's code at an import path
SOURCE_INFO: Final = typed.SourceInfo.KIND  # worker -> consumer: what it is (kind, length, spec)
ITEMS: Final = typed.Items.KIND  # consumer -> worker: map/keras source, these items of a batch
PULL: Final = typed.Pull.KIND  # consumer -> worker: generator source, the next elements
PING: Final = typed.Ping.KIND  # consumer -> worker: nothing to do; a failed send: it is gone
ATTACH: Final = typed.Attach.KIND  # trainer -> shared fleet: serve me (h5feed produce --listen)
ATTACHED: Final = typed.Attached.KIND  # shared fleet -> trainer: served, by this many workers
CHECK: Final = typed.Check.KIND  # consumer -> worker: digest the common items at epoch start
# Added in protocol 4 (additive): the videos of several files at once, as columns.
INDEX_BATCH: Final = typed.IndexBatch.KIND  # worker -> consumer: files, counts, names, arrays

#: Start of a BYE reason that refuses a peer (e.g. another protocol version): do not retry.
REFUSED: Final = typed.REFUSED

#: Field names and accepted Python types of each message kind (after msgpack decoding) in
#: each version spoken, derived from the fields of its class in
#: h5feed.common.protocol.message_types (the one copy).
SCHEMAS_BY_VERSION: Final[Mapping[int, Mapping[str, Mapping[str, tuple[type, ...]]]]] = {
    version: {kind: schema.header_types for kind, schema in schemas.items()}
    for version, schemas in typed.SCHEMAS_BY_VERSION.items()
}
#: The fields of each kind that may be absent (``Omissible``), in each version spoken.
OPTIONAL_BY_VERSION: Final[Mapping[int, Mapping[str, frozenset[str]]]] = {
    version: {kind: schema.optional_fields for kind, schema in schemas.items()}
    for version, schemas in typed.SCHEMAS_BY_VERSION.items()
}
#: Those of the current version.
SCHEMAS: Final = SCHEMAS_BY_VERSION[PROTOCOL_VERSION]
KINDS: Final = frozenset(SCHEMAS)

ALLOWED_DTYPES: Final = frozenset(
    np.dtype(name).str
    for name in (
        "bool",
        "uint8",
        "int8",
        "uint16",
        "int16",
        "uint32",
        "int32",
        "uint64",
        "int64",
        "float16",
        "float32",
        "float64",
    )
)


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """Upper bounds the decoder enforces before it allocates or trusts anything.

    ``max_header_bytes`` (2 MiB) and ``max_containers`` bound the Python objects one header
    can make. A one-byte empty map costs ~72 bytes of Python memory, so a header of empty
    maps (the worst case) would cost ~150 MB; at most ``max_containers`` (131,072) maps and
    arrays are built before the header is refused (~10 MB), and the worst scalars (2-byte
    strings, ~20x) bound the rest to ~40 MB, freed at once. Legal headers fit with
    room: an INDEX entry is [name, frames, label], at most 81 bytes with a 64-character name,
    so one file of 25,000 such videos (100,000 with short names) fits; a JOB of 20,000 paths
    of 100 characters fits (the consumer sends a larger job as several JOBs:
    ``h5feed.consumer.hdf5.units.split_job``); a UNIT row is at most ~75 bytes (27,000 rows).
    The per-container limits are handed to msgpack, which refuses a longer string, bin, array
    or map from its declared length, before building it.
    """

    max_header_bytes: int = 2 << 20
    max_array_bytes: int = 4 << 30
    max_arrays: int = 64
    max_ndim: int = 8
    # The wire's own ceiling (a source's args may hold long text); each field's own bound
    # is lower and checked at decode (h5feed.common.protocol.message_records: a HELLO's host 253).
    max_str_len: int = 1 << 20
    max_bin_len: int = 1 << 20
    max_array_len: int = 1 << 20  # elements of one msgpack array (videos, rows, files)
    max_map_len: int = 1 << 16  # keys of one map (fields, transform/source args, specs)
    max_containers: int = 1 << 17  # maps and arrays in one header (an INDEX: one per video)


DEFAULT_LIMITS: Final = Limits()
#: The largest message between a trainer and a shared fleet's front (an ATTACH or ATTACHED is
#: under 200 bytes), and the limits both decode them with.
FLEET_MESSAGE_BYTES: Final = 4096
FLEET_LIMITS: Final = Limits(
    max_header_bytes=FLEET_MESSAGE_BYTES,
    max_str_len=1024,
    max_bin_len=0,
    max_array_len=16,
    max_map_len=16,
    max_containers=16,
)


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """A decoded message: its kind, its header fields, and its arrays by name."""

    kind: str
    fields: dict[str, Any]
    arrays: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    version: int = PROTOCOL_VERSION  # the protocol version it was said in


Frame = Any  # bytes, memoryview or zmq.Frame: anything exposing the buffer protocol / .buffer


def encode(
    kind: str,
    fields: Mapping[str, Any],
    arrays: Sequence[tuple[str, np.ndarray]] = (),
    version: int = PROTOCOL_VERSION,
) -> list[Any]:
    """Encode a message of protocol ``version`` as the list of frames to send
    (``send_multipart(..., copy=False)``).

    Array frames are the arrays themselves (made C-contiguous if they are not), so ZeroMQ
    sends them without a copy. ``fields`` must match ``SCHEMAS_BY_VERSION[version][kind]``; a
    mismatch raises :class:`ProtocolError` here, at the sender, rather than at the peer.
    """
    _check_fields(kind, fields, version)
    meta = []
    buffers: list[Any] = []
    for name, array in arrays:
        array = np.asarray(array, order="C")  # keeps 0-d arrays 0-d, unlike ascontiguousarray
        if array.dtype.str not in ALLOWED_DTYPES:
            raise ProtocolError(f"array {name!r}: dtype {array.dtype} cannot go on the wire")
        meta.append([name, array.dtype.str, list(array.shape)])
        buffers.append(array)
    header = msgpack.packb(
        [MAGIC, version, kind, dict(sorted(fields.items())), meta], use_bin_type=True
    )
    if len(header) > DEFAULT_LIMITS.max_header_bytes:  # the peer would refuse it
        raise ProtocolError(
            f"{kind} header of {len(header)} bytes exceeds the limit of "
            f"{DEFAULT_LIMITS.max_header_bytes}"
        )
    return [header, *buffers]


def decode(frames: Sequence[Frame], limits: Limits = DEFAULT_LIMITS) -> Message:
    """Decode the frames of one message (routing frames already removed). Copies no array."""
    if not frames:
        raise ProtocolError("empty message")
    header = _buffer(frames[0])
    if len(header) > limits.max_header_bytes:
        raise ProtocolError(
            f"header of {len(header)} bytes exceeds the limit of {limits.max_header_bytes}"
        )
    containers = _ContainerCount(limits.max_containers)
    try:
        decoded = msgpack.unpackb(
            header,
            list_hook=containers,
            object_hook=containers,
            raw=False,
            use_list=True,
            strict_map_key=True,
            max_str_len=limits.max_str_len,
            max_bin_len=limits.max_bin_len,
            max_array_len=limits.max_array_len,
            max_map_len=limits.max_map_len,
            max_ext_len=0,
            ext_hook=_refuse_ext,
        )
    except (ValueError, TypeError, msgpack.UnpackException) as exc:  # what bad input raises
        raise ProtocolError(f"header is not valid msgpack: {exc}") from exc
    if not isinstance(decoded, list) or len(decoded) != 5:
        raise ProtocolError("header must be a msgpack array of 5 elements")
    magic, version, kind, fields, meta = decoded
    if magic != MAGIC:
        raise ProtocolError(f"not an h5feed message (magic {magic!r})")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ProtocolError(f"protocol version must be an int, got {version!r}")
    if version not in SPOKEN:
        raise VersionMismatchError(
            f"peer speaks h5feed protocol version {_range_said(version, kind, fields)}, "
            f"this side speaks {SPOKEN}"
        )
    if not isinstance(kind, str) or kind not in SCHEMAS_BY_VERSION[version]:
        raise ProtocolError(f"unknown message kind {kind!r} in protocol version {version}")
    if not isinstance(fields, dict):
        raise ProtocolError("header fields must be a map")
    _check_fields(kind, fields, version)
    arrays = _decode_arrays(meta, frames[1:], limits)
    return Message(kind, fields, arrays, version)


def _range_said(version: int, kind: Any, fields: Any) -> str:
    """The range a HELLO of a version not spoken names (read, never trusted, for the error
    message only), else its version alone."""
    said = fields.get("protocols") if kind == HELLO and isinstance(fields, dict) else None
    if (
        isinstance(said, list)
        and len(said) == 2
        and all(type(v) is int for v in said)
        and 0 < said[0] <= version <= said[1] < 1 << 16
    ):
        return str(VersionRange(*said))
    return str(version)


def _check_fields(kind: str, fields: Mapping[str, Any], version: int = PROTOCOL_VERSION) -> None:
    schema = SCHEMAS_BY_VERSION.get(version, {}).get(kind)
    if schema is None:
        raise ProtocolError(f"unknown message kind {kind!r} in protocol version {version}")
    missing = schema.keys() - fields.keys() - OPTIONAL_BY_VERSION[version][kind]
    unknown = fields.keys() - schema.keys()
    if missing or unknown:
        raise ProtocolError(
            f"{kind} message: missing fields {sorted(missing)}, "
            f"unknown fields {sorted(unknown, key=repr)}"
        )
    for name, types in schema.items():
        if name not in fields:
            continue  # an optional field, absent
        value = fields[name]
        # bool is an int subclass in Python; an int field never accepts True/False.
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ProtocolError(
                f"{kind} message: field {name!r} has type {type(value).__name__}, "
                f"expected {' or '.join(t.__name__ for t in types)}"
            )


def _decode_arrays(meta: Any, frames: Sequence[Frame], limits: Limits) -> dict[str, np.ndarray]:
    if not isinstance(meta, list):
        raise ProtocolError("array descriptions must be an array")
    if len(meta) > limits.max_arrays:
        raise ProtocolError(f"{len(meta)} arrays exceed the limit of {limits.max_arrays}")
    if len(meta) != len(frames):
        raise ProtocolError(f"header declares {len(meta)} arrays but {len(frames)} frames follow")
    arrays: dict[str, np.ndarray] = {}
    for entry, frame in zip(meta, frames, strict=True):
        if not (isinstance(entry, list) and len(entry) == 3):
            raise ProtocolError(f"bad array description {entry!r}")
        name, dtype_str, shape = entry
        if not isinstance(name, str) or name in arrays:
            raise ProtocolError(f"bad or repeated array name {name!r}")
        if not isinstance(dtype_str, str) or dtype_str not in ALLOWED_DTYPES:
            raise ProtocolError(f"array {name!r}: dtype {dtype_str!r} is not allowed")
        if (
            not isinstance(shape, list)
            or len(shape) > limits.max_ndim
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        ):
            raise ProtocolError(f"array {name!r}: bad shape {shape!r}")
        dtype = np.dtype(dtype_str)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > limits.max_array_bytes:
            raise ProtocolError(
                f"array {name!r}: {nbytes} bytes exceed the limit of {limits.max_array_bytes}"
            )
        buffer = _buffer(frame)
        if len(buffer) != nbytes:
            raise ProtocolError(
                f"array {name!r}: frame has {len(buffer)} bytes, "
                f"shape {shape} of {dtype_str} needs {nbytes}"
            )
        try:
            arrays[name] = np.frombuffer(buffer, dtype=dtype).reshape(shape)
        except (ValueError, OverflowError) as exc:  # a dimension beyond numpy's range
            raise ProtocolError(f"array {name!r}: bad shape {shape!r}: {exc}") from exc
    return arrays


def _buffer(frame: Frame) -> memoryview:
    """A byte view of a frame without copying (zmq.Frame exposes ``.buffer``)."""
    buffer: Any = getattr(frame, "buffer", frame)
    view = memoryview(buffer)
    if not view.c_contiguous:
        raise ProtocolError("frame is not a contiguous buffer")
    if view.nbytes == 0:
        view = memoryview(b"")  # cast("B") refuses shapes with a 0 in them
    elif view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view.toreadonly()  # decoded arrays are read-only, whatever the frame


class _ContainerCount:
    """A msgpack hook that refuses a header once it has made ``most`` maps and arrays."""

    __slots__ = ("left",)

    def __init__(self, most: int) -> None:
        self.left = most

    def __call__(self, value: Any) -> Any:
        self.left -= 1
        if self.left < 0:
            raise ProtocolError("header holds too many maps and arrays")
        return value


def _refuse_ext(code: int, data: bytes) -> Any:
    raise ProtocolError(f"header holds a msgpack ext type ({code}); headers hold plain values")
