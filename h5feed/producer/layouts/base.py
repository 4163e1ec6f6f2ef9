"""The interface every layout reader implements."""

from __future__ import annotations

import abc
import weakref
from typing import ClassVar

import h5py
import numpy as np

from h5feed.common import object_urls
from h5feed.common.layouts import LayoutSpec
from h5feed.producer.files.clip_bytes import ClipBytes, DatasetBytes
from h5feed.producer.files.dataset_checks import check_dataset
from h5feed.producer.files.heap_reads import HeapReads
from h5feed.producer.files.index_cache import VideoEntry
from h5feed.producer.files.read_limits import DEFAULT_BOUNDS, DatasetBounds
from h5feed.producer.layouts._common import read_labels, read_rows, video_name, video_number

#: Datasets whose storage a reader remembers before it first forgets those no longer open
#: (then again each time the entries double: a walk of 100,000 videos prunes a few times).
_PRUNE_AT = 16_384


class LayoutReader(abc.ABC):
    """Reads the videos of one open HDF5 file in one layout.

    Guarantees: :meth:`index` lists every video once, in a fixed order (the order the plan
    numbers them in), or raises :class:`~h5feed.common.errors.DataError` naming the file and
    video — a video is never left out silently. :meth:`read_frames` reads only the frames
    asked for. Not thread-safe (h5py serialises access anyway); create readers inside the
    process that uses them (h5py handles do not survive ``fork`` or pickling).

    Every dataset a reader reads goes through :meth:`readable` first, once per dataset (when
    the reader opens or indexes it, never per frame): its declared sizes against ``bounds``,
    and with a data ``root`` where its bytes come from, recursively through virtual datasets
    (:mod:`h5feed.producer.files.dataset_checks`). A new reader does the same for every dataset it
    touches, saying whether it reads it whole.
    """

    #: True: ``read_frames`` gives encoded images (JPEG bytes) to decode with OpenCV;
    #: False: decoded pixel arrays [H, W, C] (C = 3 RGB, or 1 / no axis: grayscale).
    encoded: ClassVar[bool] = True

    def __init__(
        self,
        h5: h5py.File,
        path: str,
        spec: LayoutSpec,
        root: str | None = None,
        bounds: DatasetBounds = DEFAULT_BOUNDS,
    ) -> None:
        self.h5 = h5
        self.path = path
        self.spec = spec
        self.root = root
        self.bounds = bounds
        #: clip_bytes's storage of each dataset, by the id() of its (weakly held) object
        self._stored: dict[int, tuple[weakref.ref[h5py.Dataset], DatasetBytes | None]] = {}
        self._prune_at = _PRUNE_AT
        self._plans = object_urls.is_url(path)  # read ahead: clips' bytes planned
        #: a streamed URL file's rows read from its bytes (:meth:`elements`), set by its opener
        self.heap: HeapReads | None = None

    def readable(self, dataset: h5py.Dataset, *, whole: bool) -> h5py.Dataset:
        """``dataset``, once checked (:func:`~h5feed.producer.files.dataset_checks.check_dataset`):
        DataError when its declared sizes pass ``bounds`` (``whole``: the reader reads all of
        it at once; else rows), PathRefused when reading it would leave the data root. For
        a URL's file, its storage is learnt now, while its metadata is fresh, so that
        planning its clips later needs no HDF5 call (:meth:`clip_bytes`)."""
        checked = check_dataset(dataset, self.bounds, self.root, whole=whole)
        if self._plans:  # now, while its metadata is fresh: later, on a read-ahead thread,
            self._storage(checked)  # HDF5 may read its header again under h5py's lock
        return checked

    def readable_whole(self, dataset: h5py.Dataset) -> h5py.Dataset:
        """:meth:`readable` for a dataset read all at once (labels, offsets, an index)."""
        return self.readable(dataset, whole=True)

    def close(self) -> None:
        self.heap = None  # its reads go through the file's cache: not after it closes
        self.h5.close()

    def elements(self, dataset: h5py.Dataset, rows: list[int]) -> list[np.ndarray]:
        """The elements of the 1-D ``dataset`` at ``rows`` (any order, repeats allowed). A
        streamed URL file's are cut from its bytes, without a call to HDF5, where
        :class:`~h5feed.producer.files.heap_reads.HeapReads` takes the dataset (the same
        bytes, guarantee 1 there); every other read goes through h5py."""
        if self.heap is not None:
            stored = self._storage(dataset)
            if stored is not None and stored.vlen:
                found = self.heap.vlen_rows(stored, rows)
                if found is not None:
                    return found
            else:
                fixed = self.heap.fixed_rows(stored, rows)
                if fixed is not None:
                    return list(fixed)
        return read_rows(dataset, rows)

    @abc.abstractmethod
    def index(self) -> list[VideoEntry]:
        """(video name, frame count >= 1, label) of every video, in plan order."""

    @abc.abstractmethod
    def read_frames(self, video: str, indices: list[int]) -> list[np.ndarray]:
        """The frames of ``video`` at ``indices`` (any order, repeats allowed), one each."""

    def frame_crcs(self, video: str, indices: list[int]) -> list[int] | None:
        """The stored CRC32 of each frame of ``video`` at ``indices``, or None when the file
        stores none (only the groups layout written by ``h5feed pack`` does)."""
        return None

    def clip_bytes(self, video: str, indices: list[int]) -> ClipBytes | None:
        """Where the frames of ``video`` at ``indices`` lie in the file, for object storage's
        read-ahead (:mod:`h5feed.producer.files.read_ahead`), or None (then what a clip
        reads is learnt from its reads). Called on a read-ahead thread. A video whose
        datasets are open (its index walked) is planned without a call to h5py (their
        storage was learnt by :meth:`readable`); else it opens them (the metadata its clip
        reads first anyway, through h5py, whose lock serialises it with the worker's own
        reads), and may raise what opening them raises (the caller drops it: the clip's
        own read raises it again, by name)."""
        return None

    def planned(
        self, frames: h5py.Dataset, first: int, last: int, *others: h5py.Dataset
    ) -> ClipBytes | None:
        """The plan of rows ``first..last`` of ``frames`` (and the video's rows of ``others``,
        each the whole dataset: a pack's CRCs), or None when ``frames`` cannot be planned
        (:class:`~h5feed.producer.files.clip_bytes.DatasetBytes`). Each dataset's storage is
        asked for once."""
        stored = [self._storage(d) for d in (frames, *others)]
        if stored[0] is None:
            return None
        return stored[0].plan(first, last, [s for s in stored[1:] if s is not None])

    def _storage(self, dataset: h5py.Dataset) -> DatasetBytes | None:
        # Keyed by the Python object, not by anything h5py gives: even ``dataset.id`` takes
        # h5py's lock, which the worker's own read holds while it waits for a fetch ahead.
        held = self._stored.get(id(dataset))
        if held is not None and held[0]() is dataset:
            return held[1]
        stored = DatasetBytes.of(dataset, int(self.h5.id.get_filesize()))
        if len(self._stored) >= self._prune_at:  # those of datasets closed since go
            self._stored = {k: v for k, v in self._stored.items() if v[0]() is not None}
            self._prune_at = max(_PRUNE_AT, 2 * len(self._stored))
        self._stored[id(dataset)] = (weakref.ref(dataset), stored)
        return stored

    def prepare(self, videos: list[VideoEntry]) -> None:
        """Called before each read with the file's index ``videos``: a reader opened with its
        index learnt before (the index cache, or a persistent worker's memory) makes ready
        what :meth:`index` would have, where a layout has any (nothing here); a layout that
        does keeps its own once-only flag, so the call costs nothing after the first."""
        return None  # most layouts have nothing to make ready

    def pixel_size(self) -> tuple[int, int]:
        """(height, width) of every frame of a layout that stores pixels (``encoded`` False),
        from the dataset's shape, so it can be checked before a frame is read."""
        raise NotImplementedError(f"{type(self).__name__} stores encoded frames")


class OffsetsReader(LayoutReader):
    """A layout whose videos are runs of rows of one ``frames`` dataset cut by ``offsets``
    ([V + 1], video v = rows ``offsets[v] .. offsets[v+1] - 1``) with ``labels`` [V] named
    ``labels_name`` (None: every label is -1); videos are named by their zero-padded number.
    Subclasses set ``frames``, ``offsets``, ``labels_name`` and ``labels_hint``."""

    frames: h5py.Dataset
    offsets: np.ndarray
    labels_name: str | None
    labels_hint: ClassVar[str]  # how to say there are no labels, for the error message

    @property
    def num_videos(self) -> int:
        return len(self.offsets) - 1

    def index(self) -> list[VideoEntry]:
        count = self.num_videos
        labels = read_labels(
            self.h5, self.labels_name, count, self.path, self.labels_hint, self.readable_whole
        )
        lengths = np.diff(self.offsets)
        return [(video_name(v), int(lengths[v]), int(labels[v])) for v in range(count)]

    def read_frames(self, video: str, indices: list[int]) -> list[np.ndarray]:
        base = int(self.offsets[video_number(video, self.num_videos, self.path)])
        return self.elements(self.frames, [base + i for i in indices])

    def clip_bytes(self, video: str, indices: list[int]) -> ClipBytes | None:
        base = int(self.offsets[video_number(video, self.num_videos, self.path)])
        return self.planned(self.frames, base + min(indices), base + max(indices))
