"""The figures of ``h5feed bench``, from the measured windows: medians, ratios to the
per-core limit, the ceilings' summaries, and the summary at 2 workers, each judged against
the targets given (:mod:`h5feed.bench.targets`; none: judged against nothing).

Ratios: a contender with k workers (k = 1 for a single-threaded tf.data recipe, k = the cores
for an AUTOTUNE one) is compared with k x the per-core limit, window by window (each
contender window with the limit window just before it), and the median of those ratios is
reported. The summary is taken at 2 workers (or the cores there are, if fewer).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from h5feed.bench.contender import PARALLEL_PER_CORE
from h5feed.bench.measure import METRICS, Window
from h5feed.bench.runner import Row
from h5feed.bench.targets import Targets, met
from h5feed.bench.workload import BATCH_SIZE
from h5feed.common.system.procstat import available_cores


def medians(windows: Sequence[Window]) -> dict[str, float]:
    """The median of every metric over ``windows`` (empty: {})."""
    if not windows:
        return {}
    values = {name: statistics.median(getattr(w, name) for w in windows) for name in METRICS}
    values["trainer_maxrss_mb"] = max(w.trainer_maxrss_mb for w in windows)
    return values


def paired_ratio(row: Row) -> float | None:
    """Median over windows of clips/s / (k x the limit's clips/s in the window before)."""
    ratios = [
        w.clips_per_s / (row.workers * limit.clips_per_s)
        for w, limit in zip(row.windows, row.limit_windows, strict=False)
        if limit.clips_per_s > 0
    ]
    return statistics.median(ratios) if ratios else None


def row_summary(row: Row) -> dict[str, Any]:
    return {
        "key": row.key,
        "contender": row.info.key,
        "label": row.info.label,
        "parallelism": row.info.parallelism,
        "workers": row.workers,
        "status": row.status,
        "reason": row.reason,
        "setup": row.info.setup,
        "check": row.check,
        "startup_s": row.ready.get("startup_s"),
        "versions": row.ready.get("versions"),
        "median": medians(row.windows),
        "ratio_to_k_times_limit": paired_ratio(row),
        "peak_rss_mb_tree": row.peak_rss_mb,
        "peak_pss_mb_tree": row.peak_pss_mb,
        "windows": [w.as_dict() for w in row.windows],
        "limit_windows": [w.as_dict() for w in row.limit_windows],
    }


def ceiling_summary(ceiling: dict[str, Any] | None) -> dict[str, Any] | None:
    """Median GB/s, batches/s and trainer CPU per API, and memcpy GB/s."""
    if not ceiling or "windows" not in ceiling:
        return ceiling
    result: dict[str, Any] = {k: v for k, v in ceiling.items() if k != "windows"}
    for api in ("dataset", "batches", "memcpy"):
        ws = [w for w in ceiling["windows"] if w["api"] == api]
        if not ws:
            continue
        entry = {"gb_per_s": statistics.median(w["gb_per_s"] for w in ws)}
        if api != "memcpy":
            entry["batches_per_s"] = statistics.median(w["batches_per_s"] for w in ws)
            entry["trainer_cpu_ms_per_clip"] = statistics.median(
                w["trainer_cpu_ms_per_clip"] for w in ws
            )
        result[api] = entry
    result["windows"] = ceiling["windows"]
    return result


def socket_ceiling_summary(result: dict[str, Any] | None, goals: Targets) -> dict[str, Any] | None:
    """Per transport: median GB/s, batches/s and trainer CPU ms/clip of each path (raw,
    batches, dataset), the ratios to raw, where the trainer's CPU goes (receive = raw's;
    h5feed = batches - raw; TF hand-off = dataset - batches) and which of ``goals.socket``
    are met."""
    if not result or "windows" not in result:
        return result
    out: dict[str, Any] = {k: v for k, v in result.items() if k != "windows"}
    out["targets"] = goals.socket
    per: dict[str, Any] = {}
    for transport in result["transports"]:
        entry: dict[str, Any] = {}
        for path in ("raw", "batches", "dataset"):
            ws = [w for w in result["windows"] if w["transport"] == transport and w["path"] == path]
            if ws:
                entry[path] = {
                    "gb_per_s": statistics.median(w["gb_per_s"] for w in ws),
                    "batches_per_s": statistics.median(w["clips_per_s"] for w in ws) / BATCH_SIZE,
                    "trainer_cpu_ms_per_clip": statistics.median(
                        w["trainer_cpu_ms_per_clip"] for w in ws
                    ),
                    "worker_cpu_ms_per_clip": statistics.median(
                        w["worker_cpu_ms_per_clip"] for w in ws
                    ),
                    "other_load_cores": statistics.median(w["other_load_cores"] for w in ws),
                }
        raw = entry.get("raw", {}).get("gb_per_s")
        for path in ("batches", "dataset"):
            if path in entry and raw:
                entry[f"{path}_vs_raw"] = entry[path]["gb_per_s"] / raw
        cpu = {p: entry[p]["trainer_cpu_ms_per_clip"] for p in entry if isinstance(entry[p], dict)}
        if len(cpu) == 3:
            entry["cpu_ms_per_clip_by_stage"] = {
                "receive (raw ZeroMQ)": cpu["raw"],
                "h5feed: protocol, assembly, copy into the batch (batches - raw)": cpu["batches"]
                - cpu["raw"],
                "TF hand-off (dataset - batches)": cpu["dataset"] - cpu["batches"],
            }
        figures: dict[str, float | None] = {
            "dataset_vs_raw": entry.get("dataset_vs_raw"),
            "trainer_cpu_ms_per_clip": cpu.get("dataset"),
        }
        meets = {}
        for name, goal in goals.socket.items():
            value = figures[name]
            if value is not None:
                meets[name] = met(name, value, goal)
        entry["meets"] = meets
        per[transport] = entry
    out["transports"] = per
    out["windows"] = result["windows"]
    return out


#: h5feed's contenders in the order the summary judges them: h5feed.dataset where TensorFlow is
#: installed, else h5feed.batches (a GPU machine with PyTorch only): the same pipeline.
JUDGED_H5FEED: tuple[str, ...] = ("h5feed", "h5feed-numpy")


def comparison_summary(
    rows: Sequence[Row], limit: float, ceiling: dict[str, Any] | None, goals: Targets
) -> dict[str, Any]:
    """The summary at 2 workers (or fewer cores), and which of ``goals.comparison`` are met
    (the goal of the scaling efficiency, when given, is carried for the report)."""
    n = min(2, available_cores())
    ok = [r for r in rows if r.status == "ok" and r.windows]
    ours = [r for r in ok if r.info.key.startswith("h5feed")]
    feed = next(
        (r for key in JUDGED_H5FEED for r in ours if r.info.key == key and r.workers == n),
        None,
    )
    parallel = next(
        (r for r in ok if r.info.key == PARALLEL_PER_CORE.key and r.workers == n), None
    )  # the machine's ceiling for n processes: context, not an alternative
    others = [
        r
        for r in ok
        if r not in ours
        and r.info.key != PARALLEL_PER_CORE.key
        and (r.info.parallelism != "workers" or r.workers == n)
    ]
    best = max(others, key=lambda r: medians(r.windows)["clips_per_s"], default=None)
    out: dict[str, Any] = {
        "workers": n,
        "targets": goals.comparison,
        "per_core_limit_clips_per_s": limit,
    }
    if goals.scaling_efficiency is not None:
        out["scaling_efficiency_target"] = goals.scaling_efficiency
    # Scaling efficiency: clips/s with N workers over N x the per-core limit (paired windows).
    out["scaling_efficiency"] = {
        f"{r.info.key} x{r.workers}": paired_ratio(r) for r in ours if r.workers > 1
    }
    if feed is not None:
        out["judged"] = feed.info.key
        rate = medians(feed.windows)["clips_per_s"]
        out["h5feed_clips_per_s"] = rate
        out["h5feed_vs_twice_limit"] = paired_ratio(feed)
        out["trainer_cpu_ms_per_clip"] = medians(feed.windows)["trainer_cpu_ms_per_clip"]
        if best is not None:
            out["best_alternative"] = best.key
            out["h5feed_vs_best_alternative"] = rate / medians(best.windows)["clips_per_s"]
        if parallel is not None:
            out["parallel_limit_vs_twice_limit"] = paired_ratio(parallel)
            out["h5feed_vs_parallel_limit"] = rate / medians(parallel.windows)["clips_per_s"]
    if ceiling and "dataset" in ceiling:
        out["ceiling_gb_per_s"] = ceiling["dataset"]["gb_per_s"]
    out["meets"] = {
        name: met(name, out[name], goal)
        for name, goal in goals.comparison.items()
        if out.get(name) is not None
    }
    return out
