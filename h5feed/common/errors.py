"""The errors h5feed raises. All derive from :class:`H5FeedError`."""

from __future__ import annotations


class H5FeedError(Exception):
    """Base class of every error h5feed raises on purpose."""


class ProtocolError(H5FeedError):
    """A message on the socket does not follow the wire format (see
    ``h5feed.common.protocol.wire``)."""


class VersionMismatchError(ProtocolError):
    """The peer speaks another protocol version."""


class FeatureVersionError(ProtocolError):
    """A message holds a field its peer's protocol version cannot carry: the job needs a
    feature of a later version (the message names the field and both versions)."""


class DataError(H5FeedError):
    """Bad input data: a file, video or frame that cannot be read or decoded.

    The message always names the file, and the video and frame where they are known.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        video: str | None = None,
        frame: int | None = None,
    ) -> None:
        where = ", ".join(
            part
            for part in (
                f"file {file!r}" if file is not None else "",
                f"video {video!r}" if video is not None else "",
                f"frame {frame}" if frame is not None else "",
            )
            if part
        )
        super().__init__(f"{message} ({where})" if where else message)
        self.file = file
        self.video = video
        self.frame = frame


class FrameError(DataError):
    """One stored frame is bad: it does not decode, its CRC32 differs from the one stored
    beside it (silent corruption, a truncated write), or its header is refused
    (``max_frame_pixels``). The only errors ``on_error="skip"`` skips: the sample is then
    zero-filled and marked ``valid=False`` instead of ending the run. Names file, video, frame."""


class FileReadError(DataError):
    """A whole file cannot be read on a host: missing, not a regular file, not readable,
    not HDF5, or an I/O error while reading it. Never skipped (``on_error`` does not apply):
    the file, not a frame, is at fault. Carries the file's number in the dataset (``number``,
    None when unknown) and the ``host``, both named in the message."""

    def __init__(
        self,
        message: str,
        *,
        file: str,
        host: str,
        number: int | None = None,
        video: str | None = None,
        frame: int | None = None,
    ) -> None:
        super().__init__(f"on host {host!r}: {message}", file=file, video=video, frame=frame)
        self.host = host
        self.number = number


class TooManySkippedError(H5FeedError):
    """``on_error="skip"`` skipped more samples in one epoch than ``max_skipped``: the data
    is worse than a few bad frames. The message lists the first skipped ones."""


class WorkerError(H5FeedError):
    """A worker raised while producing a unit; carries the worker's formatted traceback."""

    def __init__(self, worker: str, error_type: str, message: str, traceback: str) -> None:
        super().__init__(
            f"worker {worker} raised {error_type}: {message}\n"
            f"--- worker traceback ---\n{traceback.rstrip()}"
        )
        self.worker = worker
        self.error_type = error_type
        self.worker_message = message
        self.worker_traceback = traceback


class WorkerDiedError(H5FeedError):
    """A worker died more often than ``max_restarts`` allows, or its work cannot move."""


class PoisonUnitError(WorkerDiedError):
    """A unit's holder died ``max_unit_attempts`` times: something in it (a frame, an item,
    the user's transform on one sample) kills or stalls every worker that makes it. The
    message names its samples (file, video and frames; or items); ``samples`` lists them."""

    def __init__(self, message: str, samples: list[str]) -> None:
        super().__init__(message)
        self.samples = samples


class WorkerTimeoutError(H5FeedError):
    """The workers' handshake, or a keras source's check at an epoch's start, got no answer
    within the unit timeout; or a local worker hung (held work past the unit timeout) on
    every start, ``max_restarts`` times a minute, before returning any data. (A stuck worker
    holding units is otherwise not an error: it is replaced; see docs/guarantees.md.)"""


class NoWorkersError(H5FeedError):
    """No worker connected within the start timeout."""


class SourceError(H5FeedError):
    """A user source (``source=``) does not fit its contract: an import path that does not
    resolve, an object of no known kind, or an element that does not fit the element spec.
    The message names the source, the field (path like ``x/0/depth``) or the index."""


class InsecureWarning(UserWarning):
    """An address reachable from other hosts is used without CURVE keys because the caller
    said ``insecure=True`` (``--insecure``): anyone who reaches it can take part in the run.
    A ``UserWarning``, so Python shows it by default, whatever logging is configured."""


class MalformedPartWarning(UserWarning):
    """A remote producer sent a DATA part that does not fit its unit or the element spec: it
    was dropped (its unit waits for the unit timeout, then moves) and counted in
    ``stats()["malformed_messages"]``. A ``UserWarning``, so Python shows it by default,
    whatever logging is configured. (The same part from one of the iteration's own local
    workers ends the iteration with a :class:`ProtocolError` instead.)"""


class NondeterministicItemWarning(UserWarning):
    """An item of a user source (``source=``) is not the same twice in one worker although
    Python's ``random``, NumPy's and torch's global generators were seeded the same before
    each fetch: its randomness comes from elsewhere (``np.random.default_rng()`` without a
    seed, the time, a file that changes), so the same seed will not give the same batches and
    the copies in the workers cannot be checked against each other on that item. A
    ``UserWarning``, shown by default."""


class ResumeError(H5FeedError):
    """A resume state (``resume=``) that cannot be used: saved by another dataset (the
    message names every fingerprint field that differs), of another format, or malformed."""
