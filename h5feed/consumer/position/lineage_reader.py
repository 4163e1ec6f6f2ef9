"""Reading a lineage record (h5feed.consumer.position.lineage): its rows, one step's rows, its
header.

A record is a file anyone may have written, so what it claims costs at most a bound:

1. A line is read up to :data:`MAX_LINE_BYTES` + 1 bytes (:func:`lines`): a longer one is
   no row (ValueError naming it; a resume keeps the rows before it), never read whole (a
   record of one 1 GiB line cost 2 GiB).
2. One step's rows are at most :data:`MAX_STEP_BYTES`; the header (``PATH.dataset.json``)
   is a regular file of at most :data:`MAX_HEADER_BYTES` (a FIFO is refused, never waited
   on: h5feed.common.trust.regular_files).
3. JSON that is malformed, not an object, or nested too deeply for the parser is a
   ValueError naming the file and line, never a RecursionError.
4. A last line cut by a machine crash is left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, BinaryIO

from h5feed.common.trust.regular_files import read_regular

FORMAT_VERSION = 1
#: Beside ``PATH``: the dataset's arguments (one JSON object).
HEADER_SUFFIX = ".dataset.json"
#: The first keys of every row, in this order (so a resume reads them without parsing JSON).
ROW_START = re.compile(rb'\{"step":(\d+),"epoch":(\d+),"batch":(\d+)[,}]')
#: The longest line a record may hold: a row is a few hundred bytes and its file and video
#: names (a path is at most 4,096 bytes); a longer line is no row of ours.
MAX_LINE_BYTES = 64 << 10
#: The most bytes of rows one step may hold (a batch of 16,384 rows of 1 KiB).
MAX_STEP_BYTES = 16 << 20
#: The largest header (``PATH.dataset.json``): its file list is most of it.
MAX_HEADER_BYTES = 1 << 20


def header_path(path: str) -> str:
    """Where the dataset's arguments of the record at ``path`` are."""
    return path + HEADER_SUFFIX


def lines(handle: BinaryIO) -> Iterator[bytes]:
    """The lines of ``handle``, each read up to :data:`MAX_LINE_BYTES` + 1 bytes: a longer
    one comes out cut (no ``\\n`` at its end), so it is never read whole."""
    while line := handle.readline(MAX_LINE_BYTES + 1):
        yield line


def too_long(line: bytes) -> bool:
    return len(line) > MAX_LINE_BYTES


def read_rows(path: str) -> list[dict[str, Any]]:
    """Every complete row of the record at ``path``, in order (a last line cut by a
    machine crash is left out); ValueError for a line longer than :data:`MAX_LINE_BYTES`."""
    rows = []
    with open(path, "rb") as handle:
        for number, line in enumerate(lines(handle), 1):
            _check_length(path, number, line)
            if not line.endswith(b"\n"):
                break
            rows.append(_row(path, number, line))
    return rows


def _check_length(path: str, number: int, line: bytes) -> None:
    if too_long(line):
        raise ValueError(
            f"line {number} of {path} is longer than {MAX_LINE_BYTES} bytes: not a lineage "
            "row (refused before reading the rest of it)"
        )


def _row(path: str, number: int, line: bytes) -> dict[str, Any]:
    """Line ``number`` of ``path`` as a row; ValueError when it is not a JSON object."""
    row = _json(line, f"line {number} of {path}")
    if not isinstance(row, dict):
        raise ValueError(f"line {number} of {path} is not a JSON object: not a lineage row")
    return row


def _json(text: bytes, what: str) -> Any:
    """``text`` parsed; ValueError naming ``what`` when it is not JSON, or nested too deeply
    for the parser (a RecursionError: 1 MiB of ``[`` is no record)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply to be a lineage record") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{what} is not JSON: {exc}") from None


def rows_of_step(path: str, step: int) -> list[dict[str, Any]]:
    """The rows of ``step`` in the record at ``path`` (rows are in step order: the scan
    stops past it); ValueError naming the steps the record holds when it has none."""
    found: list[dict[str, Any]] = []
    first = last = None
    size = 0
    with open(path, "rb") as handle:
        for number, line in enumerate(lines(handle), 1):
            _check_length(path, number, line)
            match = ROW_START.match(line)
            if not line.endswith(b"\n") or match is None:
                break
            at = int(match.group(1))
            first = at if first is None else first
            last = at
            if at == step:
                size += len(line)
                if size > MAX_STEP_BYTES:
                    raise ValueError(
                        f"step {step} of {path} holds more than {MAX_STEP_BYTES} bytes of "
                        "rows: not a lineage record's step"
                    )
                found.append(_row(path, number, line))
            elif at > step and found:
                break
    if not found:
        held = "no step" if first is None else f"steps {first}..{last}"
        raise ValueError(f"step {step} is not in the lineage record {path} (it holds {held})")
    return found


def read_header(path: str) -> dict[str, Any]:
    """The dataset's arguments of the record at ``path`` (a regular file of at most
    :data:`MAX_HEADER_BYTES`: ValueError for another file or a longer one)."""
    where = header_path(path)
    head = _json(read_regular(where, MAX_HEADER_BYTES), where)
    if not isinstance(head, dict) or head.get("h5feed_lineage") != FORMAT_VERSION:
        raise ValueError(f"{header_path(path)} is not a lineage header of format {FORMAT_VERSION}")
    return head
