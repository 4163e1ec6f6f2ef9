"""The HDF5 handshake's answers: each file's videos as its worker indexed them, until the
plan's index is built from them, and the planned videos a taker's INDEX is compared with.

Guarantees:

1. An INDEX and an INDEX_BATCH decode (:func:`indexed_files`) to the same (file, videos)
   pairs, in the order sent; the wire decoder has checked their sizes and types already.
2. The first videos recorded for a file are kept (:meth:`IndexAnswers.add`): a later INDEX of
   it (a taker's) is compared with them, never recorded over them.
3. The index (:meth:`IndexAnswers.index`) is built only once every file has its videos, in
   file order: the plan never depends on which worker answered first.
4. Labels decided from the file list (``HdfConfig.file_labels``) replace the workers' labels
   (:meth:`IndexAnswers.labelled`) before anything is recorded or compared.
5. No messages are sent and nothing is counted here. Not thread-safe: the loop's thread owns
   it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from h5feed.common.protocol import messages
from h5feed.consumer.plan.epoch_plan import FileColumns, Index


def indexed_files(message: messages.Message) -> list[tuple[int, FileColumns]] | None:
    """The (file, videos) pairs an INDEX or INDEX_BATCH answers; None for another message."""
    if isinstance(message, messages.Index):
        videos = message.videos
        columns = FileColumns(
            tuple(v.name.encode() for v in videos),
            np.array([v.frames for v in videos], np.int64),
            np.array([v.label for v in videos], np.int64),
        )
        return [(message.file, columns)]
    if isinstance(message, messages.IndexBatch):
        ends = np.cumsum(message.counts).tolist()
        return [
            (
                file_index,
                FileColumns(
                    message.names[end - count : end],
                    message.frames[end - count : end],
                    message.labels[end - count : end],
                ),
            )
            for file_index, end, count in zip(message.files, ends, message.counts, strict=True)
        ]
    return None


class IndexAnswers:
    """See the module docstring."""

    def __init__(self, files: Sequence[str], file_labels: Sequence[int] | None) -> None:
        self._files = tuple(files)
        self._labels = file_labels
        self._videos: dict[int, FileColumns] = {}  # each indexed file's videos

    def __len__(self) -> int:
        """How many files have their videos (the handshake's answers so far)."""
        return len(self._videos)

    def __contains__(self, file_index: int) -> bool:
        return file_index in self._videos

    @property
    def complete(self) -> bool:
        """Whether every file has its videos."""
        return len(self._videos) == len(self._files)

    def waiting(self) -> str:
        """What is still missing, in words (the handshake timeout's error)."""
        missing = sorted(set(range(len(self._files))) - set(self._videos))
        first = self._files[missing[0]] if missing else "?"
        return f"no worker indexed {first!r} ({len(missing)} files left)"

    def labelled(self, files: list[tuple[int, FileColumns]]) -> list[tuple[int, FileColumns]]:
        """``files`` with the labels decided from the file list, if there are (guarantee 4)."""
        labels = self._labels
        if labels is None:
            return files
        return [
            (f, dataclasses.replace(c, labels=np.full(len(c.frames), labels[f], np.int64)))
            for f, c in files
        ]

    def add(self, file_index: int, columns: FileColumns) -> None:
        """The videos of ``file_index``, unless it has some already (guarantee 2)."""
        self._videos.setdefault(file_index, columns)

    def index(self) -> Index:
        """The index of every file, in file order. Raises KeyError while incomplete."""
        return Index.from_columns(self._files, [self._videos[i] for i in range(len(self._files))])

    def planned(self, file_index: int, index: Index | None) -> FileColumns:
        """The planned videos of ``file_index``: those recorded, else (the plan started from
        a known index) those of ``index``, recorded from now."""
        columns = self._videos.get(file_index)
        if columns is None:
            if index is None:  # unreachable: a file moves before the plan only once indexed
                raise RuntimeError(f"file {file_index} checked before it was indexed")
            where = np.flatnonzero(index.file_of_video == file_index)
            columns = FileColumns(
                tuple(index.names[where].tolist()), index.frames[where], index.labels[where]
            )
            self._videos[file_index] = columns
        return columns
