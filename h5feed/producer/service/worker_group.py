"""The worker processes that serve one trainer: started, restarted, stopped together.

``h5feed produce --connect`` runs one group for its one trainer; a shared fleet
(``h5feed produce --listen``, :mod:`h5feed.producer.service.fleet`) one group per attached trainer,
so each trainer's job runs in processes of its own: its code, files and indexes are never
shared with another trainer's, and stopping a group leaves nothing of that trainer behind.

Guarantees (the service's, ``h5feed/producer/service/server.py``, per group):

1. A worker that dies is restarted: at once if that process returned a part since it started,
   else after the backoff of :class:`~h5feed.producer.service.restarts.Restarts`.
2. A worker refused by its trainer (another protocol version: exit status 2) is not
   restarted; :meth:`WorkerGroup.poll` says so and the caller stops the group.
3. :meth:`WorkerGroup.stop` asks every worker to stop (SIGTERM: it sends the unit in hand and
   hands the rest back), waits ``stop_wait_s`` and the flush of its last messages, then kills
   the late ones (logged).
4. A worker that cannot be started (``OSError``: no descriptor or memory left) is tried
   again after the backoff of a death without delivery, counted
   (:attr:`~h5feed.producer.service.restarts.Restarts.start_failures`) and named in the crash-loop
   report when it goes on (``h5feed health``); :meth:`WorkerGroup.poll` never raises it.
5. :meth:`WorkerGroup.cpu_seconds` is the CPU time (user + system) of every process the group
   ran, the ones that exited included (as last seen, at most one poll old).
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Callable, Sequence

from h5feed.common.system.procstat import process_cpu_s
from h5feed.common.worker_settings import WorkerSettings
from h5feed.producer.service.metrics import ServiceFigures
from h5feed.producer.service.restarts import Restarts
from h5feed.producer.worker.stats import read_counters

#: Beyond the stop wait, for a worker that sent its last unit at the end of it to flush it and
#: its BYE (its socket's linger, 2 s) and exit.
_FLUSH_S = 2.5
#: For a killed worker to be reaped.
_KILL_WAIT_S = 2.0
#: A worker's exit status when its trainer refused it (another protocol version).
REFUSED_EXIT = 2

Log = logging.Logger | logging.LoggerAdapter[logging.Logger]
#: (worker name, its stats file) -> its settings.
SettingsOf = Callable[[str, str], WorkerSettings]


class WorkerGroup:
    """Workers ``names`` serving one trainer, each made by ``settings_of``."""

    def __init__(
        self,
        names: Sequence[str],
        settings_of: SettingsOf,
        env: dict[str, str],
        stats_dir: str,
        restarts: Restarts,
        log: Log,
        figures: ServiceFigures | None = None,
    ) -> None:
        self.names = tuple(names)
        self._settings_of = settings_of
        self._env = env
        self._stats_dir = stats_dir
        self._restarts = restarts
        self._log = log
        self._figures = figures
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._seen: dict[int, tuple[float, float]] = {}  # pid -> (CPU s, busy s), last seen

    def stats_file(self, worker: str) -> str:
        return os.path.join(self._stats_dir, f"{worker}.json")

    def poll(self) -> bool:
        """Restart what died and is due (guarantee 1); False once a worker was refused by
        its trainer (guarantee 2): the caller stops the group."""
        for worker in self.names:
            process = self.processes.get(worker)
            exit_code = None if process is None else process.poll()
            if process is not None and exit_code is None:
                continue
            if process is not None and exit_code is not None:  # a death, seen once
                self._note(worker, process.pid)
                if self._figures is not None:
                    self._figures.set_running(worker, False)
                if exit_code == REFUSED_EXIT:
                    self._log.error("worker %s was refused; stopping", worker)
                    return False
                delivered = _delivered(self.stats_file(worker), process.pid)
                delay = self._restarts.died(worker, delivered, time.monotonic())
                del self.processes[worker]
                self._log.warning(
                    "worker %s exited (%s) %s; restarting %s",
                    worker, exit_code,
                    "after returning parts" if delivered else "before returning any part",
                    "now" if not delay else f"in {delay:g} s",
                )  # fmt: skip
            if self._restarts.due(worker, time.monotonic()):
                settings = self._settings_of(worker, self.stats_file(worker))
                try:
                    self.processes[worker] = subprocess.Popen(
                        settings.command(), stdin=subprocess.DEVNULL, env=self._env
                    )
                except OSError as exc:  # guarantee 4: EMFILE, ENOMEM, EAGAIN
                    delay = self._restarts.start_failed(worker, exc, time.monotonic())
                    self._log.warning(
                        "worker %s could not start: %s; trying again in %g s", worker, exc, delay
                    )
                    continue
                self._restarts.started(worker)
                if self._figures is not None:
                    self._figures.starting(worker, self.processes[worker].pid)
        for worker, process in self.processes.items():
            self._note(worker, process.pid)
        return True

    @property
    def running(self) -> int:
        """Worker processes running now."""
        return sum(p.poll() is None for p in self.processes.values())

    def cpu_seconds(self) -> float:
        """CPU seconds of every process this group ran (guarantee 5)."""
        return sum(cpu for cpu, _ in self._seen.values())

    def busy_seconds(self) -> float:
        """Seconds the group's processes spent making units, as their stats files said
        (written every second or so, so up to that much behind)."""
        return sum(busy for _, busy in self._seen.values())

    def _note(self, worker: str, pid: int) -> None:
        """What process ``pid`` has used so far; once it is reaped, the last reading stands."""
        cpu, busy = self._seen.get(pid, (0.0, 0.0))
        values = read_counters(self.stats_file(worker))
        if values is not None and values.get("pid") == pid:
            busy = max(busy, float(values["busy_s"]))
        self._seen[pid] = (max(cpu, process_cpu_s(pid)), busy)

    def stop(self, stop_wait_s: float) -> None:
        """Stop every worker (guarantee 3)."""
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()  # it sends the unit in hand, hands the rest back, leaves
        deadline = time.monotonic() + stop_wait_s + _FLUSH_S
        for worker, process in self.processes.items():
            try:
                process.wait(max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                self._log.warning(
                    "worker %s did not finish its unit within the stop wait (%g s): killed; "
                    "the trainer makes what it held again",
                    worker, stop_wait_s,
                )  # fmt: skip
                process.kill()
                process.wait(_KILL_WAIT_S)
            if self._figures is not None:
                self._figures.set_running(worker, False)


def _delivered(stats_file: str, pid: int) -> bool:
    """Whether process ``pid`` returned a part since it started, as its stats file says
    (a worker writes it at once after its first part)."""
    values = read_counters(stats_file)
    return values is not None and values.get("pid") == pid and values["units"] > 0
