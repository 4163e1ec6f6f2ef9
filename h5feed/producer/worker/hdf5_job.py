"""One HDF5 job in a worker: its files, their INDEX answers, and the clips of its UNITs.

A JOB names the files this worker owns (number and path), the clip spec and the layout.
:class:`Hdf5Job` indexes each file (:class:`~h5feed.producer.worker.clips.ClipMaker`: from memory or
the cache without opening it, else opened once) and answers the indexes of many files in one
INDEX_BATCH (bounded: :data:`BATCH_FILES`, :data:`BATCH_VIDEOS`, :data:`BATCH_NAME_BYTES`);
a UNIT's rows become one array of clips, sent with DATA, or written into the unit's
shared-memory slot (then DATA carries no array). It follows the worker's job protocol
(:class:`~h5feed.producer.worker.job.Job`) and only makes messages: the worker's event loop
(:mod:`h5feed.producer.worker.loop`) sends them and counts them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from typing import ClassVar, Self

import numpy as np

from h5feed.common import layouts, object_urls
from h5feed.common.config import CLIP_SEMANTICS, ClipSpec
from h5feed.common.errors import FileReadError
from h5feed.common.protocol import messages
from h5feed.common.version import __version__
from h5feed.common.worker_settings import DEFAULT_DATA, NO_CODE, Code, Data
from h5feed.producer.files import confine, request_counts
from h5feed.producer.files.index_cache import MemoryIndex
from h5feed.producer.files.open_files import OpenFiles, check_readable
from h5feed.producer.files.read_limits import ProducerLimits
from h5feed.producer.worker import loaded_code
from h5feed.producer.worker.clips import ClipMaker
from h5feed.producer.worker.code_policy import policy_of
from h5feed.producer.worker.job import JobContext, Produced
from h5feed.producer.worker.loaded_code import CodeVersionRefused
from h5feed.producer.worker.shm import SlotError, SlotMaps
from h5feed.producer.worker.stats import WorkerCounters

#: An INDEX_BATCH holds at most this many files, videos, and bytes of names (its header stays
#: well under the wire's 2 MiB limit; a file larger than that is sent alone).
BATCH_FILES = 1024
BATCH_VIDEOS = 65_536
BATCH_NAME_BYTES = 1 << 20

#: The whole batch's array in a shared-memory slot, and a unit's row positions in it.
SlotTarget = tuple[np.ndarray, Sequence[int]]
_log = logging.getLogger("h5feed.worker")


def job_spec(job: messages.Job) -> tuple[ClipSpec, layouts.LayoutSpec]:
    """The clip spec and the layout of ``job``; ValueError for a bad one, or for a job whose
    clips mean another thing than this worker cuts (its clip semantics)."""
    if job.clip_semantics != CLIP_SEMANTICS:
        raise ValueError(
            f"the job needs clips of semantics {job.clip_semantics}; this worker "
            f"(h5feed {__version__}) cuts clips of semantics {CLIP_SEMANTICS}"
        )
    return ClipSpec.from_wire(dict(job.clip)), layouts.from_wire(dict(job.layout))


class Hdf5Job:
    """The files and clip spec of one HDF5 job, opened in this process.

    Guarantees:

    1. Creating it imports the user's transform if ``policy`` allows it, so a bad or refused
       import path fails the job when it starts (the caller reports it), before any file is
       opened; a refused one imports nothing (``CodeRefused``); a copy of the module other
       than the trainer's is refused (``CodeVersionRefused``:
       :mod:`~h5feed.producer.worker.loaded_code`).
    2. Files are opened in the worker process that reads them (h5py handles never cross a
       fork); at most ``max_open_files`` are open at once (least recently used closed
       first, reopened on demand), all closed by :meth:`close`.
    3. A file that cannot be opened or indexed is answered with an ERROR naming it; the
       job's other files are still indexed and answered (INDEX_BATCH). A file whose index
       comes from memory or the cache is not opened until a unit reads it.
    4. A slot that cannot be mapped (:class:`~h5feed.producer.worker.shm.SlotError`) turns slots off
       for this job only (:attr:`slots_failed`; logged, and counted once in ``slots_refused``):
       its units' rows go over the socket; the next job tries slots again.
    5. With a ``data_root`` every path is confined to it (:mod:`h5feed.producer.files.confine`): a
       path that leaves it is answered with a PathRefused ERROR naming it, unopened. Without
       one (local workers of a trainer), paths are opened as given.
    6. Every file is checked (``stat`` and access, :func:`check_readable`) before it is
       opened: a missing file, a directory or an unreadable one is an ERROR of type
       ``FileReadError`` naming the file and this host, as is any I/O error reading a file
       later (never skipped).
    7. ``on_error="skip"``: a bad frame (``FrameError``) zero-fills its row (in the slot
       too) and is listed in the DATA's ``skipped``, with its frame and the reason; with
       ``"raise"`` it is an ERROR naming file, video and frame.
    8. A job of more files than ``max_open_files`` closes each file as soon as its index is
       read: units start only once every file is indexed, so the open-files bound would close
       nearly all of them before a unit reads one, and HDF5 closes cost more the more files
       are open (h5py: ~2.8 ms a file with 128 open, ~1.2 ms alone), which halves the
       indexing of many small files. A job within the bound keeps its files open.
    9. A job of files named by URL says in each DATA what its reads of object storage cost
       since the previous part (``storage``: :mod:`h5feed.producer.files.request_counts`);
       a job of local files never does (an earlier release's trainer, which sends no URL,
       never meets the field).
    10. Not thread-safe: the worker's single event-loop thread uses it.
    """

    STARTS: ClassVar[type[messages.Message]] = messages.Job
    UNITS: ClassVar[tuple[type[messages.Message], ...]] = (messages.Unit,)
    DESCRIBED: ClassVar[str] = "an HDF5"

    def __init__(
        self,
        job_id: str,
        spec: ClipSpec,
        layout: layouts.LayoutSpec,
        on_error: str = "raise",
        code: Code = NO_CODE,
        data: Data = DEFAULT_DATA,
        memory: MemoryIndex | None = None,
        files: OpenFiles | None = None,
        identities: Sequence[messages.CodeIdentity] = (),
        counters: WorkerCounters | None = None,
    ) -> None:
        """``code``, ``data``: the worker's settings (:mod:`h5feed.common.worker_settings`):
        which user code it may import, its data root, open-files cap and the producer's own
        caps (``h5feed produce``), which lower the job's (a job over ``max_clip_pixels`` is
        refused here: LimitRefused). ``memory``, ``files``: a persistent worker's indexes and
        open files, kept across its jobs, if any. ``identities``: the transform module as the
        trainer has it (another copy loaded here: CodeVersionRefused). ``counters``: the
        worker's, for files reopened and slots refused (None: counted nowhere)."""
        self.id = job_id
        self.counters = WorkerCounters(None, "") if counters is None else counters
        self.cache_dir = data.cache_dir
        self.skip = on_error == "skip"
        self.data_root = data.data_root
        # Imports the transform: a bad or refused path fails here.
        self.maker = ClipMaker(
            spec,
            layout,
            policy_of(code.allow_code, code.trust_code),
            data.data_root,
            data.max_open_files,
            memory,
            files,
            ProducerLimits.of(data),
        )
        try:
            loaded_code.check(identities)
        except CodeVersionRefused:
            self.maker.close()
            raise
        self.spec = self.maker.spec  # the job's, under the producer's caps
        self.slots = SlotMaps()
        self.slots_failed = False  # a slot of this job could not be mapped: stop trying
        self.remote = False  # a file of it is named by URL: its DATA say what reads cost
        self.upcoming: list[messages.Row] = []  # the waiting units' rows (reads_ahead)
        request_counts.take()  # an earlier job's reads are not this job's (guarantee 9)

    @classmethod
    def open(cls, start: messages.Job, context: JobContext) -> Self:
        """The job a JOB starts: ValueError for a bad spec (:func:`job_spec`); the transform
        imported (guarantee 1)."""
        clip, layout = job_spec(start)
        settings = context.settings
        return cls(
            start.job, clip, layout, start.on_error, settings.code, settings.data,
            context.memory, context.files, start.code, context.counters,
        )  # fmt: skip

    def take(self, start: messages.Job) -> Iterator[messages.IndexBatch | messages.Error]:
        """Index the JOB's files (:meth:`open_files`); a later JOB of this job adds files
        (taken over from a worker that left). The consumer names a cache directory when the
        index cache is on; a service worker uses its host's own directory instead (the
        consumer's path is on another host)."""
        cache_dir = (self.cache_dir or start.cache_dir) if start.cache_dir else None
        return self.open_files(start.files, cache_dir, start.send_index)

    def check(self, check: messages.Check) -> None:
        """An HDF5 job has no CHECK (its files are the same in every worker)."""
        return None

    def close(self) -> None:
        self.maker.close()
        self.slots.close()

    @property
    def files_reopened(self) -> int:
        """Files reopened so far, after being closed to stay under ``max_open_files``."""
        return self.maker.files.reopened

    def open_files(
        self, files: Sequence[messages.FileRef], cache_dir: str | None, send_index: bool = True
    ) -> Iterator[messages.IndexBatch | messages.Error]:
        """Index each file, yielding INDEX_BATCHes of the indexed ones (unless not
        ``send_index``: the trainer knows them) and an ERROR naming the path (as the JOB gave
        it) of each that fails. Paths are confined to the data root, if any; ``cache_dir``
        None means no index cache."""
        pending: list[tuple[int, list[bytes], np.ndarray, np.ndarray]] = []
        videos_in, name_bytes = 0, 0
        opened = self.maker.files
        close_once_indexed = len(self.maker.videos) + len(files) > opened.max_open  # guarantee 8
        for number, path in files:
            self.remote = self.remote or object_urls.is_url(path) or self._under_url_root
            try:
                resolved = confine.job_path(path, self.data_root)  # before any file access
                check_readable(number, resolved)  # also where a file would be opened lazily
                videos = self.maker.open_and_index(number, resolved, cache_dir)
                if close_once_indexed:
                    opened.release(number)
            except Exception as exc:  # any failure must reach the trainer, with the file named
                if isinstance(exc, FileReadError) and exc.number is None:
                    exc.number = number  # so that the trainer can move the file
                yield messages.Error.of(self.id, None, exc, file=path)
                continue
            if not send_index:
                continue
            names, frames, labels = self.maker.columns[number]
            size = sum(map(len, names))
            full = (
                len(pending) >= BATCH_FILES
                or videos_in + len(videos) > BATCH_VIDEOS
                or name_bytes + size > BATCH_NAME_BYTES
            )
            if pending and full:
                yield messages.IndexBatch.of_columns(self.id, pending)
                pending, videos_in, name_bytes = [], 0, 0
            pending.append((number, names, frames, labels))
            videos_in, name_bytes = videos_in + len(videos), name_bytes + size
        if pending:
            yield messages.IndexBatch.of_columns(self.id, pending)

    def slot_target(self, slot: messages.SlotRef | None) -> SlotTarget | None:
        """Where ``slot``'s rows go: None when there is no slot or when the frame size is not
        known before decoding (no resize or crop: the slot's row size is unknown). SlotError
        when the slot cannot be mapped here."""
        height, width = self.spec.frame_shape
        if slot is None or height is None or width is None:
            return None
        row_shape = (self.spec.clip_len, height, width, 3)
        return self.slots.batch_array(slot, row_shape, self.id), slot.positions

    def target(self, slot: messages.SlotRef | None) -> SlotTarget | None:
        """Where a unit's rows go in its slot, or None: no slot, or one this worker cannot
        map (logged and counted once per job; from then on every unit of this job sends its
        rows over the socket, guarantee 4)."""
        if self.slots_failed:
            return None
        try:
            return self.slot_target(slot)
        except SlotError as exc:
            _log.warning(
                "worker %s: job %s: %s; sending rows over the socket for this job",
                self.counters.worker, self.id, exc,
            )  # fmt: skip
            self.counters.add("slots_refused")
            self.slots_failed = True
            return None

    @property
    def reads_ahead(self) -> bool:
        """A job of files on object storage fetches ahead what its next units read."""
        return self.remote

    def expect(self, units: Sequence[messages.Unit]) -> None:
        self.upcoming = [row for unit in units for row in unit.rows]

    def produce(self, unit: messages.Unit) -> Produced:
        """The DATA answering ``unit`` and the bytes of clips it made: into the unit's
        shared-memory slot when it names one this worker can map (:meth:`target`; the DATA
        carries no array), else into a new array sent with DATA. Files reopened meanwhile
        are counted (``files_reopened``), failed or not."""
        reopened = self.files_reopened
        try:
            data, nbytes = self.make(unit, self.target(unit.slot))
        finally:
            self.counters.add("files_reopened", self.files_reopened - reopened)
        if self.remote:
            reads = request_counts.take()
            data = dataclasses.replace(data, storage=reads if any(reads) else None)
        return data, nbytes

    @property
    def _under_url_root(self) -> bool:
        """This producer's data root is a URL: a JOB's relative names are keys under it."""
        return self.data_root is not None and object_urls.is_url(self.data_root)

    def make(self, unit: messages.Unit, target: SlotTarget | None) -> Produced:
        """The DATA answering ``unit`` and the bytes of clips it made. With a ``target`` (see
        :meth:`slot_target`) the clips are written there and the DATA carries no array."""
        arrays: dict[str, np.ndarray] = {}
        if target is not None:
            batch, positions = target
            _out, bad = self.maker.produce(
                unit.rows, batch, positions, self.skip, upcoming=self.upcoming
            )
            nbytes = len(unit.rows) * batch[0].nbytes  # one row of the batch per clip
        else:
            arrays["frames"], bad = self.maker.produce(
                unit.rows, skip=self.skip, upcoming=self.upcoming
            )
            nbytes = arrays["frames"].nbytes
        samples = tuple(row.sample for row in unit.rows)
        skipped = tuple(
            messages.SkippedRow(r, exc.frame or 0, str(exc)[: messages.MAX_SKIP_REASON])
            for r, exc in bad
        )
        data = messages.Data(self.id, unit.unit, unit.batch, samples, arrays, skipped)
        return data, nbytes
