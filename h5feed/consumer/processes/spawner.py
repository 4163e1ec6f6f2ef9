"""One long-lived thread per trainer process that starts every local worker.

Why a thread of its own: a local worker asks the kernel for SIGKILL when its parent dies
(``PR_SET_PDEATHSIG``, see ``h5feed/producer/worker/lifetime.py``), so that a worker blocked in a
long call (a slow transform, a read from a hung filesystem) cannot outlive a SIGKILLed
trainer. Linux sends that signal when the *thread* that forked the worker exits, not when
the process does (prctl(2)). Iterations start in whatever thread calls ``iter()`` — often a
short-lived tf.data thread — and a worker forked there would be killed with that thread,
mid-epoch. Every worker is therefore forked by this one daemon thread, which lives as long
as the process (tests/unit/producer/test_lifetime.py shows both behaviours).

Guarantees:

1. :func:`spawn` returns the started process or raises what ``subprocess.Popen`` raised, or
   :class:`SpawnTimeoutError` after ``timeout_s``; it never blocks longer.
2. A process the caller stopped waiting for (timed out) is killed and reaped when it does
   start: no worker is left that nobody owns.
3. Thread-safe; after ``os.fork()`` the child process starts its own spawner thread.
4. Every worker is born with SIGTERM blocked (this thread blocks it; a child inherits its
   forking thread's mask through ``exec``): that tells the worker to take SIGTERM from the
   trainer only (``h5feed/producer/worker/lifetime.py``, guarantee 4), so a preemption's SIGTERM
   to every process of the job leaves the workers serving the trainer's last steps. The
   trainer itself is unaffected: its other threads take its signals.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence

#: How long a caller waits for its worker to be started (a fork+exec takes milliseconds).
SPAWN_TIMEOUT_S = 30.0
#: How often the idle thread wakes up: it waits for work with a bound, as every wait here.
_IDLE_POLL_S = 1.0


class SpawnTimeoutError(RuntimeError):
    """The spawner thread did not start the process in time."""


@dataclasses.dataclass(eq=False)
class _Request:
    command: list[str]
    env: dict[str, str]
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    abandoned: bool = False
    process: subprocess.Popen[bytes] | None = None
    error: BaseException | None = None


_lock = threading.Lock()
_requests: queue.Queue[_Request] = queue.Queue()
_owner_pid: int | None = None  # the process whose spawner thread serves _requests


def spawn(
    command: Sequence[str], env: Mapping[str, str], timeout_s: float = SPAWN_TIMEOUT_S
) -> subprocess.Popen[bytes]:
    """Start ``command`` (stdin from /dev/null, descriptors closed) from the spawner thread."""
    request = _Request(list(command), dict(env))
    _ensure_thread().put(request)
    if not request.done.wait(timeout_s):
        with request.lock:
            request.abandoned = True
            late = request.process
        if late is None:
            raise SpawnTimeoutError(f"no worker started within {timeout_s:g} s")
        _discard(late)  # started just as the wait ended: nobody would own it
        raise SpawnTimeoutError(f"no worker started within {timeout_s:g} s")
    if request.error is not None:
        raise request.error
    if request.process is None:  # unreachable: done is set with a process or an error
        raise SpawnTimeoutError("the spawner thread answered with nothing")
    return request.process


def _ensure_thread() -> queue.Queue[_Request]:
    global _requests, _owner_pid
    with _lock:
        if _owner_pid != os.getpid():  # first use, or a forked child: its thread is not here
            _requests = queue.Queue()
            _owner_pid = os.getpid()
            threading.Thread(
                target=_serve, args=(_requests,), name="h5feed-spawner", daemon=True
            ).start()
        return _requests


def _serve(requests: queue.Queue[_Request]) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # guarantee 4
    while True:
        try:
            request = requests.get(timeout=_IDLE_POLL_S)
        except queue.Empty:
            continue
        try:
            process = subprocess.Popen(
                request.command, env=request.env, stdin=subprocess.DEVNULL, close_fds=True
            )
        except BaseException as exc:  # handed to the caller, who raises it
            request.error = exc
            request.done.set()
            continue
        with request.lock:
            abandoned = request.abandoned
            if not abandoned:
                request.process = process
                request.done.set()
        if abandoned:
            _discard(process)


def _discard(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait(timeout=5)  # SIGKILL cannot be ignored: this returns at once
