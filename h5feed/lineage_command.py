"""``h5feed lineage FILE --step N [--show ROW]``: the rows of one training step of a lineage
record (``lineage=FILE``, see :mod:`h5feed.consumer.position.lineage`), and one row's clip made
again.

Importing this module is cheap (argparse only); the command imports what it needs when it
runs. Guarantees:

1. ``--step N`` prints every row of step N as the record holds them (a last line cut by a
   machine crash is left out); a step the record does not hold is an error (exit 1) naming
   the steps it holds.
2. ``--show ROW`` makes that row's clip again from the dataset's arguments in
   ``FILE.dataset.json`` with the workers' own code
   (:class:`h5feed.producer.worker.clips.ClipMaker`:
   the same frames read, decoded, resized, cropped and flipped), so the PNG holds exactly the
   pixels of the batch's clip: its frames left to right. With ``transform=``, the clip the
   transform was given (its input); a ``source=`` record has no clip to show (exit 1).
3. A record is a file, and what it claims never costs what it claims: ``--show`` makes a
   clip under the caps of ``h5feed produce`` (``max_clip_pixels``: 16 frames of 4K UHD;
   ``max_frame_pixels``; ``max_chunk_bytes``: :mod:`h5feed.producer.files.read_limits`), so a
   header asking for clips of 40000x40000 is refused before anything is allocated; it
   reads only a file the header's ``files`` lists, confined to the data root
   (``--data-root``, else the header's: :func:`h5feed.producer.files.confine.job_path`; a path
   resolving outside it is refused); lines, steps and the header are read within the
   bounds of :mod:`h5feed.consumer.position.lineage`. A malformed record is an error line naming
   what is wrong (exit 1), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

from h5feed.common.cli_args import Subcommand, non_negative_int

DESCRIPTION = """\
Show what one training step trained, from a lineage record: a dataset made with
lineage=FILE writes one NDJSON line per row of every batch the trainer takes (its step,
epoch, batch, sample, file, video, clip start, flip, crop offsets), and FILE.dataset.json
the dataset's arguments. A step is the trainer's optimizer step: the count of the batches
it took before, across epochs (batch b of epoch e is step e * batches_per_epoch + b).

--show ROW makes that row's clip again, with the workers' own code, from the dataset's
files, and writes its frames left to right as one PNG: exactly the pixels the batch held
(before a transform=, if any).

Guarantees: a step the record does not hold is an error (exit status 1) naming the steps
it holds; a last line cut by a machine crash is left out. A record is read within bounds
(64 KiB a line): --show reads only a file the header lists, under --data-root (else the
header's data root), and makes its clip under the caps of `h5feed produce` (16 frames of
4K UHD); a malformed record is an error (exit status 1)."""

EPILOG = """\
examples:
  h5feed lineage runs/lineage.ndjson --step 1200
  h5feed lineage runs/lineage.ndjson --step 1200 --show 3 --out clip.png
  python -c "import pandas; print(pandas.read_json('runs/lineage.ndjson', lines=True))\""""

#: Columns the table leaves out: the step's own, said once in its title.
_TITLE_COLUMNS = ("step", "epoch", "batch")


def register(subcommand: Subcommand) -> None:
    """Add ``lineage`` to the ``h5feed`` command."""
    parser = subcommand(
        "lineage",
        "show the rows a training step trained (a lineage=FILE record), or one row's clip",
        DESCRIPTION,
        EPILOG,
    )
    parser.add_argument("file", metavar="FILE", help="the record (the dataset's lineage=)")
    parser.add_argument(
        "--step", type=non_negative_int, required=True, metavar="N", help="the step to show"
    )
    parser.add_argument(
        "--show", type=non_negative_int, default=None, metavar="ROW",
        help="make the clip of this row of the step again and write it as a PNG strip",
    )  # fmt: skip
    parser.add_argument(
        "--out", default=None, metavar="PNG",
        help="where --show writes (default: lineage-step-N-row-ROW.png here)",
    )  # fmt: skip
    parser.add_argument(
        "--data-root", default=None, metavar="DIR",
        help="--show reads the row's file only under DIR (default: the record's data root)",
    )  # fmt: skip
    parser.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    from h5feed.consumer.position import lineage

    rows = lineage.rows_of_step(args.file, args.step)
    print(table(args.step, rows))
    if args.show is None:
        return 0
    if args.show >= len(rows):
        raise ValueError(f"step {args.step} has {len(rows)} rows (0..{len(rows) - 1})")
    out = args.out or f"lineage-step-{args.step}-row-{args.show}.png"
    head = lineage.read_header(args.file)
    try:
        write_strip(head, rows[args.show], out, args.data_root)
    except (KeyError, TypeError, IndexError) as exc:  # a field missing or of another type
        raise ValueError(f"{args.file}: not a lineage record h5feed wrote ({exc!r})") from None
    print(f"row {args.show}: its clip written to {out}")
    return 0


def table(step: int, rows: Sequence[dict[str, Any]]) -> str:
    """The rows of ``step`` as an aligned text table under a title line."""
    first = rows[0]
    title = f"step {step}: epoch {first['epoch']}, batch {first['batch']}, {len(rows)} rows"
    columns = [c for c in first if c not in _TITLE_COLUMNS]
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]
    lines = [title, "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in cells]
    return "\n".join(line.rstrip() for line in lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, list):
        return "[" + ", ".join(_cell(v) for v in value) + "]"
    return "-" if value is None else json.dumps(value) if isinstance(value, bool) else str(value)


def clip_of(head: dict[str, Any], row: dict[str, Any], data_root: str | None = None) -> Any:
    """The clip of ``row`` (uint8 [T, H, W, 3] RGB), made as a local worker makes it from
    the dataset's arguments ``head`` (a transform left out: its input), under the caps of
    ``h5feed produce``, from a file ``head`` lists, under ``data_root`` (None: the header's
    data root): module docstring, 3."""
    import dataclasses

    from h5feed.common import layouts
    from h5feed.common.config import ClipSpec
    from h5feed.common.protocol.message_records import Row
    from h5feed.producer.files.read_limits import (
        DEFAULT_MAX_CHUNK_BYTES,
        PRODUCER_MAX_CLIP_PIXELS,
        PRODUCER_MAX_FRAME_PIXELS,
        ProducerLimits,
    )
    from h5feed.producer.worker.clips import ClipMaker
    from h5feed.producer.worker.code_policy import CodePolicy

    if head.get("kind") != "hdf5":
        raise ValueError("a source= record has no clip to show (its rows are your items)")
    root = data_root if data_root is not None else head["data_root"]
    path = _listed_file(head, row["file"], root)
    spec = dataclasses.replace(ClipSpec.from_wire(head["clip"]), transform=None)
    spec = dataclasses.replace(spec, transform_args=None)
    caps = ProducerLimits(
        PRODUCER_MAX_FRAME_PIXELS, PRODUCER_MAX_CLIP_PIXELS, DEFAULT_MAX_CHUNK_BYTES
    )  # a record is a file: no more than a producer makes for any peer
    maker = ClipMaker(spec, layouts.from_wire(head["layout"]), CodePolicy(), root, limits=caps)
    try:
        videos = maker.open_and_index(0, path, None)
        names = [entry[0] for entry in videos]
        if row["video"] not in names:
            raise ValueError(f"{row['file']} has no video {row['video']!r} any more")
        uy, ux = row.get("crop_u", (0.0, 0.0))
        planned = Row(row["sample"], 0, names.index(row["video"]), row["start"], uy, ux,
                      bool(row["flip"]), 0)  # fmt: skip
        clips, _skipped = maker.produce([planned])
    finally:
        maker.close()
    return clips[0]


def _listed_file(head: dict[str, Any], file: Any, root: str | None) -> str:
    """The path to open for the row's ``file``: one the header lists, resolved under
    ``root`` as a worker resolves a JOB's path (confined there); ValueError otherwise."""
    from h5feed.producer.files import confine

    files = head["files"]
    if not isinstance(files, list) or not isinstance(file, str) or file not in files:
        raise ValueError(f"the row's file {file!r:.300} is not among the files the header lists")
    if root is None:
        return file
    if not isinstance(root, str):
        raise ValueError(f"the header's data_root {root!r:.100} is not a path")
    if os.path.isabs(file):  # a record without a root: its files must lie under this one
        resolved = os.path.realpath(file)
        if os.path.commonpath([os.path.realpath(root), resolved]) != os.path.realpath(root):
            raise ValueError(f"{file!r:.300} is outside the data root {root!r}: refused")
        return resolved
    return confine.job_path(file, root)


def write_strip(
    head: dict[str, Any], row: dict[str, Any], out: str, data_root: str | None = None
) -> None:
    """Write ``row``'s clip to ``out`` as one PNG, its frames left to right."""
    import cv2
    import numpy as np

    clip = clip_of(head, row, data_root)
    strip = np.concatenate(list(clip), axis=1)  # [H, T * W, 3] RGB
    if not cv2.imwrite(os.fspath(out), strip[:, :, ::-1]):  # OpenCV writes BGR
        raise OSError(f"cannot write {out}")
