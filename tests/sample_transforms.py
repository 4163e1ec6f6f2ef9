"""Per-sample transforms the tests import by path in the workers (tests/ is on PYTHONPATH)."""

from __future__ import annotations

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
