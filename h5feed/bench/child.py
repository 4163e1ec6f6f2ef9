"""A contender's child process as ``h5feed bench`` speaks to it: one request line, answers
read within a silence bound the caller gives, its stderr's tail on failure, its process tree
frozen while the per-core limit is timed, its memory sampled for the peak.

Guarantees: a child that makes progress is waited on (slow is not failed); a child silent
past the bound, or one that exits (even while its own children hold its stdout), raises
:class:`ContenderFailed` within the bound plus about a second, with its stderr's tail.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any, NoReturn

from h5feed.bench.run_one import PROGRESS, TAG
from h5feed.common.system.procstat import descendants, process_cpu_s, tree_memory_mb

#: How often a wait for a message also checks that the child lives: a child that exits while
#: its own children hold its stdout gives no end of file.
_EXIT_POLL_S = 1.0
#: How long a child asked to stop may take before it is terminated.
_STOP_GRACE_S = 30.0
_MEMORY_EVERY_S = 0.5  # the shortest pause between two memory samples
_MEMORY_MAX_LOAD = 0.005  # the share of one core the memory sampler may use
_STDERR_TAIL_CHARS = 2000


class ContenderFailed(Exception):
    """A contender process reported an error, exited, or did not answer in time."""


class ContenderProcess:
    """A ``run_one`` child process, spoken to by lines; its stderr goes to a temporary file
    (TensorFlow's logs), whose tail explains a failure.

    Slow is not hung: a child sends ``progress`` after a batch (at most every
    ``run_one.PROGRESS_EVERY_S``), and :meth:`receive` fails only after a *silence* of its
    ``silence_s``, however long the answer takes in all. So a loaded machine gives a slow
    figure, and a child that truly hangs (no message at all) is reported within
    ``silence_s``, with its stderr's tail, and terminated without being asked again. One
    that exits is reported with its exit code within ``_EXIT_POLL_S``, even while processes
    it started still hold its stdout (no end of file comes then). (A deadline fixed at the
    request, the warm-up plus the window plus 120 s, used to fail contenders whose batches
    merely came late on a loaded machine.)"""

    def __init__(self, label: str, spec: dict[str, Any]) -> None:
        self.label = label
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        self.process = subprocess.Popen(
            [sys.executable, "-m", "h5feed.bench.run_one", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        self._pending = b""
        self._silent = False  # it let a receive time out: stop() does not wait on it

    @property
    def pid(self) -> int:
        return self.process.pid

    def request(self, line: str) -> None:
        if self.process.stdin is None:
            raise RuntimeError("no stdin")
        try:
            self.process.stdin.write(line.encode() + b"\n")
            self.process.stdin.flush()
        except OSError as exc:
            tail = self.stderr_tail()
            raise ContenderFailed(f"{self.label}: process gone ({exc}){tail}") from exc

    def receive(self, kind: str, silence_s: float) -> dict[str, Any]:
        """The next message of ``kind``; ContenderFailed on an error message, an exit, or
        ``silence_s`` without any message (``progress`` restarts the count)."""
        deadline = time.monotonic() + silence_s
        while True:
            line, newline, rest = self._pending.partition(b"\n")
            if newline:
                self._pending = rest
                text = line.decode(errors="replace")
                if not text.startswith(TAG):
                    continue
                got, _, payload = text[len(TAG) :].partition(" ")
                message: dict[str, Any] = json.loads(payload)
                if got == "error":
                    raise ContenderFailed(f"{message['type']}: {message['message']}")
                if got == kind:
                    return message
                if got == PROGRESS:
                    deadline = time.monotonic() + silence_s
                continue
            self._read_more(deadline, silence_s)

    def _read_more(self, deadline: float, silence_s: float) -> None:
        stdout = self.process.stdout
        if stdout is None:
            raise RuntimeError("no stdout")
        left = deadline - time.monotonic()
        if left <= 0:
            self._silent = True
            raise ContenderFailed(
                f"{self.label}: no answer and no progress for {silence_s:.0f} s{self.stderr_tail()}"
            )
        readable, _, _ = select.select([stdout], [], [], min(left, _EXIT_POLL_S))
        if not readable and self.process.poll() is not None:
            # Exited; its workers may still hold the pipe, so no end of file would come.
            # Whatever it wrote before exiting is in the pipe now: read it first.
            readable, _, _ = select.select([stdout], [], [], 0)
            if not readable:
                self._exited()
        if readable:
            chunk = os.read(stdout.fileno(), 65536)
            if not chunk:
                self._exited()
            self._pending += chunk

    def _exited(self) -> NoReturn:
        code = self.process.wait()
        raise ContenderFailed(f"{self.label}: process exited with code {code}{self.stderr_tail()}")

    def stderr_tail(self) -> str:
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace")
        lines = [
            ln for ln in text.splitlines() if ln.strip() and not ln.startswith(("I0000", "W0000"))
        ]
        tail = "\n".join(lines)[-_STDERR_TAIL_CHARS:]
        return f"\n{tail}" if tail else ""

    def stop(self) -> None:
        """Ask the process to stop, then make sure it has (terminate, kill). One that let a
        receive time out is not asked: it is terminated at once."""
        if not self._silent:
            with contextlib.suppress(OSError, RuntimeError, ContenderFailed):
                self.request("stop")
        try:
            self.process.wait(timeout=0 if self._silent else _STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._stderr.close()


class MemorySampler:
    """Peak RSS and PSS (MB) of a process tree, sampled in a thread of this process.

    A sample is not free: reading ``smaps_rollup`` of a TensorFlow process costs ~10 ms of
    CPU, and on a small machine that CPU is taken from the contender being timed (sampled
    every 0.5 s it was 1-2 % of a 2-core machine). So the pause after each sample is at least
    ``_MEMORY_EVERY_S`` and at least ``1 / _MEMORY_MAX_LOAD`` times what the sample cost:
    the sampler never uses more than ``_MEMORY_MAX_LOAD`` of one core."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_rss_mb = 0.0
        self.peak_pss_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-memory", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        pause = _MEMORY_EVERY_S
        while not self._stop.wait(pause):
            began = time.thread_time()
            rss, pss = tree_memory_mb(self.pid)
            self.peak_rss_mb = max(self.peak_rss_mb, rss)
            self.peak_pss_mb = max(self.peak_pss_mb, pss)
            pause = max(_MEMORY_EVERY_S, (time.thread_time() - began) / _MEMORY_MAX_LOAD)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants."""
    return sum(process_cpu_s(p) for p in {pid} | descendants(pid))


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """``pid`` and all its descendants stopped (SIGSTOP) for the duration; continued
    (SIGCONT) afterwards, whatever happens."""
    frozen = []
    for target in [pid, *sorted(descendants(pid))]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGSTOP)
            frozen.append(target)
    try:
        yield
    finally:
        for target in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, signal.SIGCONT)
