"""The message types of a job: one frozen dataclass per kind (JOB, INDEX, INDEX_BATCH, UNIT,
SOURCE, SOURCE_INFO, ITEMS, PULL, CHECK, DATA, ERROR), and every kind's wire schema, derived.

Each message's fields are written once, here (the connection's own messages, HELLO, BYE,
PING, ATTACH and ATTACHED, in :mod:`h5feed.common.protocol.control_types`):
:mod:`h5feed.common.protocol.message_schema` derives from their annotations what the header
holds (``wire.SCHEMAS``, checked by ``wire`` on both sides) and how
:func:`h5feed.common.protocol.messages.parse` builds the message from it, every nested value
checked before anything trusts it: a UNIT row has 8 fields of fixed types, an INDEX video 3,
a slot reference 4; bounds ride on the annotations (``Min``, ``MaxLen``, ``OneOf``) and a
rule across fields is the message's ``validate()``. The small records inside them
(:class:`~h5feed.common.protocol.message_records.Row`, ``SlotRef``, ``FileRef``,
``VideoEntry``, ...) and the bounds they share are in
:mod:`h5feed.common.protocol.message_records`.

This module imports neither ``wire`` nor ``messages``: they import it (``wire`` for the
schemas it checks, ``messages`` for the codec), so the layering runs one way. Code imports
the classes from :mod:`h5feed.common.protocol.messages`, which re-exports them.
"""

from __future__ import annotations

import dataclasses
import itertools
import traceback
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Final

import numpy as np

from h5feed.common.errors import DataError, FileReadError, ProtocolError
from h5feed.common.protocol.control_types import (
    MAX_PORT,
    REFUSED,
    TRAINER_NAME,
    Attach,
    Attached,
    Bye,
    Hello,
    Ping,
)
from h5feed.common.protocol.message_records import (
    MAX_BUSY_S,
    MAX_CHECKS,
    MAX_CODE_IDENTITIES,
    MAX_JOB_ID,
    MAX_MESSAGE,
    MAX_NAME,
    MAX_PATH,
    MAX_SYS_PATH,
    MAX_TRACEBACK,
    ON_ERROR_CHOICES,
    CodeIdentity,
    FileRef,
    ItemCheck,
    Row,
    SkippedRow,
    SlotRef,
    StorageReads,
    VideoEntry,
    cut,
)
from h5feed.common.protocol.message_schema import (
    EachLen,
    Label,
    MaxLen,
    Min,
    Omissible,
    OneOf,
    Schema,
    Since,
    Within,
)
from h5feed.common.protocol.versions import OLDEST_VERSION, PROTOCOL_VERSION

# The connection's own messages (control_types) are listed with a job's: their names were
# imported from here before they had a module of their own, and still are.
__all__ = [
    "CLASSES", "MAX_PORT", "REFUSED", "SCHEMAS", "SCHEMAS_BY_VERSION", "TRAINER_NAME",
    "Attach", "Attached", "Bye", "Check", "Data", "Error", "Hello", "Index", "IndexBatch",
    "Items", "Job", "JobId", "Ping", "Pull", "Source", "SourceInfo", "Unit", "cut",
]  # fmt: skip

#: A job id, as every message of a job names it.
JobId = Annotated[str, MaxLen(MAX_JOB_ID)]


@dataclasses.dataclass(frozen=True, slots=True)
class Job:
    """The files a worker owns and how to cut clips. A JOB of the job the worker holds adds
    its files to it: a job of many files comes as several JOBs (at most 1,024 files each)."""

    KIND: ClassVar[str] = "job"
    job: JobId
    files: tuple[FileRef, ...]
    clip: Mapping[str, Any]  # ClipSpec.to_wire(); ClipSpec.from_wire validates it
    layout: Mapping[str, Any]  # LayoutSpec.to_wire(): how the files store videos
    cache_dir: Annotated[str | None, MaxLen(MAX_PATH)]
    #: "raise": a bad frame (FrameError) is an ERROR; "skip": its row is zero-filled and
    #: listed in the DATA's ``skipped``. Errors of whole files are ERRORs either way.
    on_error: Annotated[str, OneOf(ON_ERROR_CHOICES)] = "raise"
    #: False when the trainer already knows these files' index (the same files, unchanged,
    #: indexed before by local workers): the worker opens and checks them as usual but
    #: sends no INDEX for them, only an ERROR for a file it cannot read.
    send_index: bool = True
    #: What a clip is to the trainer: a worker of another clip semantics refuses the job.
    clip_semantics: Annotated[int, Since(6), Min(1)] = 1
    #: The transform's module as the trainer has it: a worker running another copy refuses.
    code: Annotated[
        tuple[CodeIdentity, ...], Since(6, advisory=True), MaxLen(MAX_CODE_IDENTITIES)
    ] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Index:
    KIND: ClassVar[str] = "index"
    job: JobId
    file: int
    videos: tuple[VideoEntry, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class IndexBatch:
    """The videos of several files: ``files[i]`` has ``counts[i]`` (>= 1) videos, listed file
    after file in ``names`` (UTF-8 bytes: the trainer keeps them as they arrive), ``frames``
    (int64 [V], each >= 1) and ``labels`` (int64 [V]).
    Columns, so a 10,000-file handshake decodes without a Python object per video."""

    KIND: ClassVar[str] = "index_batch"
    job: JobId
    files: tuple[int, ...]
    counts: tuple[int, ...]
    names: Annotated[tuple[bytes, ...], EachLen(MAX_NAME)]
    frames: np.ndarray
    labels: np.ndarray

    def validate(self) -> None:
        """The columns agree (checked column by column: no Python object per video)."""
        files, counts = self.files, self.counts
        if len(files) != len(counts) or len(set(files)) != len(files) or min(counts, default=1) < 1:
            raise ProtocolError(
                "INDEX_BATCH needs distinct files with >= 1 video each, one count each"
            )
        total = sum(counts)
        for name, array in (("frames", self.frames), ("labels", self.labels)):
            if array.dtype != np.int64 or array.shape != (total,):
                raise ProtocolError(
                    f"INDEX_BATCH {name} must be int64 [{total}], got {array.dtype} {array.shape}"
                )
        if len(self.names) != total:
            raise ProtocolError(f"INDEX_BATCH names must be {total} byte strings")
        if total and int(self.frames.min()) < 1:
            raise ProtocolError("INDEX_BATCH lists a video with fewer than 1 frame")

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


@dataclasses.dataclass(frozen=True, slots=True)
class Unit:
    KIND: ClassVar[str] = "unit"
    job: JobId
    unit: int
    batch: int  # the batch's sequence number in the iteration
    epoch: int
    rows: tuple[Row, ...]
    slot: SlotRef | None = None

    def validate(self) -> None:
        """The slot, if any, holds exactly these rows, each at its own position in it."""
        slot, rows = self.slot, len(self.rows)
        if slot is None:
            return
        if len(slot.positions) != rows or len(set(slot.positions)) != rows:
            raise ProtocolError(f"bad UNIT slot {slot!r:.200} for {rows} rows")
        if not all(0 <= p < slot.batch_rows for p in slot.positions):
            raise ProtocolError(
                f"slot positions {slot.positions!r:.200} do not fit {slot.batch_rows} rows"
            )


@dataclasses.dataclass(frozen=True, slots=True)
class Items:
    """A map-style source's element indices, or a keras source's one batch index."""

    KIND: ClassVar[str] = "items"
    job: JobId
    unit: int
    batch: int
    epoch: int
    items: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Pull:
    """A generator source: the next ``count`` elements of the worker's pass ``pass_``."""

    KIND: ClassVar[str] = "pull"
    job: JobId
    unit: int
    batch: int
    epoch: int
    count: int
    pass_: int  # "pass" on the wire (a Python keyword)

    def validate(self) -> None:
        if self.count < 1 or self.pass_ < 0:
            raise ProtocolError(f"PULL of {self.count} elements of pass {self.pass_}")


@dataclasses.dataclass(frozen=True, slots=True)
class Data:
    """A unit's answer: ``samples`` (HDF5: sample ids; map: items; keras: the batch index;
    generator: element ordinals) and the arrays (none when written to a shared slot).
    ``skipped``: the rows whose clip is zeros because a frame was bad (HDF5, ``on_error=
    "skip"``), at distinct positions of ``samples`` (checked on decode)."""

    KIND: ClassVar[str] = "data"
    job: JobId
    unit: int
    batch: int
    samples: tuple[Any, ...]
    arrays: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)
    skipped: Annotated[tuple[SkippedRow, ...], Label("skipped row")] = ()
    #: Seconds the worker spent making this part (reading, decoding, writing it), for the
    #: fleet's capacity (h5feed.consumer.telemetry.sizing); 0 from a version-5 worker.
    busy_s: Annotated[float, Since(6, advisory=True), Within(0.0, MAX_BUSY_S)] = 0.0
    #: What its reads of object storage cost (files read from URLs only), else None: absent
    #: from the header. Omissible, so a DATA without it (an earlier release's worker) decodes
    #: to None; a worker sends it only for a job of URLs, which an earlier release's trainer
    #: never sends, so that trainer never meets the field it does not know.
    storage: Annotated[StorageReads | None, Since(6, advisory=True), Omissible()] = None

    def validate(self) -> None:
        """At most one skipped row per sample, each at a position of the samples."""
        positions = {row.position for row in self.skipped}
        rows = len(self.samples)
        if len(positions) != len(self.skipped) or not all(0 <= p < rows for p in positions):
            raise ProtocolError(
                f"DATA skipped rows {list(self.skipped)!r:.200} do not fit {rows} samples"
            )


@dataclasses.dataclass(frozen=True, slots=True)
class Error:
    KIND: ClassVar[str] = "error"
    job: JobId
    unit: int | None
    type: Annotated[str, MaxLen(MAX_NAME)]
    message: Annotated[str, MaxLen(MAX_MESSAGE)]
    traceback: Annotated[str, MaxLen(MAX_TRACEBACK)]
    file: Annotated[str | None, MaxLen(MAX_PATH)] = None
    video: Annotated[str | None, MaxLen(MAX_NAME)] = None
    frame: int | None = None
    #: A file that cannot be read (``FileReadError``): its number in the JOB, so the trainer
    #: knows which file, whatever path the worker resolved it to.
    file_number: int | None = None

    @classmethod
    def of(cls, job: str, unit: int | None, exc: BaseException, file: str | None = None) -> Error:
        """The ERROR reporting ``exc``; a :class:`DataError` names its file, video, frame,
        a :class:`FileReadError` also the file's number. Each text is cut to its field's
        bound here, at the sender, and says so (a peer's longer text is refused on decode):
        the traceback keeps its end, where the exception is."""
        data_error = exc if isinstance(exc, DataError) else None
        number = exc.number if isinstance(exc, FileReadError) else None
        where = (data_error.file, data_error.video) if data_error else (file, None)
        return cls(
            job=job,
            unit=unit,
            type=cut(type(exc).__name__, MAX_NAME),
            message=cut(str(exc), MAX_MESSAGE),
            traceback=cut("".join(traceback.format_exception(exc)), MAX_TRACEBACK, tail=True),
            file=None if where[0] is None else cut(where[0], MAX_PATH),
            video=None if where[1] is None else cut(where[1], MAX_NAME),
            frame=data_error.frame if data_error else None,
            file_number=number,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    KIND: ClassVar[str] = "source"
    job: JobId
    source: Annotated[str, MaxLen(MAX_NAME)]  # "package.module:factory"
    args: Mapping[str, Any]
    sys_path: Annotated[tuple[str, ...], MaxLen(MAX_SYS_PATH), EachLen(MAX_PATH)]
    worker: int  # this worker's shard index among ``workers``
    workers: int
    seed: int
    epoch: int  # the iteration's first epoch
    spec: Mapping[str, Any] | None  # ElementSpec.to_wire(), or None: probe and tell
    batched: bool = False  # source_batched=True: a generator of batches, split into samples
    #: The factory's module as the trainer has it: a worker running another copy refuses.
    code: Annotated[
        tuple[CodeIdentity, ...], Since(6, advisory=True), MaxLen(MAX_CODE_IDENTITIES)
    ] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class SourceInfo:
    KIND: ClassVar[str] = "source_info"
    job: JobId
    kind: Annotated[str, MaxLen(16)]  # "map", "keras" or "generator"
    length: int | None
    spec: Mapping[str, Any]
    epoch: int = 0  # the epoch the checks were made at
    checks: Annotated[tuple[ItemCheck, ...], MaxLen(MAX_CHECKS)] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """Consumer -> worker of a source: answer SOURCE_INFO with the checks at the start of
    ``epoch`` (keras: after ``on_epoch_end`` up to it), before any batch of it is sent."""

    KIND: ClassVar[str] = "check"
    job: JobId
    epoch: int


#: The message classes, in the order of the kinds table (h5feed.common.protocol.messages).
CLASSES: Final = (
    Hello, Job, Index, IndexBatch, Unit, Source, SourceInfo, Items, Pull, Data, Error, Bye,
    Check, Ping, Attach, Attached,
)  # fmt: skip
#: Each kind's wire schema in each protocol version spoken, derived from its class (a class's
#: ``SINCE``: the version its kind came in; a field's ``Since``: the version it came in).
SCHEMAS_BY_VERSION: Final[Mapping[int, Mapping[str, Schema]]] = {
    version: {
        cls.KIND: Schema.of(cls, version)
        for cls in CLASSES
        if getattr(cls, "SINCE", OLDEST_VERSION) <= version
    }
    for version in range(OLDEST_VERSION, PROTOCOL_VERSION + 1)
}
#: Each kind's wire schema in the current version.
SCHEMAS: Final[Mapping[str, Schema]] = SCHEMAS_BY_VERSION[PROTOCOL_VERSION]
