"""Prometheus metrics of one feed (``metrics_port=`` / ``$H5FEED_METRICS_PORT``).

The figures are those of ``feed.stats()``, read when scraped (nothing is counted twice).
Names and meaning (all start with ``h5feed_``):

* counters over the feed's whole life, every iteration (``model.fit`` epoch) added:
  ``batches_total``, ``clips_total``, ``bytes_total`` (taken by the trainer),
  ``input_wait_seconds_total`` (time tf.data waited for a batch not yet ready, from each
  iteration's first batch), ``malformed_messages_total``, ``dropped_parts_total``,
  ``reassigned_units_total`` (= ``units_handed_back_total`` + ``units_remade_total``),
  ``units_handed_back_total``, ``units_remade_total``, ``peers_lost_total``,
  ``workers_replaced_total``,
  ``peers_joined_total``, ``refused_reconnects_total``, ``refused_keys_total``,
  ``index_mismatches_total``,
  ``unreadable_files_total``, ``iterations_total``;
* gauges of now: ``input_wait_ratio`` (recent 10 s share), ``input_bound`` (0/1),
  ``suggested_extra_workers``, ``inflight_batches``, ``credit_budget_batches``,
  ``queue_depth_batches``, ``startup_seconds``, ``running``;
* the remote producers' sizing (``h5feed/consumer/telemetry/sizing.py``), each gauge absent
  while unknown: ``producers_replicas_needed``, ``producers_demand_clips_per_second``,
  ``producers_replica_capacity_clips_per_second``; each also under its deprecated old name
  (``fleet_`` for ``producers_``: :data:`DEPRECATED_NAMES`), the same value, until 0.4.0;
* per worker (labels ``worker``, ``host``) of the running iteration — they start again at 0
  with each iteration, which Prometheus' ``rate()`` reads as a counter reset:
  ``worker_parts_total``, ``worker_clips_total``, ``worker_bytes_total``,
  ``worker_busy_seconds_total``, ``worker_unit_latency_seconds``, ``worker_last_part_age_seconds``,
  ``worker_outstanding_units``, ``worker_files``, ``worker_object_requests_total``,
  ``worker_object_bytes_total``, ``worker_object_retries_total``,
  ``worker_object_refused_total`` (its reads of object storage, as its parts said: 0 for
  local files); ``worker_info`` (1, with labels ``protocol``
  and ``package`` besides: the protocol version spoken with it and its h5feed version).
  What a scrape costs is bounded whatever peers join: the first :data:`MAX_WORKER_SERIES`
  workers of ``stats()["workers"]`` (in the order they joined) have series of their own;
  the rest are summed under ``worker="_others", host="_others"`` (counters, units and files
  summed, latency and last-part age their largest; ``worker_info`` of ``_others`` counts
  them). Each label value is at most :data:`MAX_LABEL` characters (a peer's strings are
  bounded on decode already: h5feed.common.protocol.message_records).

Bad data adds the counter ``skipped_samples_total``: samples zero-filled for a bad frame under
``on_error="skip"`` (docs/data/bad-data.md).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from h5feed.common.metrics_http import MetricsServer, address_from_env, metrics_address
from h5feed.common.system.logs import with_ids

_log = with_ids(logging.getLogger("h5feed.consumer"), "consumer")  # ids in every line

#: stats() keys summed over the feed's iterations: (key, metric name, help).
_TOTALS = (
    ("batches", "h5feed_batches", "Batches taken by the trainer"),
    ("clips", "h5feed_clips", "Clips taken by the trainer"),
    ("bytes", "h5feed_bytes", "Bytes of frames taken by the trainer"),
    ("wait_s", "h5feed_input_wait_seconds", "Time tf.data waited for a batch not yet ready"),
    ("skipped", "h5feed_skipped_samples", "Samples zero-filled for a bad frame (on_error)"),
    ("malformed_messages", "h5feed_malformed_messages", "Malformed messages dropped"),
    ("dropped_parts", "h5feed_dropped_parts", "Unexpected or duplicate parts dropped"),
    ("reassigned_units", "h5feed_reassigned_units", "Units re-sent after their worker was lost"),
    ("units_handed_back", "h5feed_units_handed_back", "Units a leaving worker gave back unmade"),
    ("units_remade", "h5feed_units_remade", "Units made again: their worker was lost"),
    ("peers_lost", "h5feed_peers_lost", "Workers lost (exited, killed, vanished, stuck, left)"),
    ("workers_replaced", "h5feed_workers_replaced", "Local workers started in place of dead ones"),
    ("peers_joined", "h5feed_peers_joined", "Workers that joined during an iteration"),
    ("refused_reconnects", "h5feed_refused_reconnects", "Lost processes refused on their return"),
    ("refused_keys", "h5feed_refused_keys", "Connections refused: CURVE key not listed"),
    ("index_mismatches", "h5feed_index_mismatches", "Workers refused for a differing file copy"),
    ("unreadable_files", "h5feed_unreadable_files", "Files moved off a worker unable to read them"),
)

#: stats() keys shown as gauges: (key, metric name, help).
_GAUGES = (
    ("wait_share_recent", "h5feed_input_wait_ratio", "Share of the last 10 s spent waiting"),
    ("input_bound", "h5feed_input_bound", "1 when the trainer is input-bound"),
    ("suggested_extra_workers", "h5feed_suggested_extra_workers", "Workers to add to keep up"),
    ("inflight_batches", "h5feed_inflight_batches", "Batches dispatched, not yet taken"),
    ("credit_budget", "h5feed_credit_budget_batches", "Most batches in flight"),
    ("queue_depth", "h5feed_queue_depth_batches", "Complete batches not yet taken"),
    ("startup_s", "h5feed_startup_seconds", "Seconds from iteration start to first batch"),
    ("running", "h5feed_running", "1 while an iteration runs"),
)

#: stats()["producers"] keys shown as gauges, each only while known: (key, metric name, help)
#: (the autoscaler manifests name the first: tests/deploy/test_kubernetes.py).
PRODUCER_GAUGES = (
    ("replicas_needed", "h5feed_producers_replicas_needed", "Producer replicas that would keep up"),
    (
        "demand_clips_per_s",
        "h5feed_producers_demand_clips_per_second",
        "Clips/s the trainer would take never waiting, less its local workers' rate",
    ),
    (
        "replica_capacity_clips_per_s",
        "h5feed_producers_replica_capacity_clips_per_second",
        "Clips/s a producer replica makes with every worker busy (mean over replicas)",
    ),
)
#: The PRODUCER_GAUGES' names before "fleet" came to mean the shared fleet alone: exported
#: too, with the same values, until 0.4.0 removes them (autoscalers read them by name).
DEPRECATED_NAMES = {
    name: name.replace("h5feed_producers_", "h5feed_fleet_") for _, name, _ in PRODUCER_GAUGES
}

#: Per-worker figures: (key in a worker's stats, metric name, counter?, help).
_PER_WORKER = (
    ("count", "h5feed_worker_parts", True, "Parts (units) received from the worker"),
    ("clips", "h5feed_worker_clips", True, "Clips received from the worker"),
    ("bytes", "h5feed_worker_bytes", True, "Bytes of frames received from the worker"),
    ("busy_s", "h5feed_worker_busy_seconds", True, "Seconds the worker says its parts took"),
    ("unit_latency_s", "h5feed_worker_unit_latency_seconds", False, "Unit sent to data back"),
    ("last_seen_s_ago", "h5feed_worker_last_part_age_seconds", False, "Since its last part"),
    ("outstanding_units", "h5feed_worker_outstanding_units", False, "Units it holds"),
    ("files", "h5feed_worker_files", False, "Files it reads (owned or shared)"),
    ("object_requests", "h5feed_worker_object_requests", True, "Object-storage requests it made"),
    ("object_bytes", "h5feed_worker_object_bytes", True, "Bytes it fetched from object storage"),
    ("object_retries", "h5feed_worker_object_retries", True, "Object GETs and reads it retried"),
    ("object_refused", "h5feed_worker_object_refused", True, "Reads refused: the object changed"),
)


#: Workers with per-worker series of their own; the rest are summed under OTHERS.
MAX_WORKER_SERIES = 512
#: The ``worker`` and ``host`` labels of the workers past MAX_WORKER_SERIES.
OTHERS = "_others"
#: The most characters of one label value (a longer one is cut, saying so with "...").
MAX_LABEL = 256
#: Per-worker gauges summed over OTHERS (the rest: their largest).
_SUMMED_GAUGES = frozenset({"outstanding_units", "files"})


class _HasStats(Protocol):
    def stats(self) -> dict[str, Any]: ...


class IterationTotals:
    """Counters of the feed's finished iterations, so the metrics' counters never go back
    when an iteration ends and the next starts. Thread-safe.

    Each iteration is added once, by job id: its final figures when it closes, or its live
    figures while it has not yet been added (so a scrape just after it closed and before it
    was added counts it once, not twice or not at all)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sums = {key: 0.0 for key, _, _ in _TOTALS}
        self._jobs: set[str] = set()

    def add(self, stats: dict[str, Any]) -> None:
        with self._lock:
            if stats.get("job") in self._jobs or "job" not in stats:
                return
            self._jobs.add(stats["job"])
            for key in self._sums:
                self._sums[key] += stats.get(key, 0)

    def with_current(self, stats: dict[str, Any]) -> tuple[dict[str, float], int]:
        """(the sums with ``stats`` of an iteration not added yet, the number of iterations)."""
        with self._lock:
            sums, jobs = dict(self._sums), len(self._jobs)
            if "job" in stats and stats["job"] not in self._jobs:
                jobs += 1
                for key in sums:
                    sums[key] += stats.get(key, 0)
        return sums, jobs


class FeedCollector(Collector):
    """Reads a feed's ``stats()`` at scrape time. Holds the feed weakly: a feed garbage
    collected (its server closed with it) yields nothing."""

    def __init__(self, feed: _HasStats, totals: IterationTotals) -> None:
        self._feed = weakref.ref(feed)
        self._totals = totals

    def collect(self) -> Iterator[Metric]:
        feed = self._feed()
        if feed is None:
            return
        stats = feed.stats()
        sums, iterations = self._totals.with_current(stats)
        for key, name, text in _TOTALS:
            yield CounterMetricFamily(name, text, value=sums[key])
        yield CounterMetricFamily("h5feed_iterations", "Iterations started", value=iterations)
        for key, name, text in _GAUGES:
            yield GaugeMetricFamily(name, text, value=float(stats.get(key) or 0))
        producers = stats.get("producers", {})
        for key, name, text in PRODUCER_GAUGES:
            if producers.get(key) is not None:  # absent while unknown: an autoscaler holds still
                yield GaugeMetricFamily(name, text, value=float(producers[key]))
                old, said = DEPRECATED_NAMES[name], f"Deprecated name of {name}, gone in 0.4.0"
                yield GaugeMetricFamily(old, said, value=float(producers[key]))
        labels_ = ("worker", "host")
        families: list[CounterMetricFamily | GaugeMetricFamily] = [
            (CounterMetricFamily if counter else GaugeMetricFamily)(name, text, labels=labels_)
            for _, name, counter, text in _PER_WORKER
        ]
        info = GaugeMetricFamily(
            "h5feed_worker_info",
            "1 per worker: the protocol version spoken with it, its h5feed version",
            labels=(*labels_, "protocol", "package"),
        )
        workers = stats.get("workers", [])
        for worker in workers[:MAX_WORKER_SERIES]:
            labels = [_label(worker["name"]), _label(worker["host"])]
            for family, (key, _, _, _) in zip(families, _PER_WORKER, strict=True):
                value = worker.get(key)
                if value is not None:  # no latency before its first unit, no part yet
                    family.add_metric(labels, float(value))
            versions = [_label(worker.get("protocol", "")), _label(worker.get("package", ""))]
            info.add_metric([*labels, *versions], 1.0)
        others = workers[MAX_WORKER_SERIES:]
        if others:
            for family, (key, _, counter, _) in zip(families, _PER_WORKER, strict=True):
                values = [float(w[key]) for w in others if w.get(key) is not None]
                if values:
                    summed = counter or key in _SUMMED_GAUGES
                    family.add_metric([OTHERS, OTHERS], sum(values) if summed else max(values))
            info.add_metric([OTHERS, OTHERS, "", ""], float(len(others)))
        yield from families
        yield info


def _label(value: Any) -> str:
    """``value`` as a label, at most :data:`MAX_LABEL` characters."""
    text = str(value)
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 3] + "..."


class FeedMetrics:
    """The metrics endpoint of one feed: a private registry and its HTTP server."""

    def __init__(self, feed: _HasStats, address: tuple[str, int], *, search: bool) -> None:
        self.totals = IterationTotals()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(FeedCollector(feed, self.totals))
        ref = weakref.ref(feed)
        host, port = address
        self.server = MetricsServer(
            registry, lambda: _stats_of(ref), port, search=search, host=host
        )
        self.port = self.server.port
        _log.info("h5feed metrics at %s/metrics (stats at /stats)", self.server.url)


def _stats_of(ref: Callable[[], _HasStats | None]) -> dict[str, Any]:
    feed = ref()
    return feed.stats() if feed is not None else {"running": False}


def start_feed_metrics(feed: _HasStats, port: int | str | None) -> FeedMetrics | None:
    """The feed's endpoint on ``port`` (``metrics_port=``: a port on 127.0.0.1, or
    ``"HOST:PORT"``), else on ``$H5FEED_METRICS_PORT`` (the same; read now, at construction),
    else none. With the variable, a port already taken moves on to the next free one
    (training and validation feeds of one process), logged; an explicit ``metrics_port`` that
    is taken raises OSError naming it."""
    if port is not None:
        return FeedMetrics(feed, metrics_address(port, "metrics_port"), search=False)
    env_address = address_from_env()
    if env_address is None:
        return None
    env_port = env_address[1]
    metrics = FeedMetrics(feed, env_address, search=True)
    if env_port and metrics.port != env_port:
        _log.warning(
            "h5feed metrics: port %d is taken, serving on %d instead", env_port, metrics.port
        )
    return metrics
