"""The public surface h5feed promises, pinned: the package face, the ``stats()`` keys, the
``/metrics`` names (and their deprecated aliases), the documented import paths and the worker's
command. tests/project/test_public_surface.py checks the code against them; the docs' reference
tests
check the pages against them."""

from __future__ import annotations

#: Keys of ``stats()`` of a feed whose iteration ran (docs/performance/input-wait.md).
STATS_KEYS = frozenset(
    {
        "job", "running", "batches", "clips", "bytes", "per_s_recent", "per_s_total",
        "startup_s", "wait_s", "elapsed_s", "wait_share_total", "wait_share_recent",
        "inflight_batches", "credit_budget", "queue_depth", "shared_memory_slots",
        "parts_copied_into_slots", "slots_refused", "workers", "hosts", "malformed_messages",
        "dropped_parts", "reassigned_units", "units_handed_back", "units_remade", "peers_lost",
        "workers_replaced", "peers_joined",
        "refused_reconnects", "refused_keys", "index_mismatches", "unreadable_files",
        "padded_samples", "batches_dispatched", "max_inflight_batches", "cursor", "skipped",
        "skipped_per_epoch", "skipped_samples", "input_bound", "suggested_extra_workers",
        "verdict", "producers", "fleet",
    }
)  # fmt: skip

#: Deprecated aliases kept until 0.4.0 (issue 39: "fleet" means the shared fleet alone):
#: old ``stats()`` key -> its new name, the same dict under both.
DEPRECATED_KEYS = {"fleet": "producers"}

#: Keys of each entry of ``stats()["workers"]``.
WORKER_KEYS = frozenset(
    {
        "name", "pid", "host", "protocol", "package", "local", "files", "outstanding_units",
        "unit_latency_s", "count", "clips", "bytes", "busy_s", "per_s_total", "per_s_recent",
        "clips_recent", "busy_s_recent", "last_seen_s_ago", "object_requests", "object_bytes",
        "object_retries", "object_refused",
    }
)  # fmt: skip

#: Keys of ``stats()["producers"]`` (docs/deploy/sizing.md).
PRODUCERS_KEYS = frozenset(
    {"demand_clips_per_s", "replicas", "replica_capacity_clips_per_s", "replicas_needed", "shared"}
)

#: Keys of each entry of ``stats()["hosts"]``.
HOST_KEYS = frozenset({"workers", "clips", "clips_per_s"})

#: Sample names of a feed's ``/metrics`` once an iteration ran
#: (h5feed/consumer/telemetry/metrics.py).
METRIC_NAMES = frozenset(
    {
        "h5feed_batches_total", "h5feed_clips_total", "h5feed_bytes_total",
        "h5feed_input_wait_seconds_total", "h5feed_skipped_samples_total",
        "h5feed_malformed_messages_total", "h5feed_dropped_parts_total",
        "h5feed_reassigned_units_total", "h5feed_units_handed_back_total",
        "h5feed_units_remade_total", "h5feed_peers_lost_total",
        "h5feed_workers_replaced_total", "h5feed_peers_joined_total",
        "h5feed_refused_reconnects_total", "h5feed_refused_keys_total",
        "h5feed_index_mismatches_total", "h5feed_unreadable_files_total",
        "h5feed_iterations_total", "h5feed_input_wait_ratio", "h5feed_input_bound",
        "h5feed_suggested_extra_workers", "h5feed_inflight_batches",
        "h5feed_credit_budget_batches", "h5feed_queue_depth_batches", "h5feed_startup_seconds",
        "h5feed_running", "h5feed_worker_parts_total", "h5feed_worker_clips_total",
        "h5feed_worker_bytes_total", "h5feed_worker_unit_latency_seconds",
        "h5feed_worker_last_part_age_seconds", "h5feed_worker_outstanding_units",
        "h5feed_worker_files", "h5feed_worker_info", "h5feed_worker_busy_seconds_total",
        "h5feed_worker_object_requests_total", "h5feed_worker_object_bytes_total",
        "h5feed_worker_object_retries_total", "h5feed_worker_object_refused_total",
        "h5feed_producers_demand_clips_per_second", "h5feed_fleet_demand_clips_per_second",
    }
)  # fmt: skip

#: The remote producers' sizing gauges (each absent while unknown, so a short local run shows
#: only the first) -> the deprecated names they are also exported under until 0.4.0.
DEPRECATED_METRICS = {
    "h5feed_producers_demand_clips_per_second": "h5feed_fleet_demand_clips_per_second",
    "h5feed_producers_replicas_needed": "h5feed_fleet_replicas_needed",
    "h5feed_producers_replica_capacity_clips_per_second": (
        "h5feed_fleet_replica_capacity_clips_per_second"
    ),
}

#: The package face: ``h5feed.__all__``, the lazy names included.
FACE = frozenset(
    {
        "BackupAndRestore", "BatchStream", "Cursor", "DataError", "Feed", "FileReadError",
        "FrameError", "H5FeedError", "InsecureWarning", "MalformedPartWarning",
        "NoWorkersError", "NondeterministicItemWarning", "PoisonUnitError", "ProtocolError",
        "RaggedArray", "ResumeError", "SourceError", "TooManySkippedError",
        "VersionMismatchError", "WorkerDiedError", "WorkerError", "WorkerTimeoutError",
        "__version__", "batches", "dataset", "distribute", "input_wait_callback",
        "keras_batches", "layouts", "merge_states", "torch_batches",
    }
)  # fmt: skip

#: Import paths the docs name: (module, attribute).
DOCUMENTED_PATHS = (
    *(("h5feed", name) for name in ("Feed", "BatchStream", "Cursor", "RaggedArray")),
    ("h5feed.pack.shards", "ShardWriter"),
    *(
        ("h5feed.layouts", name)
        for name in ("Groups", "FrameDatasets", "Raw", "Flat", "Video", "Blobs")
    ),
    ("h5feed.layouts", "directory_classes"),
)

#: What process monitors (and ``tests/conftest.py::worker_pids``) match a worker by.
WORKER_MODULE = "h5feed.producer.worker"
