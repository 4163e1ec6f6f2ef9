"""What the HDF5 scheduler sends, as plain functions: files shared out by size, the JOB of a
worker's files, UNIT rows of a planned batch (and the record kept of each unit, :data:`Work`),
JOBs merged per worker and cut into parts, and two indexes of one file compared."""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import os
from collections.abc import Collection, Sequence

import numpy as np

from h5feed.common.config import CLIP_SEMANTICS
from h5feed.common.protocol import messages
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.scheduler import Send
from h5feed.consumer.options import HdfConfig
from h5feed.consumer.plan.epoch_plan import FileColumns, Index, PlannedBatch

#: A JOB lists at most this many files, and paths of at most this many UTF-8 bytes in all: a
#: worker takes a JOB of the job in hand as more files (protocol 4 already does), so a job of
#: 100,000 files goes as several JOBs, each far below the wire's 2 MiB header and 131,072
#: containers (one per file) however long its paths (up to 4 KiB each: PATH_MAX). Why 1,024
#: (as an INDEX_BATCH): a worker reads its socket only between messages, and the consumer
#: PINGs a silent worker twice a second; a part it indexes in seconds, not minutes, keeps the
#: PINGs queued meanwhile far below the socket's 1,000-message high-water mark (a full queue
#: stops libzmq's heartbeats on that connection, and libzmq 4.3.5 was seen to abort on
#: ``_input_stopped`` when it restarts: zeromq/libzmq#3937).
JOB_FILES = 1024
JOB_PATH_BYTES = 1 << 20

#: A unit's record: the positions of its rows in the batch, and whether they go to a slot.
Work = tuple[np.ndarray, bool]


def job_parts(
    config: HdfConfig,
    job_id: str,
    files: Sequence[int],
    send_index: bool = True,
    code: tuple[messages.CodeIdentity, ...] = (),
) -> list[messages.Job]:
    """The JOB that gives a worker ``files`` to open (and, with ``send_index``, asks for their
    INDEX), in parts (:func:`split_job`: a worker that has the job already adds the files of
    the next part); ``code``: the transform module's identity
    (h5feed.common.user_code.code_identity)."""
    refs = tuple(messages.FileRef(i, config.files[i]) for i in files)
    job = messages.Job(
        job_id, refs, config.clip.to_wire(), config.layout.to_wire(),
        config.data.index_cache, config.data.on_error, send_index, CLIP_SEMANTICS, code,
    )  # fmt: skip
    return split_job(job)


def split_job(job: messages.Job) -> list[messages.Job]:
    """``job`` as JOBs of the same job, in file order, each within :data:`JOB_FILES` files and
    :data:`JOB_PATH_BYTES` bytes of paths (a JOB of no file stays one: it carries the spec)."""
    parts: list[messages.Job] = []
    start, size = 0, 0
    for end, ref in enumerate(job.files):
        length = len(ref.path.encode(errors="surrogateescape"))
        if end > start and (end - start >= JOB_FILES or size + length > JOB_PATH_BYTES):
            parts.append(dataclasses.replace(job, files=job.files[start:end]))
            start, size = end, 0
        size += length
    if start < len(job.files) or not parts:
        parts.append(dataclasses.replace(job, files=job.files[start:]))
    return parts


def merge_jobs(sends: list[Send], alone: Collection[int] = ()) -> list[Send]:
    """Per peer, its JOBs merged (every file it was given, in order; those that ask for the
    INDEX apart from those that do not) and cut again into parts
    (:func:`split_job`), ahead of its units; a JOB of one file in ``alone`` (a suspect: see
    :mod:`h5feed.consumer.hdf5.index_attempts`) stays a JOB of its own, after the merged ones."""
    # Keyed by peer and send_index: an extra reader's JOB that asks for no INDEX
    # (h5feed.consumer.hdf5.sharing) never merges into one that does, nor the reverse.
    jobs: dict[tuple[Peer, bool], messages.Job] = {}
    apart: list[Send] = []
    rest: list[Send] = []
    for send in sends:
        message = send.message
        if isinstance(message, messages.Job) and any(ref.number in alone for ref in message.files):
            for ref in message.files:  # each file alone: a death names its file
                apart.append(Send(send.peer, dataclasses.replace(message, files=(ref,))))
        elif isinstance(message, messages.Job):
            key = (send.peer, message.send_index)
            before = jobs.get(key)
            jobs[key] = (
                message
                if before is None
                else dataclasses.replace(before, files=before.files + message.files)
            )
        else:
            rest.append(send)
    parts = [Send(peer, part) for (peer, _i), job in jobs.items() for part in split_job(job)]
    return parts + apart + rest


def first_difference(planned: FileColumns, found: FileColumns) -> str | None:
    """Where two indexes of one file first differ, in words; None if they are the same."""
    for position, name in enumerate(planned.names):
        if position >= len(found.names):
            break
        want = (name, int(planned.frames[position]), int(planned.labels[position]))
        got = (found.names[position], int(found.frames[position]), int(found.labels[position]))
        if want != got:
            found_name = got[0].decode(errors="replace")
            return (
                f"video {name.decode(errors='replace')!r}: planned (frames, label) {want[1:]}, "
                f"found {found_name!r} {got[1:]}"
            )
    if len(planned.names) != len(found.names):
        return f"{len(planned.names)} videos planned, {len(found.names)} found"
    return None


def assign_files(sizes: Sequence[int], workers: int) -> np.ndarray:
    """The worker slot owning each file: largest files first, each to the least loaded slot.

    Deterministic (ties go to the lower index). Every file has exactly one owner; with more
    workers than files, some workers own nothing.
    """
    owner = np.zeros(len(sizes), np.int64)
    if not workers:
        return owner
    raw = np.asarray(sizes, np.int64).reshape(-1)
    weights = np.maximum(raw, 1)  # an empty (or unreadable) file still counts as one
    largest_first = np.lexsort((np.arange(len(raw)), -raw)).tolist()
    loads = [(0, slot) for slot in range(workers)]  # a heap: least loaded, then lowest slot
    for file_index, weight in zip(largest_first, weights[largest_first].tolist(), strict=True):
        load, slot = heapq.heappop(loads)
        owner[file_index] = slot
        heapq.heappush(loads, (load + weight, slot))
    return owner


def unit_rows(index: Index, planned: PlannedBatch) -> list[messages.Row]:
    """One UNIT row per sample of ``planned``, in batch order."""
    rows = zip(
        planned.samples.tolist(),
        index.file_of_video[planned.videos].tolist(),
        index.video_in_file[planned.videos].tolist(),
        planned.starts.tolist(),
        planned.crop_uniforms[:, 0].tolist(),
        planned.crop_uniforms[:, 1].tolist(),
        planned.flips.tolist(),
        planned.seeds.tolist(),
        strict=True,
    )
    return list(itertools.starmap(messages.Row, rows))


def file_size(path: str) -> int:
    """``path``'s size in bytes, 0 if it cannot be stat'ed here."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0  # the owning worker reports the unreadable file with its name
