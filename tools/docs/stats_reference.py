"""The ``stats()`` and ``/metrics`` reference (docs/reference/stats.md, marker
``<!-- h5feed:stats -->``), generated at every build.

Guarantees:

1. Every key has a description: the tables below are checked against the keys
   tests/project/test_public_surface.py pins (tests/docs/test_docs_reference.py), so a key added to
   ``stats()`` without a line here fails a test, and so does a line for a key that is gone.
2. The ``/metrics`` names, types and help texts are not written here: they come from the
   feed's own Prometheus collector (:class:`h5feed.consumer.telemetry.metrics.FeedCollector`), run
   on a
   sample ``stats()`` in which every figure is known, so every family it can export is
   listed, each with the help text a scrape shows.
3. Nothing runs but that collector: no feed, no process, no socket.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

STATS_MARKER = "<!-- h5feed:stats -->"

#: ``stats()`` of a feed whose iteration ran: key -> what it says.
STATS: Mapping[str, str] = {
    "job": "the iteration's job id (a new one per iteration)",
    "running": 'True while the iteration runs (`{"running": False}` alone before the first)',
    "batches": "batches the trainer took",
    "clips": "clips the trainer took",
    "bytes": "bytes of frames the trainer took",
    "per_s_recent": "`{events, clips, bytes}` per second over the last 10 s (events: batches)",
    "per_s_total": "the same since the iteration started",
    "startup_s": "seconds from the iteration's start to its first batch (workers starting, "
    "files indexed)",
    "wait_s": "seconds `next()` waited for a batch not yet ready, from the first batch on",
    "elapsed_s": "seconds since the first batch",
    "wait_share_total": "`wait_s / elapsed_s`: the feed wait over the whole iteration",
    "wait_share_recent": "the feed wait over the last 10 s: the share of time the reader of "
    "the feed (tf.data's prefetch thread, or your loop) waited for a batch",
    "inflight_batches": "batches dispatched and not yet taken (credits in use)",
    "credit_budget": "the most batches in flight (`max_inflight_batches`)",
    "queue_depth": "complete batches waiting to be taken",
    "shared_memory_slots": "shared-memory batch slots made",
    "parts_copied_into_slots": "parts whose rows came over the socket because their worker "
    "could not map the slot (a producer in a container), copied in once",
    "slots_refused": "jobs whose slots a local worker could not map",
    "workers": "one entry per worker: the table below",
    "hosts": "per host: `{workers, clips, clips_per_s}`, the sums of its workers",
    "malformed_messages": "messages or parts that fit no question, dropped",
    "dropped_parts": "parts of a unit the worker does not hold (duplicates, stale jobs), dropped",
    "reassigned_units": "units sent again after their worker was lost: "
    "`units_handed_back + units_remade`",
    "units_handed_back": "units a leaving worker gave back unmade (made once)",
    "units_remade": "units sent again because their worker was lost without handing them "
    "back (possibly made twice, delivered once)",
    "peers_lost": "workers lost (exited, killed, vanished, stuck, left)",
    "workers_replaced": "local worker processes started in place of dead ones",
    "peers_joined": "workers that joined during the iteration",
    "refused_reconnects": "lost processes refused on their return (no new nonce, or another "
    "CURVE key)",
    "refused_keys": "connections refused for a CURVE key that is not listed",
    "index_mismatches": "workers refused for a file whose copy differs from the planned index",
    "unreadable_files": "files moved off a worker that cannot read them",
    "padded_samples": 'padded rows of a padded shard (`shard_remainder="pad"`)',
    "batches_dispatched": "batches whose units were sent",
    "max_inflight_batches": "the most batches that were in flight at once",
    "cursor": "`[epoch, batch]`: the next batch the trainer takes",
    "skipped": 'samples zero-filled for a bad frame (`on_error="skip"`)',
    "skipped_per_epoch": 'the same per epoch, `{"epoch": count}`',
    "skipped_samples": "the first 100 skipped samples, each with file, video, frame and reason",
    "input_bound": "True when the feed wait is above 10%",
    "suggested_extra_workers": "workers to add to keep up (0 when not input-bound, or when "
    "more would not fit on this host's cores)",
    "verdict": "one line saying the two above in words",
    "producers": "the remote producer replicas that would keep up: the table below",
    "fleet": "**deprecated**: the same dict as `producers` under its old name, until 0.4.0 "
    '("fleet" now means the [shared fleet](../concepts.md#shared-fleet) alone)',
}

#: Each entry of ``stats()["workers"]``.
WORKER: Mapping[str, str] = {
    "name": "the worker's name, as in its log lines and `h5feed top`",
    "pid": "its process id (on its host)",
    "host": "its host name",
    "protocol": "the protocol version spoken with it",
    "package": "its h5feed version",
    "local": "True for the feed's own local workers",
    "files": "HDF5 files it owns (0 for a source)",
    "outstanding_units": "units it holds now",
    "unit_latency_s": "seconds from sending a unit to its data back (None before the first)",
    "count": "parts received from it",
    "clips": "clips received from it",
    "bytes": "bytes of frames received from it",
    "busy_s": "seconds it says its parts took (protocol 6)",
    "per_s_total": "`{events, clips, bytes}` per second since it joined",
    "per_s_recent": "the same over the last 10 s",
    "clips_recent": "clips over the last 10 s",
    "busy_s_recent": "busy seconds over the last 10 s",
    "last_seen_s_ago": "seconds since its last part (None before the first)",
    "object_requests": "requests it made to object storage (a HEAD or a ranged GET each, "
    "read-ahead included; 0 for local files), as its parts said",
    "object_bytes": "bytes of the bodies of those requests",
    "object_retries": "ranged GETs and reads of an object it retried itself (a body cut "
    "short, a reset connection; the storage client's own retries not counted)",
    "object_refused": "reads it refused because the object changed (HTTP 412, or another ETag "
    "than the one indexed)",
}

#: Each entry of ``stats()["hosts"]``.
HOST: Mapping[str, str] = {
    "workers": "workers on that host",
    "clips": "clips they delivered",
    "clips_per_s": "their clips per second over the last 10 s",
}

#: ``stats()["producers"]``: remote producers, sized to demand (docs/deploy/sizing.md).
PRODUCERS: Mapping[str, str] = {
    "demand_clips_per_s": "clips/s the trainer would take if it never waited, less what its "
    "local workers deliver (None while unknown)",
    "replicas": "producer replicas (hosts of remote workers) that said their busy time",
    "replica_capacity_clips_per_s": "clips/s one replica makes with every worker busy, the "
    "mean over replicas (None while unknown)",
    "replicas_needed": "replicas that would keep up, at least 1 (None while unknown)",
    "shared": "with `fleet=`: the shared fleet as this trainer sees it (replicas, trainers "
    "per replica, this trainer's CPU share, refusals); else None",
}

#: What ``Feed.stats()`` adds to its iteration's keys.
FEED_EXTRA: Mapping[str, str] = {
    "metrics_port": "the port of `/metrics` and `/stats`, with `metrics_port=` only",
}


def _sample_stats() -> dict[str, Any]:
    """A ``stats()`` in which every figure the collector reads is known (guarantee 2)."""
    rates = {"events": 1.0, "clips": 1.0, "bytes": 1.0}
    worker = {key: 1 for key in WORKER} | {
        "name": "w0", "host": "h", "protocol": 6, "package": "x", "local": True,
        "per_s_total": rates, "per_s_recent": rates,
    }  # fmt: skip
    producers = {key: 1.0 for key in PRODUCERS} | {"shared": None}
    sample = {"job": "j", "workers": [worker], "producers": producers, "fleet": producers}
    return {key: 0 for key in STATS} | sample


def metric_families() -> list[tuple[str, str, str]]:
    """(sample name, type, help) of every family a feed's ``/metrics`` can export."""
    from h5feed.consumer.telemetry.metrics import FeedCollector, IterationTotals

    stats = _sample_stats()

    class _Feed:
        def stats(self) -> dict[str, Any]:
            return stats

    feed = _Feed()
    families = []
    for family in FeedCollector(feed, IterationTotals()).collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        families.append((name, family.type, family.documentation))
    return families


def _cell(text: str) -> str:
    """A table cell's text: a ``|`` would end the cell."""
    return text.replace("|", "\\|")


def _table(rows: Mapping[str, str], head: str = "key") -> str:
    lines = [f"| {head} | what it says |", "|---|---|"]
    lines += [f"| `{key}` | {_cell(text)} |" for key, text in rows.items()]
    return "\n".join(lines)


def stats_markdown() -> str:
    """The generated part of docs/reference/stats.md."""
    metrics = ["| name | type | help |", "|---|---|---|"]
    metrics += [f"| `{name}` | {kind} | {_cell(text)} |" for name, kind, text in metric_families()]
    return "\n\n".join(
        [
            "## `stats()`",
            _table({**STATS, **FEED_EXTRA}),
            '### `stats()["workers"]`: each worker',
            _table(WORKER),
            '### `stats()["hosts"]`: each host',
            _table(HOST),
            '### `stats()["producers"]`: remote producers',
            _table(PRODUCERS),
            "## `/metrics`",
            "Per-worker families carry the labels `worker` and `host` (`h5feed_worker_info` "
            "also `protocol` and `package`); the `h5feed_producers_*` gauges are absent while "
            "unknown, and each is also exported under its deprecated name `h5feed_fleet_*` "
            "(the same value) until 0.4.0. The `h5feed_fleet_*` families of a producer "
            "(`h5feed produce --listen`) are the shared fleet's own: [Shared fleet]"
            "(../deploy/shared-fleet.md).",
            "\n".join(metrics),
        ]
    )
