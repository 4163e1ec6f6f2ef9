"""``h5feed produce``: a producer service — N persistent workers serving whichever consumer
(trainer) listens at ``--connect``.

Guarantees:

1. The workers wait for a consumer (they may start first), serve its jobs, and outlive its
   iterations and its restarts; each job's files resolve under ``--data-root``.
2. A worker that dies is restarted: at once if that process returned a part since it started
   (it was working), else after a backoff of 1 s doubling to 60 s; past ``max_restarts`` such
   deaths of one worker a minute the health file reports the crash loop, so ``h5feed
   health`` fails and Swarm/Kubernetes replace the container (``h5feed/producer/restarts.py``).
   One refused by the consumer (another protocol version) is not restarted, and the service
   exits with code 2 naming both versions.
3. SIGTERM or SIGINT: no worker takes new work; every worker is asked to stop (SIGTERM): it
   finishes the unit in hand and sends it, then says BYE, which hands the units it was sent
   and did not start back to the trainer (made by others, never twice: the trainer counts
   them in ``units_handed_back``). The service exits 0 within ``stop_wait_s`` (default
   :data:`~h5feed.common.config.DEFAULT_STOP_WAIT_S`, 20 s) plus
   :data:`~h5feed.common.config.STOP_EXIT_MARGIN_S`; a worker still there after the stop
   wait and its last messages' flush is killed (logged), and the trainer makes what it held
   again (``units_remade``). A container's grace period must cover both (docs/deploy/upgrading.md).
4. With ``metrics``, one endpoint serves every worker's figures (``/metrics``, ``/stats``;
   see ``h5feed/producer/metrics.py``) on the (host, port) given (the command's default host
   is 127.0.0.1); the address bound is logged (INFO), also when asked for port 0.
5. The workers import user code by name only at paths matching ``allow_code`` (none by
   default; see ``h5feed/producer/code_policy.py``) and open only files under ``data_root``
   when it is given (``h5feed/producer/confine.py``).
6. Neither the service nor its workers look for modules in their working directory: the
   workers run ``python -P`` (never the directory on ``sys.path``; h5feed itself comes from
   where the service imported it, by ``PYTHONPATH``), and the service drops the directory
   ``python -m`` put first on its own path
   (:func:`h5feed.producer.lifetime.drop_working_directory`). A package
   planted there cannot shadow an installed one; user code is installed, or on
   ``PYTHONPATH`` as the operator sets it.
"""

from __future__ import annotations

import logging
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence

from h5feed.common.config import DEFAULT_MAX_OPEN_FILES, DEFAULT_STOP_WAIT_S, default_cache_dir
from h5feed.common.logs import with_ids
from h5feed.common.wire import DEFAULT_MAX_MESSAGE_BYTES
from h5feed.common.worker_settings import Code, Data, Network, Process, WorkerSettings
from h5feed.producer.read_limits import NO_LIMITS, ProducerLimits
from h5feed.producer.restarts import DEFAULT_MAX_RESTARTS, Restarts
from h5feed.producer.worker_stats import read_counters

_log = logging.getLogger("h5feed.producer")
#: Where this h5feed was imported from: the workers import the same one.
_PACKAGE_PARENT = str(pathlib.Path(__file__).resolve().parents[2])
#: Beyond the stop wait, for a worker that sent its last unit at the end of it to flush it and
#: its BYE (its socket's linger, 2 s) and exit.
_FLUSH_S = 2.5
#: For a killed worker to be reaped.
_KILL_WAIT_S = 2.0
_REFUSED_EXIT = 2
_CRASH_LOOP = "crash-loop"  # the health file's second line, while a worker crash-loops


def worker_settings(
    connect: str,
    name: str,
    data_root: str | None,
    curve: tuple[str, str] | None = None,
    stats_file: str | None = None,
    max_message_bytes: int | None = None,
    max_open_files: int = DEFAULT_MAX_OPEN_FILES,
    allow_code: Sequence[str] = (),
    limits: ProducerLimits = NO_LIMITS,
    stop_wait_s: float = DEFAULT_STOP_WAIT_S,
) -> WorkerSettings:
    """The settings of service worker ``name``: persistent, a child of this process, with this
    host's index cache (not the trainer's), importing only code matching ``allow_code``; its
    command (:meth:`~h5feed.common.worker_settings.WorkerSettings.command`) runs ``python -P``
    (guarantee 6)."""
    key, server_key = curve if curve is not None else (None, None)
    return WorkerSettings(
        Network(
            connect,
            key,
            server_key,
            DEFAULT_MAX_MESSAGE_BYTES if max_message_bytes is None else max_message_bytes,
        ),
        Process(name, os.getpid(), persistent=True, stats_file=stats_file, stop_wait_s=stop_wait_s),
        Data(
            data_root,
            default_cache_dir(),
            max_open_files,
            limits.max_frame_pixels,
            limits.max_clip_pixels,
            limits.max_chunk_bytes,
        ),
        Code(allow_code=tuple(allow_code)),  # none: the worker imports no user code
    )


def worker_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The workers' environment: ``environ``, with this h5feed first on ``PYTHONPATH``."""
    env = dict(environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p
    )
    return env


def run_producer(
    connect: str,
    data_root: str | None,
    workers: int,
    name: str | None,
    health_file: str | None = None,
    curve: tuple[str, str] | None = None,
    metrics: tuple[str, int] | None = None,
    max_message_bytes: int | None = None,
    max_open_files: int = DEFAULT_MAX_OPEN_FILES,
    allow_code: Sequence[str] = (),
    limits: ProducerLimits = NO_LIMITS,
    max_restarts: int = DEFAULT_MAX_RESTARTS,
    stop_wait_s: float = DEFAULT_STOP_WAIT_S,
) -> int:
    """Run the service until SIGTERM/SIGINT; returns the process exit code.

    ``max_restarts``: deaths of one worker a minute, before it returned any part, past which
    the health file reports a crash loop (see the module docstring).

    ``max_message_bytes``: the workers' cap on one frame from the trainer (``ZMQ_MAXMSGSIZE``;
    None: :data:`h5feed.common.wire.DEFAULT_MAX_MESSAGE_BYTES`).
    ``max_open_files``: HDF5 files each worker keeps open at once.
    ``allow_code``: fnmatch patterns of the import paths (``module:name``) the workers may
    import for ``source=`` / ``transform=``; empty: none.
    ``limits``: the workers' own caps on frames, clips and chunks, which a job cannot raise
    (``h5feed/producer/read_limits.py``).

    ``stop_wait_s``: on SIGTERM, how long each worker may take to finish and send the unit in
    hand before it is killed (guarantee 3).

    ``metrics``: (host, port) to serve ``/metrics`` and ``/stats`` on (0: a free port, logged).

    ``curve``: (this producer's ``.key_secret`` file, the consumer's public ``.key`` file).
    With ``health_file``, it rewrites that file several times a second with the time and the
    number of running workers, and a second line while a worker crash-loops (what ``h5feed
    health`` and the image's HEALTHCHECK read).
    """
    prefix = name or f"{socket.gethostname()}-{os.getpid()}"
    names = [f"{prefix}-{i}" for i in range(workers)]
    log = with_ids(_log, "producer", name=prefix)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    processes: dict[str, subprocess.Popen[bytes]] = {}
    code = 0
    log.info(
        "%d workers serving %s (data root %s, code allowed: %s)",
        workers,
        connect,
        data_root,
        ", ".join(allow_code) or "none",
    )
    figures = server = None
    restarts = Restarts(max_restarts)
    # Each worker's stats file says whether it returned a part (always kept: the restart rule
    # reads it; with metrics, the metrics' own directory).
    stats_dir = tempfile.mkdtemp(prefix="h5feed-producer-")
    if metrics is not None:
        from h5feed.common.metrics_http import host_is_any
        from h5feed.producer.metrics import ServiceFigures, start_service_metrics

        figures = ServiceFigures(prefix, names, stats_dir)
        try:
            server = start_service_metrics(figures, metrics)
        except BaseException:
            shutil.rmtree(stats_dir, ignore_errors=True)
            raise
        # On every interface, this host's name is how others reach it; else the address bound.
        url = f"http://{figures.host}:{server.port}" if host_is_any(server.host) else server.url
        log.info("metrics at %s/metrics (stats at /stats)", url)
    try:
        while not stop.is_set():
            for worker in names:
                process = processes.get(worker)
                exit_code = None if process is None else process.poll()
                if process is not None and exit_code is None:
                    continue
                stats_file = os.path.join(stats_dir, f"{worker}.json")
                if process is not None and exit_code is not None:  # a death, seen once
                    if figures is not None:
                        figures.set_running(worker, False)
                    if exit_code == _REFUSED_EXIT:
                        log.error("worker %s was refused; stopping", worker)
                        stop.set()
                        code = _REFUSED_EXIT
                        break
                    delivered = _delivered(stats_file, process.pid)
                    delay = restarts.died(worker, delivered, time.monotonic())
                    del processes[worker]
                    log.warning(
                        "worker %s exited (%s) %s; restarting %s",
                        worker, exit_code,
                        "after returning parts" if delivered else "before returning any part",
                        "now" if not delay else f"in {delay:g} s",
                    )  # fmt: skip
                if restarts.due(worker, time.monotonic()):
                    processes[worker] = subprocess.Popen(
                        worker_settings(
                            connect,
                            worker,
                            data_root,
                            curve,
                            stats_file,
                            max_message_bytes,
                            max_open_files,
                            allow_code,
                            limits,
                            stop_wait_s,
                        ).command(),
                        stdin=subprocess.DEVNULL,
                        env=worker_env(os.environ),
                    )
                    if figures is not None:
                        figures.starting(worker, processes[worker].pid)
            running = sum(p.poll() is None for p in processes.values())
            _write_health(health_file, running, restarts.crash_loop(time.monotonic()))
            stop.wait(0.2)
    finally:
        _stop_all(processes, stop_wait_s, log)
        if server is not None:
            server.close()
        shutil.rmtree(stats_dir, ignore_errors=True)
    return code


def _delivered(stats_file: str, pid: int) -> bool:
    """Whether process ``pid`` returned a part since it started, as its stats file says
    (a worker writes it at once after its first part)."""
    values = read_counters(stats_file)
    return values is not None and values.get("pid") == pid and values["units"] > 0


def _stop_all(
    processes: Mapping[str, subprocess.Popen[bytes]],
    stop_wait_s: float,
    log: logging.Logger | logging.LoggerAdapter[logging.Logger],
) -> None:
    """Ask every worker to stop, give each ``stop_wait_s`` (and the flush of its last
    messages), then kill the late ones (guarantee 3)."""
    for process in processes.values():
        if process.poll() is None:
            process.terminate()  # it sends the unit in hand, hands the rest back, and leaves
    deadline = time.monotonic() + stop_wait_s + _FLUSH_S
    for worker, process in processes.items():
        try:
            process.wait(max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            log.warning(
                "worker %s did not finish its unit within the stop wait (%g s): killed; the "
                "trainer makes what it held again",
                worker, stop_wait_s,
            )  # fmt: skip
            process.kill()
            process.wait(_KILL_WAIT_S)


def _write_health(path: str | None, running: int, crash_loop: str | None = None) -> None:
    """The health file: ``"<time> <running>"``, and a second line ``"crash-loop <why>"``
    while a worker crash-loops."""
    if path is None:
        return
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as out:
            out.write(f"{time.time():.3f} {running}\n")
            if crash_loop is not None:
                out.write(f"{_CRASH_LOOP} {crash_loop}\n")
        os.replace(tmp, path)
    except OSError as exc:
        with_ids(_log, "producer").warning("health file %s not written: %s", path, exc)


def check_health(path: str, max_age_s: float = 10.0) -> str | None:
    """None when the producer at ``path`` is healthy, else what is wrong."""
    try:
        first, *rest = pathlib.Path(path).read_text().splitlines()
        stamp, running = first.split()
    except (OSError, ValueError) as exc:
        return f"no health file {path}: {exc}"
    for line in rest:
        if line.startswith(f"{_CRASH_LOOP} "):
            return line.removeprefix(f"{_CRASH_LOOP} ")
    age = time.time() - float(stamp)
    if age > max_age_s:
        return f"health file {path} is {age:.0f} s old: the producer is stuck or gone"
    if int(running) < 1:
        return "no worker process is running"
    return None
