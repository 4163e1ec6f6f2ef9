"""Prometheus metrics of a producer service (``h5feed produce --metrics-port``).

Design: the supervisor serves one endpoint for all its workers. Each worker writes its
counters to a JSON file of its own (``h5feed/producer/worker/stats.py``); the supervisor
reads them when scraped. When a worker process is replaced (it died and was restarted), its
last figures are folded into the worker's base first, so each counter only grows for as long
as the service runs (a ``kill -9`` loses at most the last ``WRITE_EVERY_S`` of counts).

Names (labels ``producer``, ``host``, ``worker``): ``h5feed_producer_units_total``,
``h5feed_producer_clips_total``, ``h5feed_producer_bytes_total`` (clips produced),
``h5feed_producer_errors_total`` (errors reported to the trainer),
``h5feed_producer_busy_seconds_total`` (time decoding and preprocessing),
``h5feed_producer_jobs_total``, ``h5feed_producer_slots_refused_total`` (jobs whose
shared-memory slots could not be used), ``h5feed_producer_object_{requests,bytes,retries,
refused}_total`` (reads of object storage, as the parts said: 0 for local files),
``h5feed_producer_files_reopened_total`` (HDF5 files
reopened after being closed to stay under ``--max-open-files``),
``h5feed_producer_reconnects_total`` (sessions started over after the connection to the
trainer broke: ``h5feed/producer/worker/connection.py``),
``h5feed_producer_worker_restarts_total``,
``h5feed_producer_worker_up`` (1 while its process runs); and
``h5feed_producer_workers`` (labels ``producer``, ``host``): processes running.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from h5feed.common.metrics_http import MetricsServer
from h5feed.producer.worker.stats import COUNTERS, read_counters

#: (counter in a worker's figures, metric name, help).
_WORKER_COUNTERS = (
    ("units", "h5feed_producer_units", "Units (batch parts) produced"),
    ("clips", "h5feed_producer_clips", "Clips produced"),
    ("bytes", "h5feed_producer_bytes", "Bytes of clips produced"),
    ("errors", "h5feed_producer_errors", "Errors reported to the trainer"),
    (
        "refused",
        "h5feed_producer_refused",
        "Import paths and file paths refused (--allow-code, --data-root); also in errors",
    ),
    ("busy_s", "h5feed_producer_busy_seconds", "Time spent decoding and preprocessing"),
    ("jobs", "h5feed_producer_jobs", "Jobs (trainer iterations) received"),
    (
        "slots_refused",
        "h5feed_producer_slots_refused",
        "Jobs whose shared-memory slots were refused",
    ),
    ("files_reopened", "h5feed_producer_files_reopened", "HDF5 files reopened (max open files)"),
    ("object_requests", "h5feed_producer_object_requests", "Requests to object storage"),
    ("object_bytes", "h5feed_producer_object_bytes", "Bytes read from object storage"),
    ("object_retries", "h5feed_producer_object_retries", "Object GETs and reads retried"),
    ("object_refused", "h5feed_producer_object_refused", "Reads refused: the object changed"),
    (
        "reconnects",
        "h5feed_producer_reconnects",
        "Sessions started over after the connection to the trainer broke",
    ),
    ("restarts", "h5feed_producer_worker_restarts", "Times the worker process was restarted"),
)


class ServiceFigures:
    """The supervisor's record of its workers; written by its loop, read by scrapes."""

    def __init__(
        self,
        producer: str,
        names: list[str],
        stats_dir: str,
        fleet: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        """``fleet``: a shared fleet's figures
        (:meth:`h5feed.producer.service.fleet.Front.figures`),
        served under ``"fleet"`` in ``/stats`` and as ``h5feed_fleet_*`` metrics."""
        self.producer = producer
        self.fleet = fleet
        self.host = socket.gethostname()
        self.stats_dir = stats_dir
        self._lock = threading.Lock()
        self._base = {name: dict.fromkeys(COUNTERS, 0) for name in names}
        self._state: dict[str, dict[str, Any]] = {
            name: {"pid": None, "running": False, "restarts": 0} for name in names
        }

    def add(self, names: list[str]) -> None:
        """Workers of a trainer that attached to a shared fleet
        (h5feed/producer/service/fleet.py)."""
        with self._lock:
            for name in names:
                self._base[name] = dict.fromkeys(COUNTERS, 0)
                self._state[name] = {"pid": None, "running": False, "restarts": 0}

    def remove(self, names: list[str]) -> None:
        """Workers of a trainer that left a shared fleet: their figures go with them."""
        with self._lock:
            for name in names:
                self._base.pop(name, None)
                self._state.pop(name, None)

    def stats_file(self, name: str) -> str:
        return os.path.join(self.stats_dir, f"{name}.json")

    def starting(self, name: str, pid: int) -> None:
        """Worker ``name`` has a new process ``pid``: fold the previous one's last figures in."""
        path = self.stats_file(name)
        with self._lock:
            state = self._state[name]
            if state["pid"] is not None:
                state["restarts"] += 1
                previous = read_counters(path)
                if previous is not None and previous.get("pid") != pid:
                    for key in COUNTERS:
                        self._base[name][key] += previous[key]
                    with contextlib.suppress(OSError):
                        os.remove(path)
            state["pid"], state["running"] = pid, True

    def set_running(self, name: str, running: bool) -> None:
        with self._lock:
            self._state[name]["running"] = running

    def snapshot(self) -> dict[str, Any]:
        """The service as a plain dict (what ``/stats`` serves): per worker, its process and
        its counters since the service started."""
        workers = []
        now = time.time()
        with self._lock:
            for name, state in self._state.items():
                current = read_counters(self.stats_file(name))
                if current is not None and current.get("pid") != state["pid"]:
                    current = None  # a process already folded in (or another's leftover)
                figures = {k: self._base[name][k] + (current or {}).get(k, 0) for k in COUNTERS}
                updated = None if current is None else current.get("updated")
                workers.append(
                    {
                        "name": name,
                        "host": self.host,
                        **state,
                        **figures,
                        "updated_s_ago": None if updated is None else max(now - updated, 0.0),
                    }
                )
        stats = {
            "role": "producer",
            "producer": self.producer,
            "host": self.host,
            "running_workers": sum(w["running"] for w in workers),
            "workers": workers,
        }
        if self.fleet is not None:
            stats["fleet"] = self.fleet()
        return stats


class ServiceCollector(Collector):
    def __init__(self, figures: ServiceFigures) -> None:
        self._figures = figures

    def collect(self) -> Iterator[Metric]:
        stats = self._figures.snapshot()
        service_labels = [stats["producer"], stats["host"]]
        running = GaugeMetricFamily(
            "h5feed_producer_workers", "Worker processes running", labels=("producer", "host")
        )
        running.add_metric(service_labels, stats["running_workers"])
        yield running
        labels = ("producer", "host", "worker")
        up = GaugeMetricFamily("h5feed_producer_worker_up", "1 while it runs", labels=labels)
        families = [CounterMetricFamily(n, text, labels=labels) for _, n, text in _WORKER_COUNTERS]
        for worker in stats["workers"]:
            values = [*service_labels, worker["name"]]
            up.add_metric(values, float(worker["running"]))
            for family, (key, _, _) in zip(families, _WORKER_COUNTERS, strict=True):
                family.add_metric(values, float(worker[key]))
        yield up
        yield from families
        if "fleet" in stats:
            yield from _fleet_families(stats["fleet"], service_labels)


def _fleet_families(fleet: dict[str, Any], service_labels: list[str]) -> Iterator[Metric]:
    """A shared fleet's figures: per trainer (label ``trainer``: its name and address; at
    most ``--max-trainers`` of them), and what the front holds (gauges that reach 0 once
    every trainer left)."""
    labels = ("producer", "host")
    for key, name, text in _FLEET_GAUGES:
        gauge = GaugeMetricFamily(name, text, labels=labels)
        gauge.add_metric(service_labels, float(fleet[key]))
        yield gauge
    for key, name, text in _FLEET_COUNTERS:
        counter = CounterMetricFamily(name, text, labels=labels)
        counter.add_metric(service_labels, float(fleet[key]))
        yield counter
    per_trainer = (*labels, "trainer")
    families = [
        (key, CounterMetricFamily(name, text, labels=per_trainer))
        for key, name, text in _TRAINER_COUNTERS
    ]
    for trainer in fleet["trainers"]:
        for key, family in families:
            family.add_metric([*service_labels, trainer["trainer"]], float(trainer[key]))
    for _, family in families:
        yield family


#: (key in the fleet's figures, metric name, help): what a shared fleet's front holds.
_FLEET_GAUGES = (
    ("attached", "h5feed_fleet_trainers", "Trainers attached (each with its own workers)"),
    ("worker_processes", "h5feed_fleet_worker_processes", "Worker processes of all trainers"),
    ("stopping", "h5feed_fleet_groups_stopping", "Groups of a trainer that left, stopping"),
    ("connections", "h5feed_fleet_connections", "Connections to the front (at most a bound)"),
)
#: (key in the fleet's figures, metric name, help): what the front refused or could not do.
_FLEET_COUNTERS = (
    (
        "refused",
        "h5feed_fleet_refused",
        "ATTACHes refused (the trainer limit, another key's port, bad messages, unlisted keys)",
    ),
    ("connections_shed", "h5feed_fleet_connections_shed", "Connections shed past the bound"),
    (
        "worker_start_failures",
        "h5feed_fleet_worker_start_failures",
        "Worker starts that failed (no descriptor or memory left), retried after a backoff",
    ),
)
#: (key in a trainer's figures, metric name, help).
_TRAINER_COUNTERS = (
    ("cpu_s", "h5feed_fleet_trainer_cpu_seconds", "CPU seconds of this trainer's workers"),
    ("busy_s", "h5feed_fleet_trainer_busy_seconds", "Seconds its workers spent making units"),
)


def start_service_metrics(figures: ServiceFigures, address: tuple[str, int]) -> MetricsServer:
    """Serve the service's ``/metrics`` and ``/stats`` on (host, port) (port 0: a free one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(figures))
    host, port = address
    return MetricsServer(registry, figures.snapshot, port, host=host)
