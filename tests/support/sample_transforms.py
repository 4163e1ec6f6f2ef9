"""Per-sample transforms the tests import by path in the workers (tests/ is on PYTHONPATH)."""

from __future__ import annotations

import os
import random

import numpy as np


def to_float(clip: np.ndarray, rng: np.random.Generator, scale: float = 1.0) -> np.ndarray:
    """float32 in [0, scale], plus noise drawn from ``rng`` (so the seed matters)."""
    assert clip.dtype == np.uint8 and clip.ndim == 4 and clip.shape[3] == 3
    noise = rng.normal(0.0, 0.01, clip.shape).astype(np.float32)
    return clip.astype(np.float32) * (scale / 255.0) + noise


def rng_only(clip: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Only the generator's draws: the output shows the seed the sample got."""
    return rng.random(4)


def mean_pool(clip: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """[T, H, W, 3] uint8 -> [T, 3] float32."""
    return clip.mean(axis=(1, 2), dtype=np.float32)


def numeric_threads(clip: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The worker's OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and MKL_NUM_THREADS (0: unset)."""
    names = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    return np.array([int(os.environ.get(name, "0")) for name in names], np.int64)


#: Five clips' worth of a worker's allocations fault about 4,400 pages in when the heap's top
#: is given back after each clip (glibc's defaults, in a fresh interpreter).
FEW_FAULTS = 50


def churn_faults(clips: int = 5) -> int:
    """The page faults of ``clips`` clips' worth of a worker's allocations, after one such
    clip to warm the heap (h5feed/common/system/allocator.py): per clip, 16 decoded
    320x240 frames alive together (as a transform holding its clip has them) and freed
    together. glibc's defaults give the top of the heap back after each clip (more than
    twice the largest block freed lies free there), so every clip faults its ~900 pages in
    again. Counted for the calling thread alone: a worker's other threads (its sockets'
    and heartbeat's) fault pages of their own meanwhile."""
    import resource

    def clip() -> None:
        frames = [np.ones((240, 320, 3), np.uint8) for _ in range(16)]
        del frames

    clip()
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(clips):
        clip()
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before


def page_faults(clip: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """:func:`churn_faults` in the worker that makes this clip."""
    return np.array([churn_faults()], np.int64)


def raises(clip: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    raise ValueError("boom in the user's transform")


def varying_shape(clip: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A contract breach: the shape depends on the draw."""
    return np.zeros(int(rng.integers(1, 4)), np.float32)


def object_dtype(clip: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.array([None], dtype=object)


NOT_CALLABLE = 3


def sleeps(clip: np.ndarray, rng: np.random.Generator, marker: str, seconds: float = 60) -> None:
    """A call that blocks for a long time: writes ``marker`` first, so a test knows it began."""
    import pathlib
    import time

    pathlib.Path(marker).write_text("sleeping")
    time.sleep(seconds)


def exits(clip: np.ndarray, rng: np.random.Generator, code: int = 3) -> np.ndarray:
    """A worker process that dies on every sample (a crash the consumer cannot survive)."""
    import os

    os._exit(code)


def sleeps_once(clip: np.ndarray, rng: np.random.Generator, marker: str) -> np.ndarray:
    """Stuck once in the whole run (the first call anywhere), then an identity transform:
    a worker that hangs in user code while its process stays alive and answers heartbeats."""
    import os
    import time

    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return clip
    time.sleep(120)
    return clip


def global_random(clip: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draws from Python's ``random`` and NumPy's global generator, not from ``rng``."""
    return np.asarray([random.random(), np.random.random()], np.float64)


def kills_itself_on(
    clip: np.ndarray, rng: np.random.Generator, digest: str, deaths: str
) -> np.ndarray:
    """A poison sample: the worker that makes the clip whose SHA-256 is ``digest`` SIGKILLs
    its own process (after appending a line to ``deaths``); every other clip passes as is."""
    import hashlib
    import os
    import signal

    if hashlib.sha256(np.ascontiguousarray(clip).tobytes()).hexdigest() == digest:
        with open(deaths, "a") as out:
            out.write(f"{os.getpid()}\n")
        os.kill(os.getpid(), signal.SIGKILL)
    return clip


def holds_until_stopped(
    clip: np.ndarray, rng: np.random.Generator, marker: str, after_stop_s: float = 0.0
) -> np.ndarray:
    """The first call anywhere (``marker + ".lock"`` made with O_EXCL) holds its unit until its
    worker is asked to stop (SIGTERM), works ``after_stop_s`` more, writes
    ``marker + ".finished"`` and returns the clip; every other call is the identity.

    ``marker`` holds the pid of the worker's parent (its producer service) once the hold began.
    The worker's own SIGTERM handler still runs (it is called from this one). Bounded: with no
    SIGTERM within 120 s it raises, and the unit's ERROR reaches the trainer."""
    import os
    import pathlib
    import signal
    import time

    try:
        os.close(os.open(marker + ".lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return clip
    stopped: list[bool] = []
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: object) -> None:
        stopped.append(True)
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, on_sigterm)
    pathlib.Path(marker + ".tmp").write_text(str(os.getppid()))
    os.replace(marker + ".tmp", marker)  # whole, or not there
    deadline = time.monotonic() + 120
    while not stopped:  # a signal cuts the sleep short; the handler runs between sleeps
        if time.monotonic() > deadline:
            raise TimeoutError("holds_until_stopped: no SIGTERM within 120 s")
        time.sleep(0.05)
    time.sleep(after_stop_s)  # the unit's remaining work (longer than the stop wait, or not)
    pathlib.Path(marker + ".finished").write_text("finished")
    return clip


def slow(clip: np.ndarray, rng: np.random.Generator, seconds: float = 0.05) -> np.ndarray:
    """A costly transform (a fixed time per clip): the workers, not the trainer, are slow."""
    import time

    time.sleep(seconds)
    return clip.mean(axis=(1, 2), dtype=np.float32)
