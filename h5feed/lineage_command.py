"""``h5feed lineage FILE --step N [--show ROW]``: the rows of one training step of a lineage
record (``lineage=FILE``, see :mod:`h5feed.consumer.lineage`), and one row's clip made again.

Importing this module is cheap (argparse only); the command imports what it needs when it
runs. Guarantees:

1. ``--step N`` prints every row of step N as the record holds them (a last line cut by a
   machine crash is left out); a step the record does not hold is an error (exit 1) naming
   the steps it holds.
2. ``--show ROW`` makes that row's clip again from the dataset's arguments in
   ``FILE.dataset.json`` with the workers' own code (:class:`h5feed.producer.clips.ClipMaker`:
   the same frames read, decoded, resized, cropped and flipped), so the PNG holds exactly the
   pixels of the batch's clip: its frames left to right. With ``transform=``, the clip the
   transform was given (its input); a ``source=`` record has no clip to show (exit 1).
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
it holds; a last line cut by a machine crash is left out."""

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
    parser.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    from h5feed.consumer import lineage

    rows = lineage.rows_of_step(args.file, args.step)
    print(table(args.step, rows))
    if args.show is None:
        return 0
    if args.show >= len(rows):
        raise ValueError(f"step {args.step} has {len(rows)} rows (0..{len(rows) - 1})")
    out = args.out or f"lineage-step-{args.step}-row-{args.show}.png"
    write_strip(lineage.read_header(args.file), rows[args.show], out)
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


def clip_of(head: dict[str, Any], row: dict[str, Any]) -> Any:
    """The clip of ``row`` (uint8 [T, H, W, 3] RGB), made as a local worker makes it from
    the dataset's arguments ``head`` (a transform left out: its input)."""
    import dataclasses

    from h5feed.common import layouts
    from h5feed.common.config import ClipSpec
    from h5feed.common.message_records import Row
    from h5feed.producer import confine
    from h5feed.producer.clips import ClipMaker
    from h5feed.producer.code_policy import CodePolicy

    if head.get("kind") != "hdf5":
        raise ValueError("a source= record has no clip to show (its rows are your items)")
    spec = dataclasses.replace(ClipSpec.from_wire(head["clip"]), transform=None)
    spec = dataclasses.replace(spec, transform_args=None)
    maker = ClipMaker(spec, layouts.from_wire(head["layout"]), CodePolicy(), head["data_root"])
    try:
        # Under the data root, as a worker resolves a JOB's path (confined there).
        videos = maker.open_and_index(0, confine.job_path(row["file"], head["data_root"]), None)
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


def write_strip(head: dict[str, Any], row: dict[str, Any], out: str) -> None:
    """Write ``row``'s clip to ``out`` as one PNG, its frames left to right."""
    import cv2
    import numpy as np

    clip = clip_of(head, row)
    strip = np.concatenate(list(clip), axis=1)  # [H, T * W, 3] RGB
    if not cv2.imwrite(os.fspath(out), strip[:, :, ::-1]):  # OpenCV writes BGR
        raise OSError(f"cannot write {out}")
