"""Worker processes started on this machine for one iteration (or, persistent, for every
iteration of a dataset: :mod:`h5feed.consumer.processes.worker_pool`).

Each worker is ``python -m h5feed.producer.worker`` in a fresh interpreter (never a fork of
the
trainer, and never a ``multiprocessing`` spawn that re-imports the trainer's ``__main__``, so a
script without an ``if __name__ == "__main__":`` guard works, unless it names
``"__main__:..."``: see :mod:`h5feed.common.user_code.trainer_main`). Its ``sys.path`` starts with
the
trainer's (``PYTHONPATH``), so ``source=`` and ``transform=`` modules are found where the
trainer finds them. Guarantees:

1. Workers ignore SIGINT: Ctrl-C reaches the trainer, which stops them.
2. A worker dies with the trainer process, even by SIGKILL and even while blocked in a long
   call: it asks the kernel for SIGKILL when its parent goes (``PR_SET_PDEATHSIG``, Linux),
   and also watches its parent pid between messages (other systems). Workers are forked by
   one long-lived thread (:mod:`h5feed.consumer.processes.spawner`), because the kernel sends that
   signal when the forking *thread* exits.
3. :meth:`LocalWorkers.stop` returns within about ``grace_s + 2`` seconds: it waits for the
   workers to leave after BYE, then sends SIGTERM, then SIGKILL, and reaps every process.
4. :meth:`LocalWorkers.grow` and :meth:`LocalWorkers.retire` (``workers="auto"``) start
   one more worker under the next reserved name, and ask the last one to leave (SIGTERM:
   it hands its units back); a retired worker is never replaced, and is killed when its
   loss is handled (:meth:`LocalWorkers.kill_retired`).
5. :meth:`LocalWorkers.replace` starts a new process under a dead (or killed) worker's name.
   Only a crash loop counts: the death of a process that returned no DATA part since it
   started (:meth:`LocalWorkers.delivered` was never told of its pid). At most
   ``max_restarts`` such deaths per worker within :data:`RESTART_WINDOW_S` are replaced; one
   more raises :class:`~h5feed.common.errors.WorkerDiedError` (a worker that dies on every
   start is a bug to report, not bad luck to retry forever). A process that delivered and
   then died (an OOM killer on a host under memory pressure) is replaced every time: it was
   working. A poison unit that kills each process making it is bounded elsewhere
   (``max_unit_attempts``: :mod:`h5feed.consumer.core.recovery`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from h5feed.common.errors import WorkerDiedError, WorkerTimeoutError
from h5feed.common.system.package_dir import package_parent
from h5feed.common.trust.curve import (
    CURVE_ENV_PUBLIC,
    CURVE_ENV_SECRET,
    CURVE_ENV_SERVER,
    KeyPair,
)
from h5feed.common.user_code import trainer_main
from h5feed.common.worker_counters import COUNTERS, read_counters
from h5feed.common.worker_settings import WorkerSettings
from h5feed.consumer.processes.spawner import spawn

_PACKAGE_PARENT = package_parent()
_TERM_WAIT_S = 1.0
_KILL_WAIT_S = 1.0
#: The window of ``max_restarts``.
RESTART_WINDOW_S = 60.0


def local_worker(address: str, prefix: str, **values: Any) -> WorkerSettings:
    """The template of a trainer's own workers: ``values`` by field name of
    :class:`~h5feed.common.worker_settings.WorkerSettings` (the rest their defaults), children
    of this process that run the code the trainer names, found where the trainer finds it
    (``trust_code``: no ``-P``). ``address``: where they connect; ``prefix``: their names'
    (each worker is ``prefix-i``: :class:`LocalWorkers`)."""
    trainer = {"connect": address, "worker_id": prefix, "parent_pid": os.getpid()}
    return WorkerSettings.from_values({"trust_code": True, **values, **trainer})


class LocalWorkers:
    """A set of local worker processes, all started with one template of settings."""

    def __init__(
        self,
        count: int,
        settings: WorkerSettings,
        keys: KeyPair | None = None,
        server_public: bytes | None = None,
        max_restarts: int = 3,
        reserve: int = 0,
    ) -> None:
        """``settings``: every worker's (:func:`local_worker`), but for its name: its
        ``worker_id`` is the names' prefix, and each worker gets its own stats file.
        ``reserve``: names for this many workers in all (``workers="auto"``: those it may
        :meth:`grow` to); ``max_restarts``: see :meth:`replace`. A persistent template
        (``settings.process.persistent``): a BYE ends a worker's job, not the worker (it waits
        for the next one, keeping its indexes: see
        :mod:`h5feed.consumer.processes.worker_pool`); :meth:`stop` still ends it (SIGTERM
        after ``grace_s``). ``keys``, ``server_public``: this iteration's CURVE keys, given
        to the workers in their environment."""
        env = dict(os.environ)
        if keys is not None and server_public is not None:  # CURVE: this iteration's own keys
            env[CURVE_ENV_PUBLIC] = keys.public.decode()
            env[CURVE_ENV_SECRET] = keys.secret.decode()
            env[CURVE_ENV_SERVER] = server_public.decode()
        # Workers import h5feed from where the trainer did, installed or not, and look for
        # the user's modules (source= and transform= alike) where the trainer does: its
        # sys.path, in its order. Its __main__: see h5feed.common.user_code.trainer_main.
        env["PYTHONPATH"] = os.pathsep.join(
            dict.fromkeys(p for p in (_PACKAGE_PARENT, *trainer_path(), env.get("PYTHONPATH")) if p)
        )
        main = trainer_main.describe_main()
        if main is not None:
            env[trainer_main.MAIN_ENV] = main
        else:
            env.pop(trainer_main.MAIN_ENV, None)
        # Every name a worker of this set may have: the running ones are the first
        # len(processes) (grow starts the next, retire ends the last).
        prefix = settings.process.worker_id
        self.names = [f"{prefix}-{i}" for i in range(max(count, reserve))]
        # Each worker writes its counters here (--stats-file): stats() reads slots_refused.
        self._stats_dir = tempfile.mkdtemp(prefix="h5feed-workers-")
        self._base: collections.Counter[str] = collections.Counter()  # replaced processes'
        self.processes: list[subprocess.Popen[bytes]] = []
        self.max_restarts = max_restarts
        self.restarts = 0  # processes started to replace dead ones
        self._env = env
        self._commands: list[list[str]] = []
        # crash-loop losses: (when, whether it was a hang)
        self._restarted: dict[str, collections.deque[tuple[float, bool]]] = {}
        self._delivered: set[int] = set()  # pids that returned a DATA part
        self.retired: set[int] = set()  # pids replaced: whatever they said is stale
        self._leaving: list[subprocess.Popen[bytes]] = []  # retired by retire(), not reaped
        self._settings = settings
        try:
            for name in self.names[:count]:
                self._start(name)
        except BaseException:
            self.stop(grace_s=0)
            raise

    def _start(self, name: str) -> None:
        """Start worker ``name``, the next of :attr:`names` (the running ones come first)."""
        template = self._settings
        process = dataclasses.replace(
            template.process, worker_id=name, stats_file=self._stats_file(name)
        )
        command = dataclasses.replace(template, process=process).command()
        self._commands.append(command)
        self.processes.append(spawn(command, self._env))

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def _pairs(self) -> list[tuple[str, subprocess.Popen[bytes]]]:
        """(name, process) of the started workers, from one look at the list (the loop
        thread grows and retires while the trainer's thread reads figures)."""
        processes = list(self.processes)
        return list(zip(self.names, processes, strict=False))  # names: the reserved ones too

    @property
    def running(self) -> list[str]:
        """The names of the started workers (running, or dead and not yet replaced)."""
        return self.names[: len(self.processes)]

    def grow(self) -> str | None:
        """Start one more worker (``workers="auto"``); its name, or None when every
        reserved name runs. It joins the running iteration as any peer that says hello."""
        if len(self.processes) >= len(self.names):
            return None
        name = self.names[len(self.processes)]
        self._start(name)
        return name

    def retire(self) -> str | None:
        """Ask the last started worker to leave (SIGTERM: it sends the unit in hand, then a
        BYE that hands back the rest, and exits); its name, or None when one worker is left.
        It is no longer one of :attr:`pids`, so its loss is handed over, never replaced; it
        is killed if it has not left within ``grace_s`` of :meth:`reap` (it must never write
        into shared memory after its units went to others)."""
        if len(self.processes) <= 1:
            return None
        name = self.names[len(self.processes) - 1]
        process = self.processes.pop()
        self._commands.pop()
        self._delivered.discard(process.pid)
        self._restarted.pop(name, None)
        self.retired.add(process.pid)
        process.terminate()
        self._leaving.append(process)
        return name

    def reap(self) -> None:
        """Fold the figures of retired workers that left; cheap, called between units."""
        for process in list(self._leaving):
            if process.poll() is not None:
                self._leaving.remove(process)
                self._fold_pid(process.pid)

    def kill_retired(self, pid: int) -> None:
        """SIGKILL and reap retired process ``pid`` if it still runs: its work is handed
        to others now (a retired worker stuck in a unit must never write again)."""
        for process in self._leaving:
            if process.pid == pid and process.poll() is None:
                process.kill()
                _wait(process, _KILL_WAIT_S * 5)
        self.reap()

    def _stats_file(self, name: str) -> str:
        return os.path.join(self._stats_dir, f"{name}.json")

    def counter(self, key: str) -> int:
        """A counter of the workers' own (``h5feed.common.worker_counters.COUNTERS``), summed
        over every process started so far, those replaced and those stopped included."""
        total = self._base[key]
        for name, process in self._pairs():
            values = read_counters(self._stats_file(name))
            if values is not None and values.get("pid") == process.pid:
                total += int(values[key])
        return total

    def _fold_pid(self, pid: int) -> None:
        """Keep the last figures of ended process ``pid``, whichever name it had."""
        for name in self.names:
            self._fold(name, pid)

    def _fold(self, name: str, pid: int) -> None:
        """Keep the last figures of process ``pid`` (ended) of worker ``name``."""
        path = self._stats_file(name)
        values = read_counters(path)
        if values is not None and values.get("pid") == pid:
            for key in COUNTERS:
                self._base[key] += int(values[key])
            with contextlib.suppress(OSError):
                os.remove(path)

    def exited(self) -> list[tuple[str, int, int]]:
        """(name, pid, exit code) of every worker that is no longer running."""
        return [(name, p.pid, code) for name, p in self._pairs() if (code := p.poll()) is not None]

    def kill(self, name: str) -> int | None:
        """SIGKILL worker ``name`` (if it still runs) and reap it; its exit code."""
        process = self.processes[self.names.index(name)]
        if process.poll() is None:
            process.kill()
            _wait(process, _KILL_WAIT_S * 5)
        return process.poll()

    def delivered(self, pid: int) -> None:
        """Process ``pid`` (one of these workers) returned a DATA part: its death, whenever
        it comes, is no crash loop."""
        if pid in self.pids:
            self._delivered.add(pid)

    def replace(self, name: str, hung: bool = False) -> int:
        """Kill worker ``name`` if it still runs and start a new process under its name; the
        new pid. Past ``max_restarts`` losses within RESTART_WINDOW_S of processes that
        returned no DATA part (see :meth:`delivered`), raises WorkerDiedError, or
        WorkerTimeoutError when this loss is a hang (``hung``: killed for holding work past
        the unit timeout): a hang is never reported as a crash."""
        position = self.names.index(name)
        old = self.processes[position].pid
        self.kill(name)
        now = time.monotonic()
        recent = self._restarted.setdefault(name, collections.deque())
        while recent and now - recent[0][0] > RESTART_WINDOW_S:
            recent.popleft()
        if old in self._delivered:
            self._delivered.discard(old)  # it was working: no crash loop
        elif len(recent) >= self.max_restarts:
            hangs = sum(was_hung for _at, was_hung in recent) + hung
            deaths = len(recent) + 1 - hangs
            within = (
                f"within {RESTART_WINDOW_S:g} s (max_restarts={self.max_restarts}), each time "
                "before returning any data"
            )
            if hung:
                also = f" and died {deaths} times" if deaths else ""
                raise WorkerTimeoutError(
                    f"worker {name} hung {hangs} times{also} {within}: each start held work "
                    "past unit_timeout_s without answering (killed, not crashed): the code or "
                    "data it runs blocks"
                )
            also = f" and hung {hangs} times" if hangs else ""
            raise WorkerDiedError(
                f"worker {name} died {deaths} times{also} {within}: a crash loop; its output, "
                "if any, is on stderr above"
            )
        else:
            recent.append((now, hung))
        self.retired.add(old)
        self._fold(name, old)
        self.restarts += 1
        self.processes[position] = spawn(self._commands[position], self._env)
        return self.processes[position].pid

    def stop(self, grace_s: float = 2.0) -> None:
        """Wait up to ``grace_s`` for every worker to exit, then terminate, then kill."""
        steps: tuple[tuple[Callable[[subprocess.Popen[bytes]], None] | None, float], ...] = (
            (None, grace_s),
            (subprocess.Popen.terminate, _TERM_WAIT_S),
            (subprocess.Popen.kill, _KILL_WAIT_S),
        )
        for escalate, wait_s in steps:
            running = [p for p in (*self.processes, *self._leaving) if p.poll() is None]
            if not running:
                break
            if escalate is not None:
                for process in running:
                    escalate(process)
            deadline = time.monotonic() + wait_s
            for process in running:
                _wait(process, deadline - time.monotonic())
        if all(p.poll() is not None for p in self.processes):  # their last figures stay
            for name, process in self._pairs():
                self._fold(name, process.pid)
            self.reap()
            shutil.rmtree(self._stats_dir, ignore_errors=True)


def trainer_path() -> list[str]:
    """This process's ``sys.path`` as absolute paths (``""``, the current directory, made
    one), for a worker to search the same places in the same order."""
    return [os.path.abspath(p) if p == "" else p for p in sys.path if isinstance(p, str)]


def _wait(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    try:
        process.wait(timeout=max(timeout_s, 0.0))
    except subprocess.TimeoutExpired:
        return  # the caller escalates to SIGTERM / SIGKILL
