"""Rows of a streamed file cut from its bytes (h5feed/producer/files/heap_reads.py), in process
over local files read through the range cache object storage's files use.

What it shows: for every layout's one-file dataset, a reader with heap reads gives the frames
and CRCs h5py gives, byte for byte, for clips in order, reversed and with repeats; on the
layouts whose frames are variable-length (groups, packs, flat, video) it reads them without
a call to h5py (h5py's lock held by another thread all along); anything it does not expect
(a forged descriptor, a collection too large or damaged, an object of another size) gives
no rows, and the reader then reads through h5py as before."""

from __future__ import annotations

import pathlib
import threading

import h5py
import numpy as np
import pytest
from h5py._objects import phil
from one_file_cases import CASES
from test_clip_bytes import open_cached

from h5feed.producer.files.clip_bytes import DatasetBytes
from h5feed.producer.files.heap_reads import HeapReads
from h5feed.producer.files.read_limits import DEFAULT_BOUNDS
from h5feed.producer.layouts import READERS
from h5feed.producer.layouts.base import LayoutReader

#: The layouts whose frames are variable-length rows: read from the bytes, no h5py call.
FROM_BYTES = ("groups", "packs", "flat", "video")
_LOCK_WAIT_S = 10.0


def _clips(frames: int) -> list[list[int]]:
    """Frame indices of a few clips of a video: in order, reversed, with repeats."""
    last = frames - 1
    return [list(range(frames)), [last, 0], [0, 0, min(1, last)], list(range(last, -1, -2))]


def _with_heap(path: str, layout: object) -> tuple[LayoutReader, LayoutReader]:
    """The reader of ``path`` as a URL's (through a range cache, with heap reads), and a
    plain one over the same file."""
    url = f"s3://bucket{path}"  # the same names (the video layout's come from the path)
    reader, cache, _fetcher = open_cached(path, layout, name=url)
    reader.heap = HeapReads(cache.read, cache.size, max_collection=cache.capacity // 4)
    plain = READERS[reader.spec.kind](h5py.File(path, "r"), path, reader.spec, None, DEFAULT_BOUNDS)
    return reader, plain


def _as_bytes(frames: list[np.ndarray]) -> list[bytes]:
    return [np.asarray(frame).tobytes() for frame in frames]


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_layouts_frames_and_crcs_are_the_bytes_h5py_reads(
    tmp_path: pathlib.Path, case: str
) -> None:
    path, layout = CASES[case](tmp_path)
    reader, plain = _with_heap(path, layout)
    try:
        for name, frames, _label in reader.index():
            for indices in _clips(frames):
                got = reader.read_frames(name, indices)
                assert _as_bytes(got) == _as_bytes(plain.read_frames(name, indices))
                assert reader.frame_crcs(name, indices) == plain.frame_crcs(name, indices)
        assert reader.heap is not None
        took_bytes = bool(reader.heap._collections)
        assert took_bytes == (case in FROM_BYTES), case
    finally:
        reader.close()
        plain.close()


@pytest.mark.parametrize("case", FROM_BYTES)
def test_a_clip_of_a_variable_length_layout_is_read_while_h5pys_lock_is_held_elsewhere(
    tmp_path: pathlib.Path, case: str
) -> None:
    """Once a video's datasets are open, its clips (and a pack's CRCs) ask h5py nothing: the
    read finishes while another thread holds h5py's lock (with an h5py read it would wait)."""
    path, layout = CASES[case](tmp_path)
    reader, plain = _with_heap(path, layout)
    try:
        name, frames, _label = reader.index()[0]
        indices = list(range(frames))
        reader.read_frames(name, indices)  # opens the video's datasets (h5py, once)
        reader.frame_crcs(name, indices)
        got = _read_while_h5py_is_held(reader, name, indices)
        assert _as_bytes(got[0]) == _as_bytes(plain.read_frames(name, indices))
        assert got[1] == plain.frame_crcs(name, indices)
    finally:
        reader.close()
        plain.close()


def _read_while_h5py_is_held(
    reader: LayoutReader, name: str, indices: list[int]
) -> tuple[list[np.ndarray], list[int] | None]:
    """``reader``'s frames and CRCs of ``indices``, read while another thread holds h5py's
    lock; AssertionError when the read waited for it."""
    held, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        with phil:
            held.set()
            release.wait(_LOCK_WAIT_S)

    holder = threading.Thread(target=hold_lock, daemon=True)
    holder.start()
    assert held.wait(_LOCK_WAIT_S)
    got: list[tuple[list[np.ndarray], list[int] | None]] = []

    def read() -> None:
        got.append((reader.read_frames(name, indices), reader.frame_crcs(name, indices)))

    reading = threading.Thread(target=read, daemon=True)
    reading.start()
    reading.join(_LOCK_WAIT_S / 2)
    finished = not reading.is_alive()
    release.set()
    holder.join(_LOCK_WAIT_S)
    reading.join(_LOCK_WAIT_S)
    assert finished, "the read waited for h5py's lock"
    return got[0]


def _one_vlen_file(path: pathlib.Path) -> tuple[bytearray, DatasetBytes]:
    """A file of one variable-length dataset of three frames, its bytes and its storage."""
    with h5py.File(path, "w") as f:
        frames = f.create_dataset("frames", (3,), dtype=h5py.vlen_dtype(np.uint8))
        for i in range(3):
            frames[i] = np.full(10 + i, i + 1, np.uint8)
    data = bytearray(path.read_bytes())
    with h5py.File(path, "r") as f:
        stored = DatasetBytes.of(f["frames"], len(data))
    assert stored is not None and stored.vlen
    return data, stored


def _heap(data: bytearray, max_collection: int = 1 << 20) -> HeapReads:
    return HeapReads(lambda a, b: bytes(data[a:b]), len(data), max_collection)


def test_the_rows_of_an_untouched_file_are_read(tmp_path: pathlib.Path) -> None:
    data, stored = _one_vlen_file(tmp_path / "f.h5")
    got = _heap(data).vlen_rows(stored, [2, 0])
    assert got is not None
    assert [row.tolist() for row in got] == [[3] * 12, [1] * 10]


def _descriptor(stored: DatasetBytes, row: int) -> int:
    [(start, _stop)] = stored.rows(row, row)
    return start


def test_a_descriptor_pointing_outside_the_file_or_at_no_collection_gives_no_rows(
    tmp_path: pathlib.Path,
) -> None:
    data, stored = _one_vlen_file(tmp_path / "f.h5")
    at = _descriptor(stored, 0) + 4  # the collection's address
    for address in (len(data) + 100, 0, 8):  # past the end, nothing, the superblock
        forged = bytearray(data)
        forged[at : at + 8] = address.to_bytes(8, "little")
        assert _heap(forged).vlen_rows(stored, [0]) is None


def test_a_collection_larger_than_allowed_gives_no_rows(tmp_path: pathlib.Path) -> None:
    data, stored = _one_vlen_file(tmp_path / "f.h5")
    assert _heap(data, max_collection=64).vlen_rows(stored, [0]) is None


def test_an_object_of_another_size_than_its_descriptor_says_gives_no_rows(
    tmp_path: pathlib.Path,
) -> None:
    data, stored = _one_vlen_file(tmp_path / "f.h5")
    at = _descriptor(stored, 1)
    forged = bytearray(data)
    forged[at : at + 4] = (11 + 5).to_bytes(4, "little")  # the length: 16, the object 11
    assert _heap(forged).vlen_rows(stored, [1]) is None
    index = int.from_bytes(data[at + 12 : at + 16], "little")
    forged = bytearray(data)
    forged[at + 12 : at + 16] = (index + 50).to_bytes(4, "little")  # an object it lacks
    assert _heap(forged).vlen_rows(stored, [1]) is None


def test_a_collection_whose_object_reaches_past_its_end_gives_no_rows(
    tmp_path: pathlib.Path,
) -> None:
    data, stored = _one_vlen_file(tmp_path / "f.h5")
    at = _descriptor(stored, 0)
    address = int.from_bytes(data[at + 4 : at + 12], "little")
    assert data[address : address + 4] == b"GCOL"
    forged = bytearray(data)
    first_object = address + 16
    forged[first_object + 8 : first_object + 16] = (1 << 40).to_bytes(8, "little")
    assert _heap(forged).vlen_rows(stored, [0]) is None
    forged = bytearray(data)
    forged[address + 4] = 2  # a version it does not know
    assert _heap(forged).vlen_rows(stored, [0]) is None


def test_rows_past_the_dataset_or_none_give_no_rows(tmp_path: pathlib.Path) -> None:
    data, stored = _one_vlen_file(tmp_path / "f.h5")
    heap = _heap(data)
    assert heap.vlen_rows(stored, [3]) is None
    assert heap.vlen_rows(stored, []) is None
    assert heap.fixed_rows(stored, [0]) is None  # variable-length: not fixed rows


def test_a_collection_read_again_is_taken_from_the_kept_bytes_within_their_bound(
    tmp_path: pathlib.Path,
) -> None:
    """Guarantee 2: a collection read once is not asked of the range cache again (HDF5's
    metadata cache kept it, through h5py), and the bytes kept stay within ``max_kept``."""
    data, stored = _one_vlen_file(tmp_path / "f.h5")
    asked: list[tuple[int, int]] = []

    def read(a: int, b: int) -> bytes:
        asked.append((a, b))
        return bytes(data[a:b])

    heap = HeapReads(read, len(data), 1 << 20)
    first = heap.vlen_rows(stored, [0, 1, 2])
    collection_reads = len(asked) - 1  # the descriptors' read, then the collection's
    asked.clear()
    again = heap.vlen_rows(stored, [2, 1, 0])
    assert first is not None and again is not None
    assert [r.tolist() for r in again] == [r.tolist() for r in reversed(first)]
    assert len(asked) == 1  # the descriptors only
    assert collection_reads >= 1 and 0 < heap.kept_bytes <= heap.max_kept
    small = HeapReads(read, len(data), 1 << 20, max_kept=16)  # no collection fits
    assert small.vlen_rows(stored, [0]) is not None
    asked.clear()
    assert small.vlen_rows(stored, [0]) is not None
    assert len(asked) == 2 and small.kept_bytes == 0  # the descriptors and the collection
