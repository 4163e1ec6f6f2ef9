"""Every h5feed message as a typed, frozen value: one dataclass per kind.

:mod:`h5feed.common.wire` owns the framing (magic, version, header, raw array frames) and the
strict, field-level check of each kind's header (``wire.SCHEMAS``). This module is the layer
above it that code uses: a sender builds a message with its constructor (mypy checks every
field) and calls :func:`encode`; a receiver calls :func:`decode` and dispatches with
``match``. Nothing outside this module and ``wire`` builds or reads a header dict.

Nested values are checked here, on decode, before anything trusts them: a UNIT row has 8
fields of fixed types, an INDEX video 3, a slot reference 4; a bad one raises
:class:`ProtocolError`, like any other malformed message. Small records (:class:`Row`,
:class:`SlotRef`, :class:`FileRef`, :class:`VideoEntry`) are ``NamedTuple``\\ s, so msgpack
writes them as the plain arrays the wire format describes, with no conversion per row.

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
=============  ==================  ======================================================
"""

from __future__ import annotations

import dataclasses
import itertools
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final, NamedTuple

import numpy as np

from h5feed.common import wire
from h5feed.common.errors import DataError, FileReadError, ProtocolError


class FileRef(NamedTuple):
    """A file of a JOB: its number in the dataset and its path (relative to the data root)."""

    number: int
    path: str


class VideoEntry(NamedTuple):
    """A video of an INDEX: its name in the file, its frame count (>= 1) and its label."""

    name: str
    frames: int
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


class SkippedRow(NamedTuple):
    """A row of a DATA skipped under ``on_error="skip"`` (its clip is all zeros): its position
    in the DATA's ``samples``, the frame that failed, and why (the worker's message, at most
    :data:`MAX_SKIP_REASON` characters)."""

    position: int
    frame: int
    reason: str


#: The longest ``reason`` of a :class:`SkippedRow` (the worker cuts a longer message).
MAX_SKIP_REASON = 1000
#: What a JOB's ``on_error`` may say.
ON_ERROR_CHOICES = ("raise", "skip")


class SlotRef(NamedTuple):
    """Where a UNIT's rows go in shared memory: the consumer's pid and the slot's fd (the
    worker opens ``/proc/PID/fd/FD``), the batch's row count, the rows' positions in it."""

    pid: int
    fd: int
    batch_rows: int
    positions: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Hello:
    KIND: ClassVar[str] = wire.HELLO
    worker: str
    pid: int
    host: str
    package: str
    #: Random, fixed for the life of one worker process: a HELLO under a known identity with
    #: another nonce is a new process (a restarted worker), never the same one speaking again.
    nonce: str


@dataclasses.dataclass(frozen=True, slots=True)
class Job:
    """The files a worker owns and how to cut clips. A JOB of the job the worker holds adds
    its files to it: a job of many files comes as several JOBs (at most 1,024 files each)."""

    KIND: ClassVar[str] = wire.JOB
    job: str
    files: tuple[FileRef, ...]
    clip: Mapping[str, Any]  # ClipSpec.to_wire(); ClipSpec.from_wire validates it
    layout: Mapping[str, Any]  # LayoutSpec.to_wire(): how the files store videos
    cache_dir: str | None
    #: "raise": a bad frame (FrameError) is an ERROR; "skip": its row is zero-filled and
    #: listed in the DATA's ``skipped``. Errors of whole files are ERRORs either way.
    on_error: str = "raise"
    #: False when the trainer already knows these files' index (the same files, unchanged,
    #: indexed before by local workers): the worker opens and checks them as usual but
    #: sends no INDEX for them, only an ERROR for a file it cannot read.
    send_index: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class Index:
    KIND: ClassVar[str] = wire.INDEX
    job: str
    file: int
    videos: tuple[VideoEntry, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class IndexBatch:
    """The videos of several files: ``files[i]`` has ``counts[i]`` (>= 1) videos, listed file
    after file in ``names`` (UTF-8 bytes: the trainer keeps them as they arrive), ``frames``
    (int64 [V], each >= 1) and ``labels`` (int64 [V]).
    Columns, so a 10,000-file handshake decodes without a Python object per video."""

    KIND: ClassVar[str] = wire.INDEX_BATCH
    job: str
    files: tuple[int, ...]
    counts: tuple[int, ...]
    names: tuple[bytes, ...]
    frames: np.ndarray
    labels: np.ndarray

    @classmethod
    def of_columns(
        cls, job: str, files: Sequence[tuple[int, Sequence[bytes], np.ndarray, np.ndarray]]
    ) -> IndexBatch:
        """The batch of ``files``: (file number, names, frame counts, labels) each."""
        empty = np.zeros(0, np.int64)
        return cls(
            job,
            tuple(number for number, *_columns in files),
            tuple(len(names) for _number, names, _f, _l in files),
            tuple(itertools.chain.from_iterable(names for _n, names, _f, _l in files)),
            np.concatenate([frames for _n, _names, frames, _l in files] or [empty]),
            np.concatenate([labels for _n, _names, _f, labels in files] or [empty]),
        )

    @classmethod
    def of(
        cls, job: str, files: Sequence[tuple[int, Sequence[tuple[str, int, int]]]]
    ) -> IndexBatch:
        """The batch of ``files``: (file number, its videos) each."""
        columns = []
        for number, entries in files:
            names, frames, labels = zip(*entries, strict=True) if entries else ((), (), ())
            columns.append(
                (
                    number,
                    [name.encode() for name in names],
                    np.array(frames, np.int64).reshape(-1),
                    np.array(labels, np.int64).reshape(-1),
                )
            )
        return cls.of_columns(job, columns)


_ARRAY_FIELDS: Mapping[str, tuple[str, ...]] = {wire.INDEX_BATCH: ("frames", "labels")}


@dataclasses.dataclass(frozen=True, slots=True)
class Unit:
    KIND: ClassVar[str] = wire.UNIT
    job: str
    unit: int
    batch: int  # the batch's sequence number in the iteration
    epoch: int
    rows: tuple[Row, ...]
    slot: SlotRef | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Items:
    """A map-style source's element indices, or a keras source's one batch index."""

    KIND: ClassVar[str] = wire.ITEMS
    job: str
    unit: int
    batch: int
    epoch: int
    items: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Pull:
    """A generator source: the next ``count`` elements of the worker's pass ``pass_``."""

    KIND: ClassVar[str] = wire.PULL
    job: str
    unit: int
    batch: int
    epoch: int
    count: int
    pass_: int


@dataclasses.dataclass(frozen=True, slots=True)
class Data:
    """A unit's answer: ``samples`` (HDF5: sample ids; map: items; keras: the batch index;
    generator: element ordinals) and the arrays (none when written to a shared slot).
    ``skipped``: the rows whose clip is zeros because a frame was bad (HDF5, ``on_error=
    "skip"``), at distinct positions of ``samples`` (checked on decode)."""

    KIND: ClassVar[str] = wire.DATA
    job: str
    unit: int
    batch: int
    samples: tuple[Any, ...]
    arrays: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)
    skipped: tuple[SkippedRow, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Error:
    KIND: ClassVar[str] = wire.ERROR
    job: str
    unit: int | None
    type: str
    message: str
    traceback: str
    file: str | None = None
    video: str | None = None
    frame: int | None = None
    #: A file that cannot be read (``FileReadError``): its number in the JOB, so the trainer
    #: knows which file, whatever path the worker resolved it to.
    file_number: int | None = None

    @classmethod
    def of(cls, job: str, unit: int | None, exc: BaseException, file: str | None = None) -> Error:
        """The ERROR reporting ``exc``; a :class:`DataError` names its file, video, frame,
        a :class:`FileReadError` also the file's number."""
        data_error = exc if isinstance(exc, DataError) else None
        number = exc.number if isinstance(exc, FileReadError) else None
        return cls(
            job=job,
            unit=unit,
            type=type(exc).__name__,
            message=str(exc),
            traceback="".join(traceback.format_exception(exc)),
            file=data_error.file if data_error else file,
            video=data_error.video if data_error else None,
            frame=data_error.frame if data_error else None,
            file_number=number,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Bye:
    KIND: ClassVar[str] = wire.BYE
    reason: str

    @classmethod
    def refusing(cls, why: str) -> Bye:
        """A BYE that refuses a peer (another protocol version, say): it must not retry."""
        return cls(f"{wire.REFUSED} {why}")

    @property
    def refused(self) -> bool:
        return self.reason.startswith(wire.REFUSED)


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    KIND: ClassVar[str] = wire.SOURCE
    job: str
    source: str  # "package.module:factory"
    args: Mapping[str, Any]
    sys_path: tuple[str, ...]
    worker: int  # this worker's shard index among ``workers``
    workers: int
    seed: int
    epoch: int  # the iteration's first epoch
    spec: Mapping[str, Any] | None  # ElementSpec.to_wire(), or None: probe and tell
    batched: bool = False  # source_batched=True: a generator of batches, split into samples


#: At most this many items in a SOURCE_INFO's checks; each digest at most this many bytes.
MAX_CHECKS: Final = 16
MAX_DIGEST_BYTES: Final = 64


class ItemCheck(NamedTuple):
    """One common item as one copy of a user's object makes it: its digest, and whether two
    fetches under the same seeding gave the same (see h5feed.consumer.sources.agreement)."""

    item: int
    digest: bytes
    reproducible: bool


@dataclasses.dataclass(frozen=True, slots=True)
class SourceInfo:
    KIND: ClassVar[str] = wire.SOURCE_INFO
    job: str
    kind: str  # "map", "keras" or "generator"
    length: int | None
    spec: Mapping[str, Any]
    epoch: int = 0  # the epoch the checks were made at
    checks: tuple[ItemCheck, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """Consumer -> worker of a source: answer SOURCE_INFO with the checks at the start of
    ``epoch`` (keras: after ``on_epoch_end`` up to it), before any batch of it is sent."""

    KIND: ClassVar[str] = wire.CHECK
    job: str
    epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class Ping:
    """The consumer's liveness probe of a worker holding units (see
    h5feed.common.liveness): the worker ignores it; the consumer learns from whether the
    send succeeds, i.e. whether ZeroMQ's heartbeats still hold the connection."""

    KIND: ClassVar[str] = wire.PING


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
)
_CLASSES: dict[str, type[Any]] = {
    cls.KIND: cls
    for cls in (
        Hello, Job, Index, IndexBatch, Unit, Items, Pull, Data, Error, Bye, Source, SourceInfo,
        Check, Ping,
    )
}  # fmt: skip
# Fields whose wire name differs from the attribute (``pass`` is a Python keyword).
_WIRE_NAMES: Mapping[str, str] = {"pass_": "pass"}


def encode(message: Message) -> list[Any]:
    """The frames of ``message`` (see :func:`h5feed.common.wire.encode`)."""
    fields: dict[str, Any] = {}
    array_fields = _ARRAY_FIELDS.get(message.KIND, ())
    for field in dataclasses.fields(message):
        if field.name == "arrays" or field.name in array_fields:
            continue
        value = getattr(message, field.name)
        if isinstance(value, tuple):
            value = list(value)  # the schemas say list; tuples inside pack as arrays anyway
        elif isinstance(value, Mapping):
            value = dict(value)
        fields[_WIRE_NAMES.get(field.name, field.name)] = value
    arrays: list[tuple[str, np.ndarray]] = []
    if isinstance(message, Data):
        arrays = list(message.arrays.items())
    arrays += [(name, getattr(message, name)) for name in array_fields]
    return wire.encode(message.KIND, fields, arrays)


def decode(frames: Sequence[wire.Frame], limits: wire.Limits = wire.DEFAULT_LIMITS) -> Message:
    """The typed message of ``frames`` (routing frames removed). Strict: ProtocolError for
    anything malformed, nested values included; VersionMismatchError for another version."""
    return parse(wire.decode(frames, limits))


def parse(raw: wire.Message) -> Message:
    """The typed form of a decoded wire message (fields already checked by ``wire``)."""
    f = raw.fields
    match raw.kind:
        case wire.HELLO:
            return Hello(f["worker"], f["pid"], f["host"], f["package"], f["nonce"])
        case wire.JOB:
            files = tuple(FileRef(*_record(e, (int, str), "JOB file")) for e in f["files"])
            if f["on_error"] not in ON_ERROR_CHOICES:
                raise ProtocolError(f"JOB on_error {f['on_error']!r:.50}")
            return Job(
                f["job"], files, f["clip"], f["layout"], f["cache_dir"], f["on_error"],
                f["send_index"],
            )  # fmt: skip
        case wire.INDEX:
            videos = tuple(_video(entry) for entry in f["videos"])
            return Index(f["job"], f["file"], videos)
        case wire.INDEX_BATCH:
            return _index_batch(f, raw.arrays)
        case wire.UNIT:
            rows = tuple(Row(*_record(e, _ROW_TYPES, "UNIT row")) for e in f["rows"])
            slot = _slot(f["slot"], len(rows)) if f["slot"] is not None else None
            return Unit(f["job"], f["unit"], f["batch"], f["epoch"], rows, slot)
        case wire.ITEMS:
            return Items(f["job"], f["unit"], f["batch"], f["epoch"], _ints(f["items"], "items"))
        case wire.PULL:
            if f["count"] < 1 or f["pass"] < 0:
                raise ProtocolError(f"PULL of {f['count']} elements of pass {f['pass']}")
            return Pull(f["job"], f["unit"], f["batch"], f["epoch"], f["count"], f["pass"])
        case wire.DATA:
            samples = tuple(f["samples"])
            skipped = _skipped(f["skipped"], len(samples))
            return Data(f["job"], f["unit"], f["batch"], samples, raw.arrays, skipped)
        case wire.ERROR:
            return Error(**f)
        case wire.BYE:
            return Bye(f["reason"])
        case wire.SOURCE:
            if not all(isinstance(p, str) for p in f["sys_path"]):
                raise ProtocolError("SOURCE sys_path must be a list of str")
            return Source(
                f["job"], f["source"], f["args"], tuple(f["sys_path"]), f["worker"],
                f["workers"], f["seed"], f["epoch"], f["spec"], f["batched"],
            )  # fmt: skip
        case wire.SOURCE_INFO:
            checks = f["checks"]
            if len(checks) > MAX_CHECKS:
                raise ProtocolError(f"SOURCE_INFO with {len(checks)} checks")
            records = [_record(c, (int, bytes, bool), "SOURCE_INFO check") for c in checks]
            if any(len(digest) > MAX_DIGEST_BYTES for _i, digest, _r in records):
                raise ProtocolError("SOURCE_INFO check digest too long")
            return SourceInfo(
                f["job"], f["kind"], f["length"], f["spec"], f["epoch"],
                tuple(ItemCheck(*record) for record in records),
            )  # fmt: skip
        case wire.CHECK:
            return Check(f["job"], f["epoch"])
        case wire.PING:
            return Ping()
    raise ProtocolError(f"unknown message kind {raw.kind!r}")  # unreachable: wire checks


_ROW_TYPES: tuple[type | tuple[type, ...], ...] = (
    int, int, int, int, (float, int), (float, int), bool, int,
)  # fmt: skip


def _record(entry: Any, types: Sequence[type | tuple[type, ...]], what: str) -> list[Any]:
    """``entry`` if it is a list of len(types) values of those types (bool is no int)."""
    if not isinstance(entry, list) or len(entry) != len(types):
        raise ProtocolError(f"{what} must be a list of {len(types)} values: {entry!r:.200}")
    for value, expected in zip(entry, types, strict=True):
        if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
            raise ProtocolError(f"bad {what} {entry!r:.200}")
    return entry


def _video(entry: Any) -> VideoEntry:
    name, frames, label = _record(entry, (str, int, int), "INDEX video")
    if frames < 1:
        raise ProtocolError(f"INDEX video {name!r} has {frames} frames")
    return VideoEntry(name, frames, label)


def _index_batch(f: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> IndexBatch:
    """An INDEX_BATCH, checked column by column (no Python object per video but the names)."""
    files, counts = _ints(f["files"], "INDEX_BATCH files"), _ints(f["counts"], "INDEX_BATCH counts")
    names = f["names"]
    if len(files) != len(counts) or len(set(files)) != len(files) or min(counts, default=1) < 1:
        raise ProtocolError("INDEX_BATCH needs distinct files with >= 1 video each, one count each")
    if set(arrays) != {"frames", "labels"}:
        raise ProtocolError(f"INDEX_BATCH arrays must be frames and labels, got {sorted(arrays)}")
    frames, labels = arrays["frames"], arrays["labels"]
    total = sum(counts)
    for name, array in (("frames", frames), ("labels", labels)):
        if array.dtype != np.int64 or array.shape != (total,):
            raise ProtocolError(
                f"INDEX_BATCH {name} must be int64 [{total}], got {array.dtype} {array.shape}"
            )
    if len(names) != total or (names and set(map(type, names)) != {bytes}):  # C speed
        raise ProtocolError(f"INDEX_BATCH names must be {total} byte strings")
    if total and int(frames.min()) < 1:
        raise ProtocolError("INDEX_BATCH lists a video with fewer than 1 frame")
    return IndexBatch(f["job"], files, counts, tuple(names), frames, labels)


def _ints(values: list[Any], what: str) -> tuple[int, ...]:
    if not all(type(v) is int for v in values):
        raise ProtocolError(f"{what} must be a list of ints: {values!r:.200}")
    return tuple(values)


def _skipped(entries: list[Any], rows: int) -> tuple[SkippedRow, ...]:
    """A DATA's skipped rows: at most one per sample, each at a position of the samples."""
    skipped = tuple(SkippedRow(*_record(e, (int, int, str), "DATA skipped row")) for e in entries)
    positions = {row.position for row in skipped}
    if len(positions) != len(skipped) or not all(0 <= p < rows for p in positions):
        raise ProtocolError(f"DATA skipped rows {entries!r:.200} do not fit {rows} samples")
    if any(row.frame < 0 or len(row.reason) > MAX_SKIP_REASON for row in skipped):
        raise ProtocolError(f"bad DATA skipped row in {entries!r:.200}")
    return skipped


def _slot(entry: Any, rows: int) -> SlotRef:
    pid, fd, batch_rows, positions = _record(entry, (int, int, int, list), "UNIT slot")
    checked = _ints(positions, "slot positions")
    if min(pid, fd, batch_rows) < 0 or len(checked) != rows or len(set(checked)) != rows:
        raise ProtocolError(f"bad UNIT slot {entry!r:.200} for {rows} rows")
    if not all(0 <= p < batch_rows for p in checked):
        raise ProtocolError(f"slot positions {checked!r:.200} do not fit {batch_rows} rows")
    return SlotRef(pid, fd, batch_rows, checked)
