"""A clip's rows of a URL file read from the file's bytes, without a call to HDF5.

Through h5py, a streamed file is read by HDF5 through a Python file object: a clip's frames
are a dataset read that asks the object for its descriptors, then for each heap collection
they point at, one ``readinto`` at a time, holding h5py's lock all along (so the read-ahead's
threads, which plan clips with h5py calls, wait for it). The bytes are usually in the range
cache already (the read-ahead fetched them), so what that costs is CPU: HDF5's selection and
type conversion, the file object's calls, and the threads taking turns on h5py's lock.
:class:`HeapReads` reads the same bytes straight from the range cache
(:class:`~h5feed.producer.files.range_cache.RangeCache`) and cuts the rows out itself:

* fixed-size rows (a pack's CRCs) are the dataset's stored bytes, as
  :class:`~h5feed.producer.files.clip_bytes.DatasetBytes` locates them;
* variable-length rows (the frames) are descriptors (length, collection address, object
  index) whose objects lie in global heap collections: a collection is ``GCOL``, version 1,
  3 reserved bytes and its size, then objects, each its index (2 bytes), reference count (2),
  4 reserved bytes, its size and its data padded to 8 bytes, up to the free-space object
  (index 0). (HDF5 file format specification, "Global Heap".)

Only a URL's files are read so (:func:`~h5feed.producer.files.remote_files.open_h5_with_heap`).
A local file's rows were read the same way for a while, with ``pread`` on HDF5's own
descriptor: in one process a 16-frame clip's read took 0.04 ms of CPU instead of h5py's
0.15, but the workers took 2 to 5 % more CPU per clip in interleaved runs on a pack (five
pairs, unexplained), so local files are read by h5py.

Guarantees:

1. The same rows h5py gives, byte for byte, or None: anything this reader does not expect
   (a length size other than 8, a descriptor pointing outside the file, a collection that
   is not one or is larger than ``max_collection``, an object index it does not hold, an
   object whose size is not its descriptor's length) gives None, and the caller reads the
   rows through h5py as before (which reports what is wrong in its own words). Nothing
   read from the file is trusted before it is checked against the file's size and the
   collection's.
2. Bounded: a read asks the range cache for the descriptors and for each collection the
   rows point at, each at most ``max_collection`` bytes; the objects' places are
   remembered for at most :data:`MAX_COLLECTIONS` collections per open file, and the
   collections' bytes, least recently read first out, for at most ``max_kept`` bytes
   (:data:`KEPT_BYTES`, 16 MiB, by default). Why keep them: through h5py, HDF5 kept the
   collections it read in its metadata cache (16 MiB per streamed file), so the next clips
   of a video, and later epochs over a file that fits, read none again; without a cache of
   its own this reader asked the range cache (a few MiB) again, and over files larger than
   that but smaller than 16 MiB it went back to the store: the S3 soak, 2.8 MiB files and a
   1 MiB range cache, ran at 66 clips/s against 272 through h5py.
3. Only the worker's own thread calls it; a read that fails after the file's retries
   raises OSError naming the URL (the reader's caller names file, video and frame).
"""

from __future__ import annotations

import collections
import struct
from collections.abc import Callable, Sequence

import numpy as np

from h5feed.producer.files import clip_bytes
from h5feed.producer.files.clip_bytes import DatasetBytes

__all__ = ["KEPT_BYTES", "MAX_COLLECTIONS", "HeapReads"]

#: Collections whose objects' places an open file remembers (a few dozen bytes each).
MAX_COLLECTIONS = 4096
#: The bytes of collections an open file keeps (guarantee 2): HDF5's metadata cache's size
#: for a streamed file (:data:`~h5feed.producer.files.remote_files.METADATA_CACHE_BYTES`).
KEPT_BYTES = 16 << 20
_LENGTH_SIZE = 8  # h5py's files, and HDF5's default: other sizes are read through h5py
_COLLECTION_HEADER = 8 + _LENGTH_SIZE  # signature, version, reserved, size
_OBJECT_HEADER = struct.Struct("<HH4xQ")  # index, reference count, reserved, size
#: (start in the collection, size) of each object, by index
_Objects = dict[int, tuple[int, int]]


class HeapReads:
    """Rows of one open file's datasets read from its bytes (module docstring).

    ``read(start, stop)`` gives the file's bytes ``[start, stop)`` (the range cache's, with
    the file's retries); ``file_size`` bounds every address.
    """

    def __init__(
        self,
        read: Callable[[int, int], bytes],
        file_size: int,
        max_collection: int,
        max_kept: int = KEPT_BYTES,
    ) -> None:
        self._read, self.file_size, self.max_collection = read, file_size, max_collection
        self._collections: collections.OrderedDict[int, tuple[int, _Objects]]
        self._collections = collections.OrderedDict()
        self._kept: collections.OrderedDict[int, bytes] = collections.OrderedDict()
        self.max_kept, self.kept_bytes = max_kept, 0

    def fixed_rows(self, stored: DatasetBytes | None, rows: Sequence[int]) -> np.ndarray | None:
        """Rows ``rows`` of a 1-D dataset of fixed-size numbers stored as ``stored`` says,
        or None (guarantee 1)."""
        dtype = None if stored is None else stored.dtype
        if stored is None or dtype is None or dtype.kind not in "iuf":
            return None
        if stored.row_bytes != dtype.itemsize:  # not 1-D
            return None
        stored_rows = self._stored_rows(stored, rows)
        if stored_rows is None:
            return None
        data, first = stored_rows
        every = np.frombuffer(data, dtype=dtype)
        return every[np.asarray(rows, dtype=np.int64) - first]

    def vlen_rows(
        self, stored: DatasetBytes | None, rows: Sequence[int]
    ) -> list[np.ndarray] | None:
        """Rows ``rows`` of a 1-D variable-length uint8 dataset stored as ``stored`` says,
        each a uint8 array, or None (guarantee 1)."""
        if stored is None or not stored.vlen or stored.sizes[1] != _LENGTH_SIZE:
            return None
        stored_rows = self._stored_rows(stored, rows)
        if stored_rows is None:
            return None
        data, first = stored_rows
        descriptors = clip_bytes.parse_descriptors(data, stored.sizes)
        collections_read: dict[int, tuple[bytes, _Objects] | None] = {}
        found = []
        for row in rows:
            length, address, index = descriptors[row - first]
            if address not in collections_read:
                collections_read[address] = self._collection(address)
            held = collections_read[address]
            if held is None:
                return None
            collection, objects = held
            where = objects.get(index)
            if where is None or where[1] != length:
                return None
            found.append(np.frombuffer(collection, np.uint8, count=length, offset=where[0]))
        return found

    def _stored_rows(self, stored: DatasetBytes, rows: Sequence[int]) -> tuple[bytes, int] | None:
        """The stored bytes of rows ``min(rows)..max(rows)`` and the first row, or None."""
        if not rows:
            return None
        first, last = min(rows), max(rows)
        if first < 0 or last >= stored.count:
            return None
        ranges = stored.rows(first, last)
        expected = (last - first + 1) * stored.row_bytes
        if sum(b - a for a, b in ranges) != expected:
            return None  # rows in no run: not stored (HDF5 gives its fill value)
        data = b"".join(self._read(a, b) for a, b in ranges)
        if len(data) != expected:
            return None  # the file is shorter than it says: h5py reports it
        return data, first

    def _collection(self, address: int) -> tuple[bytes, _Objects] | None:
        """The bytes of the collection at ``address`` and its objects' places, or None when
        the bytes there are not a collection this reader takes (guarantee 1)."""
        known = self._collections.get(address)
        if known is not None:
            self._collections.move_to_end(address)
            size, objects = known
            data = self._kept.get(address) or self._read(address, address + size)
            if len(data) != size:
                return None
            self._keep(address, data)
            return data, objects
        if address <= 0 or address + _COLLECTION_HEADER > self.file_size:
            return None
        header = self._read(address, address + _COLLECTION_HEADER)
        declared = clip_bytes.collection_size(header, (0, _LENGTH_SIZE))  # None: not a collection
        if declared is None or not _COLLECTION_HEADER <= declared <= self.max_collection:
            return None
        if address + declared > self.file_size:
            return None
        data = self._read(address, address + declared)
        parsed = _objects(data, declared) if len(data) == declared else None
        if parsed is None:
            return None
        self._collections[address] = (declared, parsed)
        if len(self._collections) > MAX_COLLECTIONS:
            gone, _ = self._collections.popitem(last=False)
            self.kept_bytes -= len(self._kept.pop(gone, b""))
        self._keep(address, data)
        return data, parsed

    def _keep(self, address: int, data: bytes) -> None:
        """Keep ``data`` (the collection at ``address``) as the most recently read, within
        ``max_kept`` bytes (guarantee 2)."""
        if address in self._kept:
            self._kept.move_to_end(address)
            return
        if len(data) > self.max_kept:
            return
        self._kept[address] = data
        self.kept_bytes += len(data)
        while self.kept_bytes > self.max_kept:
            _, dropped = self._kept.popitem(last=False)
            self.kept_bytes -= len(dropped)


def _objects(data: bytes, size: int) -> _Objects | None:
    """The places of the objects of one collection (``data``, ``size`` bytes), or None when
    an object would reach past it."""
    objects: _Objects = {}
    at = _COLLECTION_HEADER
    while at + _OBJECT_HEADER.size <= size:
        index, _references, length = _OBJECT_HEADER.unpack_from(data, at)
        if index == 0:  # the free space: no object after it
            break
        start = at + _OBJECT_HEADER.size
        if length > size - start:
            return None
        objects[index] = (start, length)
        at = start + ((length + 7) & ~7)
    return objects
