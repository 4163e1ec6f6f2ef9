"""Making the clips of a unit: one job's open files, their index, decoding and transforms.

A :class:`ClipMaker` belongs to one job in one worker process. It opens each file with the
reader of its layout (recognised per file with ``layout="auto"``), keeping at most
``max_open_files`` open (:class:`~h5feed.producer.open_files.OpenFiles`), answers its index
(from the on-disk cache when valid, keyed by the layout recognised), and turns unit rows into
one array of clips: read only the clip's frames, decode (encoded layouts) or take the pixels
(raw), resize/crop/flip into the output, then the user's transform, if any.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from h5feed.common.config import ClipSpec, clip_frame_indices
from h5feed.common.errors import DataError
from h5feed.common.layouts import LayoutSpec
from h5feed.common.messages import Row
from h5feed.producer import index_cache
from h5feed.producer.code_policy import CodePolicy
from h5feed.producer.decode import ClipWriter, check_frame_pixels, decode_frame
from h5feed.producer.index_cache import VideoEntry
from h5feed.producer.open_files import DEFAULT_MAX_OPEN_FILES, OpenFiles
from h5feed.producer.transform import Transform


class ClipMaker:
    """The files, clip spec and layout of one job, opened in this process.

    Creating it imports the transform if ``policy`` allows it (so a bad or refused import
    path fails when the job starts, naming the path). Every file is opened with ``layout``
    (``Auto``: recognised per file), confined to ``root`` when one is given (see
    :mod:`h5feed.producer.confine`); at most ``max_open_files`` stay open, the others are
    reopened when a row needs them. Each file's index is read once (or taken from the cache)
    and kept.
    """

    def __init__(
        self,
        spec: ClipSpec,
        layout: LayoutSpec,
        policy: CodePolicy,
        root: str | None = None,
        max_open_files: int = DEFAULT_MAX_OPEN_FILES,
        memory: index_cache.MemoryIndex | None = None,
        files: OpenFiles | None = None,
    ) -> None:
        """``memory`` and ``files``: the indexes and open files a persistent worker keeps
        across its jobs, if any (then :meth:`close` leaves ``files`` open)."""
        self.memory = memory
        self.spec = spec
        self.layout = layout
        self.root = root
        self.writer = ClipWriter(spec)
        self.transform = (
            Transform(spec.transform, spec.transform_args, policy)
            if spec.transform is not None
            else None
        )
        self._own_files = files is None
        self.files = files if files is not None else OpenFiles(max_open_files, root)
        self.videos: dict[int, list[VideoEntry]] = {}
        self.columns: dict[int, index_cache.Columns] = {}  # the same, as INDEX_BATCH columns

    def close(self) -> None:
        if self._own_files:
            self.files.close()

    def open_and_index(self, file_index: int, path: str, cache_dir: str | None) -> list[VideoEntry]:
        """The videos of file ``file_index`` at ``path``: from this worker's memory (a
        persistent worker's earlier jobs) or the on-disk cache without opening the file (it is
        opened on its first read), else opened and read (the pack index, or a walk) and
        stored in both."""
        try:
            key: str | None = index_cache.file_key(path, self.layout)  # one stat, used thrice
        except OSError:
            key = None  # opening it below names the file in the error
        remembered = None
        if key is not None and self.memory is not None:
            remembered = self.memory.load(path, self.layout, key)
        if remembered is not None:  # a persistent worker's earlier job: columns made already
            resolved, videos, columns = remembered
            self.files.know(file_index, path, resolved)
            self.videos[file_index], self.columns[file_index] = videos, columns
            return videos
        known = None
        if key is not None and cache_dir is not None:
            known = index_cache.load(cache_dir, path, self.layout, key)
        if known is not None:
            resolved, videos = known
            self.files.know(file_index, path, resolved)
        else:
            handle = self.files.open(file_index, path, self.layout)
            resolved, videos = handle.spec, handle.index()
            if cache_dir is not None:
                index_cache.store(cache_dir, path, self.layout, resolved, videos, key)
        columns = index_cache.columns_of(videos)
        if self.memory is not None:
            self.memory.store(path, self.layout, resolved, videos, key, columns)
        self.videos[file_index], self.columns[file_index] = videos, columns
        return videos

    def produce(
        self,
        rows: Sequence[Row],
        out: np.ndarray | None = None,
        positions: Sequence[int] | None = None,
    ) -> np.ndarray:
        """The clips of ``rows``: uint8 [rows, clip_len, H, W, 3] RGB, or with a transform
        [rows, *shape] of the transform's dtype. Without a transform, ``out`` (a whole batch
        in a shared-memory slot) may be given: row ``i`` is then written at ``positions[i]``."""
        if not rows:
            raise ValueError("a unit must have at least one row")
        if out is not None and (self.transform is not None or positions is None):
            raise ValueError("a batch array needs positions, and no transform")
        scratch: np.ndarray | None = None  # [1, T, H, W, 3]: one clip, the transform's input
        for r, row in enumerate(rows):
            if self.transform is None:
                place = positions[r] if positions is not None else r
                out = self._clip(row, out, place, len(rows))
                continue
            scratch = self._clip(row, scratch, 0, 1)
            file_index, video_index, seed = row.file, row.video, row.seed
            path, name = self.files.path(file_index), self.videos[file_index][video_index][0]
            result = self.transform(scratch[0], seed, path, name)
            if out is None:
                out = np.empty((len(rows), *result.shape), result.dtype)
            else:
                self.transform.check_like(result, out[0], path, name)
            out[r] = result
        if out is None:  # unreachable: rows is not empty
            raise ValueError("no clip was produced")
        return out

    def _clip(self, row: Row, out: np.ndarray | None, r: int, rows: int) -> np.ndarray:
        """Write the clip of ``row`` into ``out[r]``; when ``out`` is None, first allocate it,
        uint8 [rows, T, H, W, 3], with H, W from the spec or the first frame. Returns ``out``."""
        spec = self.spec
        _sample, file_index, video_index, start, uy, ux, flip, _seed = row
        handle = self.files.get(file_index)
        name, n_frames, _label = self.videos[file_index][video_index]
        indices = clip_frame_indices(start, n_frames, spec.clip_len, spec.stride, spec.short_video)
        rgb = not handle.encoded  # pixels as stored (raw layout): no imdecode, no BGR swap
        if rgb and self.writer.max_pixels is not None:  # before a frame is read
            check_frame_pixels(
                handle.pixel_size(), self.writer.max_pixels, handle.path, name, indices[0]
            )
        try:
            stored = handle.read_frames(name, indices)
        except (OSError, KeyError, ValueError) as exc:
            raise DataError(
                f"cannot read frames {indices[0]}..{indices[-1]}: {exc}",
                file=handle.path,
                video=name,
                frame=indices[0],
            ) from exc
        for t, (data, frame) in enumerate(zip(stored, indices, strict=True)):
            if rgb:
                image = data
            else:
                image = decode_frame(
                    data, handle.path, name, frame, self.writer.reduce_to, self.writer.max_pixels
                )
            if out is None:
                height, width = self.writer.frame_shape(image)
                out = np.empty((rows, spec.clip_len, height, width, 3), np.uint8)
            where = (handle.path, name, frame)
            self.writer.write(out[r, t], image, (uy, ux), bool(flip), where, rgb=rgb)
        if out is None:  # unreachable: every clip has clip_len >= 1 frames
            raise ValueError("no frame was read")
        return out
