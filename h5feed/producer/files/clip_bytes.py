"""Where a clip's bytes lie in its HDF5 file, so that object storage's read-ahead can fetch
exactly them (:mod:`h5feed.producer.files.read_ahead`) before h5py asks.

Two kinds of bytes: a dataset's rows as stored (a contiguous dataset's, or an unfiltered
chunked one's: CRCs, pixels, fixed-size blobs, a variable-length dataset's descriptors), and
what a variable-length element points at: its bytes live in a *global heap collection*
elsewhere in the file, which HDF5 reads whole. A descriptor (HDF5 file format, "Variable-length
data") is the element's length (4 bytes), the collection's address (the file's offset size)
and the object's index (4 bytes), little-endian; a collection starts with ``GCOL``, a version,
3 reserved bytes and its size (the file's length size).

Guarantees:

1. Nothing here does I/O but :meth:`DatasetBytes.of`, which asks HDF5 for a dataset's storage
   (its offset, or its chunks' addresses: metadata h5py reads for the dataset anyway), on the
   worker's own thread. The read-ahead threads only parse bytes already fetched (h5py is
   never called from them: its lock is held by a read waiting on them).
2. Everything read from the file is bounded and checked before it is used: a dataset with
   filters (compression: its stored bytes are not its rows), a chunk shape that does not hold
   whole rows, more than :data:`MAX_CHUNKS` chunks, or a size the file cannot hold gives
   None (no plan: the clip is read as without one); a descriptor or a collection header
   pointing outside the file, or a collection larger than the caller's bound, is ignored.
   A plan only ever names bytes inside the file: at worst, bytes fetched and not used.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import h5py
import numpy as np

__all__ = [
    "MAX_CHUNKS", "ClipBytes", "DatasetBytes", "collection_size", "heap_addresses", "merged",
    "parse_descriptors",
    "spans",
]  # fmt: skip

Range = tuple[int, int]
#: A dataset of more chunks than this is not planned (its chunks' addresses would cost more
#: than the reads they save).
MAX_CHUNKS = 4096
_GCOL = b"GCOL"
#: A dataset's rows fetched whole when they are at most this many bytes.
WHOLE_BYTES = 64 << 10
#: Collections this close are fetched as one range: a request saved for at most this many
#: bytes not asked for (often other videos' frames: HDF5 fills collections as it writes).
MERGE_GAP = 64 << 10


@dataclasses.dataclass(frozen=True)
class ClipBytes:
    """What to fetch ahead for one clip: ``ranges`` as they are, then ``descriptors`` (ranges
    of variable-length descriptors) parsed for the heap collections they point at, which are
    fetched too. ``sizes``: the file's (offset, length) sizes in bytes."""

    ranges: tuple[Range, ...]
    descriptors: tuple[Range, ...] = ()
    sizes: tuple[int, int] = (8, 8)


@dataclasses.dataclass(frozen=True)
class DatasetBytes:
    """Where a dataset's rows (its first axis) lie in the file: ``runs`` of
    (first row, rows, byte offset), in row order, each run's rows contiguous."""

    runs: tuple[tuple[int, int, int], ...]
    row_bytes: int
    sizes: tuple[int, int]
    count: int  # rows
    vlen: bool  # rows are variable-length descriptors
    dtype: np.dtype | None = None  # a fixed-size row's element, as stored (None: vlen)

    @classmethod
    def of(cls, dataset: h5py.Dataset, file_size: int) -> DatasetBytes | None:
        """The dataset's rows as stored, or None when they cannot be planned (guarantee 2)."""
        try:
            sizes = tuple(int(s) for s in dataset.file.id.get_create_plist().get_sizes())
            dcpl = dataset.id.get_create_plist()
            if dcpl.get_nfilters() or not dataset.shape:
                return None
            base = h5py.check_vlen_dtype(dataset.dtype)
            if base in (str, bytes):
                return None  # strings: not planned
            vlen = base is not None
            if vlen:
                element = 4 + sizes[0] + 4  # length, collection address, object index
            elif dataset.dtype.hasobject:
                return None  # strings, references: not planned
            else:
                element = int(dataset.id.get_type().get_size())
            row_bytes = element * math.prod(dataset.shape[1:])
            rows = int(dataset.shape[0])
            runs = _runs(dataset, rows)
        except (ValueError, TypeError, OSError, RuntimeError):
            return None
        if runs is None or row_bytes <= 0:
            return None
        if any(o < 0 or o + n * row_bytes > file_size for _f, n, o in runs):
            return None
        dtype = None if vlen else dataset.dtype
        return cls(runs, row_bytes, (sizes[0], sizes[1]), rows, vlen, dtype)

    def around(self, first: int, last: int) -> tuple[Range, ...]:
        """Every row's bytes when they are at most :data:`WHOLE_BYTES` (a video's descriptors
        or CRCs: fetched once, then held for its next clips), else rows ``first..last``'s."""
        if self.count * self.row_bytes <= WHOLE_BYTES:
            return self.rows(0, self.count - 1)
        return self.rows(first, last)

    def plan(self, first: int, last: int, others: Sequence[DatasetBytes] = ()) -> ClipBytes:
        """What a clip of rows ``first..last`` of this dataset reads (with the same rows'
        of ``others``, each :meth:`around`): its rows' bytes, and when they are descriptors,
        the heap collections they point at."""
        ranges = self.around(first, last) + tuple(r for o in others for r in o.around(first, last))
        descriptors = self.rows(first, last) if self.vlen else ()
        return ClipBytes(ranges, descriptors, self.sizes)

    def rows(self, first: int, last: int) -> tuple[Range, ...]:
        """The byte ranges of rows ``first..last`` (inclusive), in order."""
        found = []
        for run_first, count, offset in self.runs:
            lo, hi = max(first, run_first), min(last + 1, run_first + count)
            if lo < hi:
                start = offset + (lo - run_first) * self.row_bytes
                found.append((start, start + (hi - lo) * self.row_bytes))
        return tuple(found)


def _runs(dataset: h5py.Dataset, rows: int) -> tuple[tuple[int, int, int], ...] | None:
    offset = dataset.id.get_offset()
    if dataset.chunks is None:
        return None if offset is None else ((0, rows, int(offset)),)
    if tuple(dataset.chunks[1:]) != tuple(dataset.shape[1:]):
        return None  # a chunk does not hold whole rows
    count = int(dataset.id.get_num_chunks())
    if count > MAX_CHUNKS:
        return None
    step = int(dataset.chunks[0])
    runs = []
    for i in range(count):
        info = dataset.id.get_chunk_info(i)
        first = int(info.chunk_offset[0])
        runs.append((first, max(0, min(step, rows - first)), int(info.byte_offset)))
    return tuple(sorted(runs))


def parse_descriptors(descriptors: bytes, sizes: tuple[int, int]) -> list[tuple[int, int, int]]:
    """(length, collection address, object index) of each whole variable-length descriptor
    in ``descriptors``, in order (nothing checked: the callers bound the addresses)."""
    offset = sizes[0]
    width = 4 + offset + 4
    return [
        (
            int.from_bytes(descriptors[at : at + 4], "little"),
            int.from_bytes(descriptors[at + 4 : at + 4 + offset], "little"),
            int.from_bytes(descriptors[at + 4 + offset : at + width], "little"),
        )
        for at in range(0, len(descriptors) - width + 1, width)
    ]


def heap_addresses(descriptors: bytes, sizes: tuple[int, int], file_size: int) -> list[int]:
    """The distinct collection addresses, in order, of the non-empty variable-length elements
    whose descriptors are ``descriptors`` (guarantee 2: addresses outside the file dropped)."""
    found = {
        address
        for length, address, _index in parse_descriptors(descriptors, sizes)
        if length and 0 < address < file_size
    }
    return sorted(found)


def collection_size(header: bytes, sizes: tuple[int, int]) -> int | None:
    """A global heap collection's size from its first bytes, or None when they are not a
    collection's header."""
    if len(header) < 8 + sizes[1] or header[:4] != _GCOL or header[4] != 1:
        return None
    return int.from_bytes(header[8 : 8 + sizes[1]], "little")


def spans(addresses: Sequence[int], size_of: dict[int, int], guess: int) -> list[Range]:
    """The collections at ``addresses`` as few ranges: each [address, address + its size
    (known, else ``guess``)), merged with the previous one when at most :data:`MERGE_GAP`
    bytes apart (one request instead of two)."""
    return list(merged([(a, a + size_of.get(a, guess)) for a in addresses], MERGE_GAP))


def merged(ranges: Sequence[Range], gap: int) -> tuple[Range, ...]:
    """``ranges`` as few ranges, in order: those at most ``gap`` bytes apart (or
    overlapping) merged into one."""
    out: list[list[int]] = []
    for start, stop in sorted(ranges):
        if out and start <= out[-1][1] + gap:
            out[-1][1] = max(out[-1][1], stop)
        else:
            out.append([start, stop])
    return tuple((a, b) for a, b in out)
