"""The lineage record (``lineage=PATH``): which samples each training step trained.

Each batch the trainer takes from the stream appends one NDJSON line (a JSON object, then
``\\n``) per row to ``PATH``, made from the plan the consumer holds (never from what a worker
says), and ``PATH.dataset.json`` holds the dataset's arguments (files, clip and layout
options, plan options, fingerprint: for files on object storage each object's ETag and
version, h5feed.consumer.position.fingerprint) so that ``h5feed lineage PATH --show`` can make
a row's clip again. ``pandas.read_json(PATH, lines=True)`` reads it (tested), as DuckDB's
``read_json_auto`` reads NDJSON.

A *step* is the trainer's optimizer step: the 0-based count of the batches the trainer took
from the feed before this one, counted across epochs (and across a feed's iterations) from
the plan's start. With ``deterministic=True`` batch ``b`` of epoch ``e`` is step ``e * L + b``
(``L`` batches per epoch); a feed resumed from a state starts at the state's count (``e * L +
b`` plus the batches it lists as taken). A generator source (no ``L``) continues the count of
the record's kept rows.

Columns of every row: ``step``, ``epoch``, ``batch`` (its index in the epoch), ``row`` (the
row's place in the batch). HDF5 files add ``sample``, ``file``, ``video``, ``label``,
``start`` (the clip's first frame), ``flip``; with ``crop``: ``crop_top`` and ``crop_left``
(pixels in the resized frame; null without ``resize``, when the stored size decides) and
``crop_u`` (the plan's two draws in [0, 1) the offsets come from); with ``transform``:
``seed`` (the transform's per-sample seed); with ``on_error="skip"`` or
``shard_remainder="pad"``: ``valid`` (a padded row has ``sample`` -1 and empty ``file`` and
``video``). A map source adds ``sample`` (its item index); a keras source writes one row
per batch with ``item`` (its index) and ``rows``; a generator source one row per batch with
``rows``.

Guarantees:

1. A batch's rows are written by one ``write(2)`` on a file opened ``O_APPEND``, before
   ``next()`` returns the batch: a trainer killed at any moment (SIGKILL) leaves only
   complete lines. A machine crash may cut the last line; :func:`read_rows` and a resume
   drop it (NDJSON, not Parquet: a Parquet writer buffers a row group and its footer, and a
   crash loses all of them).
2. Rows are in step order, a step's rows together; each step of the run once: a batch
   peeked and given back (``keras_batches``, ``dataset()``'s signature peek) is taken from
   the stream once, so it is written once. Keras's ``steps_per_execution`` changes nothing:
   Keras trains the batches in the order it takes them.
3. A fresh feed (no ``resume``) starts the record empty; a resumed feed keeps exactly the
   rows of the batches its state says were taken and cuts the rest (batches prefetched but
   not trained, or trained after the state was saved, are trained again and written
   again), so no step appears twice. A resume on another number of shards
   (``h5feed.merge_states``) starts at its shard's first batch of the epoch's rest, whose
   batches are that epoch's last positions: its steps count ``e * L + b`` with the new
   ``L``, and the record keeps the rows before that position.
4. A file that exists and is not a lineage record is refused (ValueError), never truncated.
   A record belongs to one dataset: two datasets given one path (a training and a
   validation set) cut each other's rows; give each its own.
5. What a record claims costs at most a bound, whoever wrote it (the readers, and the
   bounds: :mod:`h5feed.consumer.position.lineage_reader`); a resume keeps the rows up to the first
   line longer than :data:`MAX_LINE_BYTES`, as up to a cut one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from h5feed.common.config import crop_offset
from h5feed.common.elements.batch_keys import VALID_KEY
from h5feed.common.system.atomic import atomic_file
from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.options import FeedConfig, HdfConfig
from h5feed.consumer.plan.epoch_plan import Cursor, PlannedBatch
from h5feed.consumer.position.lineage_reader import FORMAT_VERSION as FORMAT_VERSION
from h5feed.consumer.position.lineage_reader import HEADER_SUFFIX as HEADER_SUFFIX
from h5feed.consumer.position.lineage_reader import MAX_LINE_BYTES as MAX_LINE_BYTES
from h5feed.consumer.position.lineage_reader import ROW_START, lines, too_long
from h5feed.consumer.position.lineage_reader import header_path as header_path
from h5feed.consumer.position.lineage_reader import read_header as read_header
from h5feed.consumer.position.lineage_reader import read_rows as read_rows
from h5feed.consumer.position.lineage_reader import rows_of_step as rows_of_step

_JSON = json.JSONEncoder(separators=(",", ":"), default=repr)


def header(config: FeedConfig, fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """The dataset's arguments a record's rows are made from (``PATH.dataset.json``)."""
    plan = config.options.plan
    head: dict[str, Any] = {
        "h5feed_lineage": FORMAT_VERSION,
        "seed": plan.seed,
        "shuffle": plan.shuffle,
        "batch_size": plan.batch_size,
        "drop_remainder": plan.drop_remainder,
        "shard": list(plan.shard),
        "deterministic": plan.deterministic,
        "fingerprint": dict(fingerprint),
    }
    head.update(config.lineage_header())  # the input's own: files or source
    return head


@dataclasses.dataclass(frozen=True, slots=True)
class HdfColumns:
    """The optional columns of an HDF5 feed's rows, from its configuration: ``crop`` turns
    the plan's two draws into pixel offsets (None: no crop), ``seed`` with a transform,
    ``valid`` under ``on_error="skip"`` or ``shard_remainder="pad"``."""

    crop: Callable[[float, float], tuple[int | None, int | None]] | None = None
    seed: bool = False
    valid: bool = False

    @classmethod
    def of(cls, config: HdfConfig) -> HdfColumns:
        return cls(
            crop_pixels(config) if config.clip.crop is not None else None,
            seed=config.clip.transform is not None,
            valid=config.marks_valid,
        )


class LineageLog:
    """The record of one feed, shared by its iterations (see the module docstring).

    Made when the feed is made, so a bad path is an error before any worker starts: it
    writes the header and cuts the record to what ``taken`` keeps (nothing, for a fresh
    feed). :meth:`record` is called by the stream that takes each batch; thread-safe (two
    iterations of one feed at once write whole batches, interleaved)."""

    def __init__(
        self,
        path: str,
        config: FeedConfig,
        fingerprint: Mapping[str, Any],
        taken: Callable[[int, int], bool] | None = None,
        columns: HdfColumns | None = None,
    ) -> None:
        """``taken(epoch, batch)``: whether the resumed state took that batch (None: a fresh
        feed, nothing is kept); ``columns``: an HDF5 feed's optional columns (its input's
        ``lineage_columns()``; None: a source's rows, which have none)."""
        self.path = path
        existing = _first_line(path)
        if existing and not ROW_START.match(existing):
            raise ValueError(
                f"lineage={path!r} exists and is not an h5feed lineage record (its first line "
                "is not a row): refusing to overwrite it; give another path"
            )
        self._columns = columns if columns is not None else HdfColumns()
        with atomic_file(header_path(path)) as tmp, open(tmp, "w") as out:
            out.write(_JSON.encode(header(config, fingerprint)) + "\n")
        kept, self._next = _kept(path, taken) if taken is not None else (0, 0)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        weakref.finalize(self, os.close, self._fd)
        os.ftruncate(self._fd, kept)
        self._lock = threading.Lock()
        self._names = JsonNames()

    @property
    def next_step(self) -> int:
        """The step after the last one written (or kept)."""
        return self._next

    def record(self, step: int | None, batch: Batch, kind: SourceKind | None = None) -> None:
        """Append the rows of ``batch``, taken by the trainer as step ``step`` (None: the step
        after the last one written: a generator source's count). ``kind``: a source's."""
        with self._lock:
            step = self._next if step is None else step
            if batch.planned is not None:
                text = hdf5_lines(step, batch, batch.planned, self._columns, self._names)
            else:
                rows = rows_of(step, batch, self._columns, kind)
                text = "".join(_JSON.encode(row) + "\n" for row in rows)
            _write_all(self._fd, text.encode())
            self._next = step + 1


def _write_all(fd: int, data: bytes) -> None:
    """One ``write(2)`` (a regular file takes it whole); the loop only for a short write."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def rows_of(
    step: int, batch: Batch, columns: HdfColumns, kind: SourceKind | None = None
) -> Iterator[dict[str, Any]]:
    """The rows the record holds for a source's ``batch`` taken as step ``step`` (see the
    columns in the module docstring); an HDF5 batch's are written as text by
    :func:`hdf5_lines`."""
    head = {"step": step, "epoch": batch.epoch, "batch": batch.index}
    if batch.items is not None and kind is not SourceKind.KERAS:
        for row, item in enumerate(batch.items):
            yield {**head, "row": row, "sample": int(item)}
    elif batch.items is not None:
        yield {**head, "row": 0, "item": int(batch.items[0]), "rows": batch.rows}
    else:
        yield {**head, "row": 0, "rows": batch.rows}


class JsonNames:
    """File and video names as JSON strings, each encoded once (they recur every epoch);
    forgets them all past ``limit`` names (a bound on memory, not a cache policy)."""

    def __init__(self, limit: int = 1 << 17) -> None:
        self._known: dict[bytes, str] = {}
        self._limit = limit

    def __call__(self, name: bytes) -> str:
        text = self._known.get(name)
        if text is None:
            if len(self._known) >= self._limit:
                self._known.clear()
            text = self._known[name] = json.dumps(name.decode(errors="replace"))
        return text


def hdf5_lines(
    step: int, batch: Batch, planned: PlannedBatch, columns: HdfColumns, names: JsonNames
) -> str:
    """The NDJSON lines of an HDF5 ``batch`` taken as step ``step``, columns in the module
    docstring's order. Written as text (JSON's own encoder took 2.5 times as long): every
    value is an int, a bool, a finite float (``repr`` is JSON) or a name from ``names``."""
    arrays = batch.arrays
    files, videos = arrays["file"].tolist(), arrays["video"].tolist()
    labels = arrays["label"].tolist()
    valid = arrays[VALID_KEY].tolist() if columns.valid else None
    seeds = planned.seeds.tolist() if columns.seed else None
    crops = planned.crop_uniforms.tolist()
    head = f'{{"step":{step},"epoch":{batch.epoch},"batch":{batch.index},"row":'
    planned_rows = zip(
        planned.samples.tolist(), planned.starts.tolist(), planned.flips.tolist(), strict=True
    )
    lines = []
    for row, (sample, start, flip) in enumerate(planned_rows):
        line = (
            f'{head}{row},"sample":{sample},"file":{names(files[row])},'
            f'"video":{names(videos[row])},"label":{labels[row]},"start":{start},'
            f'"flip":{"true" if flip else "false"}'
        )
        if columns.crop is not None:
            uy, ux = crops[row]
            top, left = columns.crop(uy, ux)
            line += (
                f',"crop_top":{_json_int(top)},"crop_left":{_json_int(left)},'
                f'"crop_u":[{float(uy)!r},{float(ux)!r}]'
            )
        if seeds is not None:
            line += f',"seed":{seeds[row]}'
        if valid is not None:
            line += f',"valid":{"true" if valid[row] else "false"}'
        lines.append(line + "}\n")
    return "".join(lines)


def _json_int(value: int | None) -> str:
    return "null" if value is None else str(int(value))


def _first_line(path: str) -> bytes:
    """The first line of ``path`` (up to 4 KiB), b"" when it is absent or empty."""
    try:
        with open(path, "rb") as handle:
            return handle.readline(4096)
    except FileNotFoundError:
        return b""


def _kept(path: str, taken: Callable[[int, int], bool]) -> tuple[int, int]:
    """The bytes of ``path`` to keep (the rows of batches ``taken`` says were taken, up to
    the first that was not, or a cut or over-long line) and the step after the last kept
    row."""
    kept, next_step = 0, 0
    if not os.path.exists(path):
        return 0, 0
    with open(path, "rb") as handle:
        for line in lines(handle):
            match = ROW_START.match(line)
            if too_long(line) or not line.endswith(b"\n") or match is None:
                break
            step, epoch, batch = (int(g) for g in match.groups())
            if not taken(epoch, batch):
                break
            kept += len(line)
            next_step = step + 1
    return kept, next_step


def taken_by(cursor: Cursor, taken: frozenset[tuple[int, int]]) -> Callable[[int, int], bool]:
    """Whether a resume state at ``cursor`` with ``taken`` above it took batch (e, b)."""
    return lambda epoch, batch: (
        (epoch, batch) < (cursor.epoch, cursor.batch) or ((epoch, batch) in taken)
    )


def crop_pixels(config: HdfConfig) -> Callable[[float, float], tuple[int | None, int | None]]:
    """Pixel offsets (top, left) of the crop from the plan's two draws: from the clip spec
    (the workers' own :func:`crop_offset`), None each where no ``resize`` says the size."""
    clip = config.clip
    if clip.crop is None:
        raise ValueError("no crop")
    height, width = clip.crop
    mode = clip.crop_mode
    if clip.resize is None:
        return lambda uy, ux: (None, None)
    size_h, size_w = clip.resize
    return lambda uy, ux: (
        crop_offset(size_h, height, uy, mode),
        crop_offset(size_w, width, ux, mode),
    )
