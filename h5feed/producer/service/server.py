"""``h5feed produce``: a producer service — N persistent workers serving whichever consumer
(trainer) listens at ``--connect``.

Guarantees:

1. The workers wait for a consumer (they may start first), serve its jobs, and outlive its
   iterations and its restarts; each job's files resolve under ``--data-root``.
2. A worker that dies is restarted: at once if that process returned a part since it started
   (it was working), else after a backoff of 1 s doubling to 60 s; past ``max_restarts`` such
   deaths of one worker a minute the health file reports the crash loop, so ``h5feed
   health`` fails and Swarm/Kubernetes replace the container
   (``h5feed/producer/service/restarts.py``).
   One refused by the consumer (another protocol version) is not restarted, and the service
   exits with code 2 naming both versions.
3. SIGTERM or SIGINT: no worker takes new work; every worker is asked to stop (SIGTERM): it
   finishes the unit in hand and sends it, then says BYE, which hands the units it was sent
   and did not start back to the trainer (made by others, never twice: the trainer counts
   them in ``units_handed_back``). The service exits 0 within ``stop_wait_s`` (default
   :data:`~h5feed.common.worker_settings.DEFAULT_STOP_WAIT_S`, 20 s) plus
   :data:`STOP_EXIT_MARGIN_S`; a worker still there after the stop
   wait and its last messages' flush is killed (logged), and the trainer makes what it held
   again (``units_remade``). A container's grace period must cover both (docs/deploy/upgrading.md).
4. With ``metrics``, one endpoint serves every worker's figures (``/metrics``, ``/stats``;
   see ``h5feed/producer/service/metrics.py``) on the (host, port) given (the command's default host
   is 127.0.0.1); the address bound is logged (INFO), also when asked for port 0.
5. The workers import user code by name only at paths matching ``allow_code`` (none by
   default; see ``h5feed/producer/worker/code_policy.py``) and open only files under ``data_root``
   when it is given (``h5feed/producer/files/confine.py``).
6. Neither the service nor its workers look for modules in their working directory: the
   workers run ``python -P`` (never the directory on ``sys.path``; h5feed itself comes from
   where the service imported it, by ``PYTHONPATH``), and the service drops the directory
   ``python -m`` put first on its own path
   (:func:`h5feed.producer.worker.lifetime.drop_working_directory`). A package
   planted there cannot shadow an installed one; user code is installed, or on
   ``PYTHONPATH`` as the operator sets it.
7. The service raises its soft ``RLIMIT_NOFILE`` to the hard limit when it starts
   (``h5feed/common/system/fd_limit.py``), and logs both; a shared fleet's replica holds a bounded
   number of connections below it, so descriptors stay in reserve for worker starts
   (``h5feed/producer/service/connection_guard.py``), and a worker that cannot start is retried
   with a backoff (``h5feed/producer/service/worker_group.py``), never an exit of the service.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from h5feed.common.metrics_http import MetricsServer
from h5feed.common.system.cache_dir import default_cache_dir
from h5feed.common.system.fd_limit import raise_open_files_limit
from h5feed.common.system.logs import with_ids
from h5feed.common.system.package_dir import package_parent
from h5feed.common.worker_settings import WorkerSettings
from h5feed.producer.service.command import DEFAULT_ATTACH_TIMEOUT_S, DEFAULT_MAX_TRAINERS
from h5feed.producer.service.fleet import Front
from h5feed.producer.service.metrics import ServiceFigures
from h5feed.producer.service.restarts import DEFAULT_MAX_RESTARTS, Restarts
from h5feed.producer.service.worker_group import REFUSED_EXIT, WorkerGroup

_log = logging.getLogger("h5feed.producer")
#: Where this h5feed was imported from: the workers import the same one.
_PACKAGE_PARENT = package_parent()
_FLEET = "fleet"  # after the count: a shared fleet's replica, healthy with no trainer
_CRASH_LOOP = "crash-loop"  # the health file's second line, while a worker crash-loops
#: What ``h5feed produce`` may take beyond the stop wait to end: a late worker's last messages
#: flushed (its socket's 2 s linger), or its kill reaped. A container's grace period (compose
#: and Swarm ``stop_grace_period``, Kubernetes ``terminationGracePeriodSeconds``) must be at
#: least the stop wait plus this, or the engine kills the producer before its workers hand
#: their units back (``tests/deploy/test_kubernetes.py`` and ``tests/deploy/test_swarm.py`` check
#: it).
STOP_EXIT_MARGIN_S = 5.0


def default_prefix() -> str:
    """The workers' names' prefix without ``--name``: this host's name and this process's id."""
    return f"{socket.gethostname()}-{os.getpid()}"


def service_worker(address: str, prefix: str, **values: Any) -> WorkerSettings:
    """The template of this service's workers: the operator's worker options (``values``, by
    field name of :class:`~h5feed.common.worker_settings.WorkerSettings`; the rest their
    defaults), persistent, children of this process, with this host's index cache (not the
    trainer's), importing only code matching ``allow_code`` (none by default); its command
    (:meth:`~h5feed.common.worker_settings.WorkerSettings.command`) runs ``python -P``
    (guarantee 6). ``address``: where they reach their trainer (a shared fleet's: where it
    listens, until a trainer attaches); ``prefix``: their names' (each worker's settings:
    :meth:`ServiceOptions.worker`)."""
    service = {
        "connect": address,
        "worker_id": prefix,
        "parent_pid": os.getpid(),
        "persistent": True,
        "cache_dir": default_cache_dir(),
    }
    return WorkerSettings.from_values({**values, **service})


def worker_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The workers' environment: ``environ``, with this h5feed first on ``PYTHONPATH``."""
    env = dict(environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p
    )
    return env


@dataclasses.dataclass(frozen=True)
class ServiceOptions:
    """What ``h5feed produce`` runs its workers with, in either mode.

    ``workers``: processes (per trainer, in a shared fleet). ``worker``: the template of their
    settings (:func:`service_worker`: its ``worker_id`` is their names' prefix, its
    ``data_root``, ``allow_code``, caps and ``stop_wait_s`` every worker's; on SIGTERM, each
    worker may take ``stop_wait_s`` to finish and send the unit in hand before it is killed:
    guarantee 3). ``max_restarts``: deaths of one worker a minute, before it returned any
    part, past which the health file reports a crash loop (see the module docstring).
    ``metrics``: (host, port) to serve ``/metrics`` and ``/stats`` on (0: a free port,
    logged). With ``health_file``, the service rewrites that file several times a second with
    the time and the number of running workers, and a second line while a worker
    crash-loops (what ``h5feed health`` and the image's HEALTHCHECK read).
    """

    workers: int
    worker: WorkerSettings
    health_file: str | None = None
    metrics: tuple[str, int] | None = None
    max_restarts: int = DEFAULT_MAX_RESTARTS

    @property
    def prefix(self) -> str:
        """The workers' names' prefix (``--name``, default host-pid)."""
        return self.worker.process.worker_id

    def settings_of(
        self, connect: str, name: str, stats_file: str, curve: tuple[str, str] | None
    ) -> WorkerSettings:
        """Worker ``name``'s settings, serving the trainer at ``connect``: the template's,
        with its name, address, CURVE key files (this producer's secret, the trainer's public)
        and stats file."""
        key, server_key = curve if curve is not None else (None, None)
        template = self.worker
        return dataclasses.replace(
            template,
            network=dataclasses.replace(
                template.network, connect=connect, key=key, server_key=server_key
            ),
            process=dataclasses.replace(template.process, worker_id=name, stats_file=stats_file),
        )


def run_producer(
    connect: str, options: ServiceOptions, curve: tuple[str, str] | None = None
) -> int:
    """Serve the trainer at ``connect`` until SIGTERM/SIGINT; returns the process exit code.
    ``curve``: (this producer's ``.key_secret`` file, the consumer's public ``.key`` file)."""
    prefix = options.prefix
    names = [f"{prefix}-{i}" for i in range(options.workers)]
    log = with_ids(_log, "producer", name=prefix)
    stop = _stop_on_signals()
    _raise_fd_limit(log)
    code = 0
    log.info(
        "%d workers serving %s (data root %s, code allowed: %s)",
        options.workers, connect, options.worker.data.data_root,
        ", ".join(options.worker.code.allow_code) or "none",
    )  # fmt: skip
    # Each worker's stats file says whether it returned a part (always kept: the restart rule
    # reads it; with metrics, the metrics' own directory).
    stats_dir = tempfile.mkdtemp(prefix="h5feed-producer-")
    try:
        figures, server = _start_metrics(options.metrics, prefix, names, stats_dir, log)
    except BaseException:
        shutil.rmtree(stats_dir, ignore_errors=True)
        raise

    def settings_of(worker: str, stats_file: str) -> WorkerSettings:
        return options.settings_of(connect, worker, stats_file, curve)

    restarts = Restarts(options.max_restarts)
    group = WorkerGroup(
        names, settings_of, worker_env(os.environ), stats_dir, restarts, log, figures
    )
    try:
        while not stop.is_set():
            if not group.poll():  # a worker was refused (logged)
                code = REFUSED_EXIT
                break
            crash_loop = restarts.crash_loop(time.monotonic())
            _write_health(options.health_file, group.running, crash_loop)
            stop.wait(0.2)
    finally:
        group.stop(options.worker.process.stop_wait_s)
        if server is not None:
            server.close()
        shutil.rmtree(stats_dir, ignore_errors=True)
    return code


def run_fleet(
    listen: str,
    options: ServiceOptions,
    keys: tuple[str, str] | None = None,
    max_trainers: int = DEFAULT_MAX_TRAINERS,
    attach_timeout_s: float = DEFAULT_ATTACH_TIMEOUT_S,
) -> int:
    """A replica of a shared fleet (``h5feed produce --listen``): serve every trainer that
    attaches at ``listen``, ``options.workers`` worker processes each, until SIGTERM/SIGINT
    (h5feed/producer/service/fleet.py). ``keys``: (this replica's ``.key_secret`` file, the
    directory
    of the trainers' public ``.key`` files). The health file says ``fleet`` after the count,
    so no trainer attached (no worker) is still healthy."""
    prefix = options.prefix
    log = with_ids(_log, "producer", name=prefix)
    stop = _stop_on_signals()
    _raise_fd_limit(log)

    def settings_for(
        worker: str, stats_file: str, endpoint: str, key: str | None
    ) -> WorkerSettings:
        curve = (keys[0], key) if keys is not None and key is not None else None
        return options.settings_of(endpoint, worker, stats_file, curve)

    stats_dir = tempfile.mkdtemp(prefix="h5feed-fleet-")
    front = None
    server = None
    try:
        front = Front(
            listen, prefix, options.workers, settings_for, worker_env(os.environ), stats_dir,
            log, keys, max_trainers, attach_timeout_s, options.max_restarts,
            options.worker.process.stop_wait_s,
        )  # fmt: skip
        figures, server = _start_metrics(
            options.metrics, prefix, [], stats_dir, log, front.snapshot
        )
        front.figures = figures
        log.info(
            "a shared fleet's replica at %s: %d workers per trainer, at most %d trainers "
            "(data root %s, code allowed: %s)",
            front.endpoint, options.workers, max_trainers, options.worker.data.data_root,
            ", ".join(options.worker.code.allow_code) or "none",
        )  # fmt: skip
        while not stop.is_set():
            front.step(200)
            crash_loop = front.restarts.crash_loop(time.monotonic())
            _write_health(options.health_file, front.running, crash_loop, fleet=True)
    finally:
        if front is not None:
            front.close()
        if server is not None:
            server.close()
        shutil.rmtree(stats_dir, ignore_errors=True)
    return 0


def _raise_fd_limit(log: logging.Logger | logging.LoggerAdapter[logging.Logger]) -> None:
    """Guarantee 7: the soft descriptor limit raised to the hard one, both logged."""
    soft, hard = raise_open_files_limit()
    log.info("open files limit %d (hard %d)", soft, hard)


def _stop_on_signals() -> threading.Event:
    """An event SIGTERM and SIGINT set: the service's loop ends when it is."""
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def _start_metrics(
    metrics: tuple[str, int] | None,
    prefix: str,
    names: Sequence[str],
    stats_dir: str,
    log: logging.Logger | logging.LoggerAdapter[logging.Logger],
    fleet: Callable[[], dict[str, Any]] | None = None,
) -> tuple[ServiceFigures | None, MetricsServer | None]:
    """The service's figures and their endpoint (guarantee 4); (None, None) without
    ``metrics``."""
    if metrics is None:
        return None, None
    from h5feed.common.metrics_http import host_is_any
    from h5feed.producer.service.metrics import start_service_metrics

    figures = ServiceFigures(prefix, list(names), stats_dir, fleet)
    server = start_service_metrics(figures, metrics)
    # On every interface, this host's name is how others reach it; else the address bound.
    url = f"http://{figures.host}:{server.port}" if host_is_any(server.host) else server.url
    log.info("metrics at %s/metrics (stats at /stats)", url)
    return figures, server


def _write_health(
    path: str | None, running: int, crash_loop: str | None = None, fleet: bool = False
) -> None:
    """The health file: ``"<time> <running>"`` (a shared fleet's replica: ``"<time>
    <running> fleet"``), and a second line ``"crash-loop <why>"`` while a worker crash-loops."""
    if path is None:
        return
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as out:
            out.write(f"{time.time():.3f} {running}{' fleet' if fleet else ''}\n")
            if crash_loop is not None:
                out.write(f"{_CRASH_LOOP} {crash_loop}\n")
        os.replace(tmp, path)
    except OSError as exc:
        with_ids(_log, "producer").warning("health file %s not written: %s", path, exc)


def check_health(path: str, max_age_s: float = 10.0) -> str | None:
    """None when the producer at ``path`` is healthy, else what is wrong."""
    try:
        first, *rest = pathlib.Path(path).read_text().splitlines()
        stamp, running, *kind = first.split()
    except (OSError, ValueError) as exc:
        return f"no health file {path}: {exc}"
    for line in rest:
        if line.startswith(f"{_CRASH_LOOP} "):
            return line.removeprefix(f"{_CRASH_LOOP} ")
    age = time.time() - float(stamp)
    if age > max_age_s:
        return f"health file {path} is {age:.0f} s old: the producer is stuck or gone"
    if int(running) < 1 and kind != [_FLEET]:  # a fleet with no trainer has no worker
        return "no worker process is running"
    return None
