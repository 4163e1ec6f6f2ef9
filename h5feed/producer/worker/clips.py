"""Making the clips of a unit: one job's open files, their index, decoding and transforms.

A :class:`ClipMaker` belongs to one job in one worker process. It opens each file with the
reader of its layout (recognised per file with ``layout="auto"``), keeping at most
``max_open_files`` open (:class:`~h5feed.producer.files.open_files.OpenFiles`), answers its index
(from the on-disk cache when valid, keyed by the layout recognised), and turns unit rows into
one array of clips: read only the clip's frames, decode (encoded layouts) or take the pixels
(raw), resize/crop/flip into the output, then the user's transform, if any.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Sequence

import numpy as np

from h5feed.common.config import ClipSpec, clip_frame_indices
from h5feed.common.errors import DataError, FileReadError, FrameError
from h5feed.common.layouts import LayoutSpec
from h5feed.common.protocol.messages import Row
from h5feed.producer.files import index_cache, read_ahead
from h5feed.producer.files.index_cache import VideoEntry
from h5feed.producer.files.open_files import DEFAULT_MAX_OPEN_FILES, OpenFiles
from h5feed.producer.files.read_limits import NO_LIMITS, ProducerLimits
from h5feed.producer.worker.code_policy import CodePolicy
from h5feed.producer.worker.decode import ClipWriter, check_crc, check_frame_pixels, decode_frame
from h5feed.producer.worker.transform import Transform

_HOST = socket.gethostname()
#: A row skipped under ``on_error="skip"``: its index in the unit's rows, and why.
Skipped = tuple[int, FrameError]


class ClipMaker:
    """The files, clip spec and layout of one job, opened in this process.

    Creating it imports the transform if ``policy`` allows it (so a bad or refused import
    path fails when the job starts, naming the path). Every file is opened with ``layout``
    (``Auto``: recognised per file), confined to ``root`` when one is given (see
    :mod:`h5feed.producer.files.confine`); at most ``max_open_files`` stay open, the others are
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
        limits: ProducerLimits = NO_LIMITS,
    ) -> None:
        """``memory`` and ``files``: the indexes and open files a persistent worker keeps
        across its jobs, if any (then :meth:`close` leaves ``files`` open). ``limits``: the
        producer operator's caps; ``spec``'s ``max_frame_pixels`` is lowered to its cap, and
        LimitRefused is raised here for clips over its ``max_clip_pixels``."""
        self.memory = memory
        self.limits = limits
        spec = limits.clip_spec(spec)  # before anything is imported or opened
        bounds = limits.bounds(spec)
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
        self.files = files if files is not None else OpenFiles(max_open_files, root, bounds)
        self.files.use_bounds(bounds)
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
        skip: bool = False,
        upcoming: Sequence[Row] = (),
    ) -> tuple[np.ndarray, list[Skipped]]:
        """The clips of ``rows``: uint8 [rows, clip_len, H, W, 3] RGB, or with a transform
        [rows, *shape] of the transform's dtype. Without a transform, ``out`` (a whole batch
        in a shared-memory slot) may be given: row ``i`` is then written at ``positions[i]``.

        A bad frame (:class:`FrameError`: undecodable, failing its CRC32) raises, unless
        ``skip``: then its row is all zeros (also in ``out``, whatever the slot held) and
        listed in the second value, with the error; the other rows are as without ``skip``.
        When every row is bad and the output shape cannot be known without a good one (no
        ``resize`` or ``crop``), the first error is raised after all.

        ``upcoming``: the rows of the units waiting behind this one: with files on object
        storage, what they will read is fetched ahead too (nothing else is done with them)."""
        if not rows:
            raise ValueError("a unit must have at least one row")
        if out is not None and (self.transform is not None or positions is None):
            raise ValueError("a batch array needs positions, and no transform")
        scratch: np.ndarray | None = None  # [1, T, H, W, 3]: one clip, the transform's input
        skipped: list[Skipped] = []
        ahead = read_ahead.active()  # a URL file open: the next rows' bytes read ahead,
        coming = [*rows, *upcoming] if ahead else rows  # the waiting units' rows too
        reach = read_ahead.reach() if ahead else 0  # rows whose bytes are fetched ahead
        for r, row in enumerate(rows):
            if ahead:  # the first rows, then each row as it comes within reach
                self._read_ahead(coming[:reach] if r == 0 else coming[r + reach - 1 : r + reach])
            try:
                if self.transform is None:
                    place = positions[r] if positions is not None else r
                    out = self._clip(row, out, place, len(rows))
                    continue
                scratch = self._clip(row, scratch, 0, 1)
                out = self._transformed(row, scratch[0], out, r, len(rows))
            except FrameError as exc:
                if not skip:
                    raise
                skipped.append((r, exc))
        if skipped:
            if out is None:  # every row was bad
                out = self._zeros(rows, skipped[0][1])
            for r, _exc in skipped:  # after the loop: a clip half written is wiped too
                out[positions[r] if positions is not None else r] = 0
        if out is None:  # unreachable: rows is not empty
            raise ValueError("no clip was produced")
        return out, skipped

    def _read_ahead(self, rows: Sequence[Row]) -> None:
        """Fetch ahead what the clips of ``rows`` will read from object storage
        (:mod:`h5feed.producer.files.read_ahead`; nothing for local files)."""
        for row in rows:
            videos = self.videos.get(row.file)
            if videos is None or not 0 <= row.video < len(videos):
                continue
            name, n_frames, _label = videos[row.video]
            reader = self.files.peek(row.file)  # an open file's reader plans the clip
            spec = self.spec
            indices = clip_frame_indices(
                row.start, n_frames, spec.clip_len, spec.stride, spec.short_video
            )
            plan = None if reader is None else functools.partial(reader.clip_bytes, name, indices)
            read_ahead.ahead(self.files.path(row.file), name, plan, (indices[0], indices[-1]))

    def _transformed(
        self, row: Row, clip: np.ndarray, out: np.ndarray | None, r: int, rows: int
    ) -> np.ndarray:
        """Run the transform on ``clip`` and write its result into ``out[r]`` (allocated as
        [rows, *shape] of its dtype when None). Returns ``out``."""
        if self.transform is None:  # unreachable: only called with a transform
            raise ValueError("no transform")
        file_index, video_index, seed = row.file, row.video, row.seed
        path, name = self.files.path(file_index), self.videos[file_index][video_index][0]
        result = self.transform(clip, seed, path, name)
        if out is None:
            out = np.empty((rows, *result.shape), result.dtype)
        else:
            self.transform.check_like(result, out[0], path, name)
        out[r] = result
        return out

    def _zeros(self, rows: Sequence[Row], first: FrameError) -> np.ndarray:
        """The output of a unit whose every row is bad, all zeros: its shape comes from the
        clip spec (with a transform: from the transform's result on a clip of zeros, so the
        shape and dtype are the transform's own). Raises ``first`` when the spec does not
        tell the frame size."""
        height, width = self.spec.frame_shape
        if height is None or width is None:
            raise first
        clip = np.zeros((self.spec.clip_len, height, width, 3), np.uint8)
        if self.transform is None:
            return np.zeros((len(rows), *clip.shape), np.uint8)
        made = self._transformed(rows[0], clip, None, 0, len(rows))
        made[:] = 0
        return made

    def _allocate(self, rows: int, height: int, width: int) -> np.ndarray:
        """A new uint8 [rows, clip_len, height, width, 3], once the producer's cap on a
        clip's pixels (``max_clip_pixels``) allows it (LimitRefused otherwise)."""
        self.limits.check_clip(self.spec.clip_len, height, width)  # before allocating
        return np.empty((rows, self.spec.clip_len, height, width, 3), np.uint8)

    def _clip(self, row: Row, out: np.ndarray | None, r: int, rows: int) -> np.ndarray:
        """Write the clip of ``row`` into ``out[r]``; when ``out`` is None, first allocate it,
        uint8 [rows, T, H, W, 3], with H, W from the spec or the first frame. Returns ``out``."""
        spec = self.spec
        _sample, file_index, video_index, start, uy, ux, flip, _seed = row
        handle = self.files.get(file_index)
        handle.prepare(self.videos[file_index])  # one opened with its index cached: once
        name, n_frames, _label = self.videos[file_index][video_index]
        indices = clip_frame_indices(start, n_frames, spec.clip_len, spec.stride, spec.short_video)
        rgb = not handle.encoded  # pixels as stored (raw layout): no imdecode, no BGR swap
        if rgb and self.writer.max_pixels is not None:  # before a frame is read
            check_frame_pixels(
                handle.pixel_size(), self.writer.max_pixels, handle.path, name, indices[0]
            )
        try:
            with read_ahead.recording(handle.path, name):  # a URL's: ranges remembered
                stored = handle.read_frames(name, indices)
            crcs = None if rgb else handle.frame_crcs(name, indices)
        except OSError as exc:  # the file, not a frame: never skipped
            raise FileReadError(
                f"cannot read frames {indices[0]}..{indices[-1]}: {exc}",
                file=handle.path,
                host=_HOST,
                number=file_index,
                video=name,
                frame=indices[0],
            ) from exc
        except (KeyError, ValueError) as exc:
            raise DataError(
                f"cannot read frames {indices[0]}..{indices[-1]}: {exc}",
                file=handle.path,
                video=name,
                frame=indices[0],
            ) from exc
        height, width = spec.frame_shape
        if out is None and height is not None and width is not None:  # the spec's size
            out = self._allocate(rows, height, width)
        if out is not None and not rgb:  # the hot path: every frame of the clip at once
            self.writer.write_encoded(
                out[r], stored, indices, (uy, ux), bool(flip), handle.path, name, crcs
            )
            return out
        for t, (data, frame) in enumerate(zip(stored, indices, strict=True)):
            if rgb:
                image = data
            else:  # the first frame decides the size: no resize or crop, no batch array
                if crcs is not None:  # before decoding: a flipped bit may still decode
                    check_crc(data, crcs[t], handle.path, name, frame)
                image = decode_frame(
                    data, handle.path, name, frame, self.writer.reduce_to, self.writer.max_pixels
                )
            if out is None:
                out = self._allocate(rows, *self.writer.frame_shape(image))
            where = (handle.path, name, frame)
            self.writer.write(out[r, t], image, (uy, ux), bool(flip), where, rgb=rgb)
        if out is None:  # unreachable: every clip has clip_len >= 1 frames
            raise ValueError("no frame was read")
        return out
