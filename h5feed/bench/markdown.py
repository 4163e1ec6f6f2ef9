"""``h5feed bench``'s report as markdown (written to PREFIX.md and printed on stdout)."""

from __future__ import annotations

from typing import Any

from h5feed.bench.targets import lower_is_better
from h5feed.bench.workload import BATCH_BYTES, BATCH_SIZE, CLIP_SHAPE


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(document: dict[str, Any]) -> str:
    """The report as markdown (also printed to stdout)."""
    s, m = document["settings"], document["machine"]
    lines = [
        f"# h5feed bench: {m['cores_available']} cores",
        "",
        f"Command: `{s['command']}`; {s['date']}; {m['cpu_model']}, {m['cores_available']} "
        f"cores available, Python {m['python']}; "
        + ", ".join(f"{k} {v}" for k, v in sorted(m["versions"].items())),
        "",
        f"Workload: {s['workload']}. Dataset: {s['dataset']}. {s['method']}",
        "",
    ]
    if document["per_core_limit"] is not None:
        lines += [
            "| contender | workers | clips/s | frames/s | trainer CPU ms/clip | worker CPU "
            "ms/clip | peak RSS MB trainer / PSS MB all | x (k x per-core limit) | other "
            "load (cores) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for entry in [document["per_core_limit"], *document["contenders"]]:
            lines.append(_table_line(entry))
        lines.append("")
        for entry in document["contenders"]:
            if entry["status"] != "ok":
                reason = entry["reason"].strip().splitlines()[0] if entry["reason"] else ""
                lines.append(f"- **{entry['key']}**: {entry['status']}: {reason}")
        for name, reason in document["cannot_run"].items():
            lines.append(f"- **{name}**: not run: {reason}")
        lines += ["", "Setups:", ""]
        seen = set()
        for entry in [document["per_core_limit"], *document["contenders"]]:
            if entry["contender"] not in seen:
                seen.add(entry["contender"])
                lines.append(f"- {entry['label']}: {entry['setup']}")
        lines.append("")
    ceiling = document["ceiling"]
    if ceiling:
        lines += _ceiling_lines(ceiling)
    if document.get("socket_ceiling"):
        lines += _socket_lines(document["socket_ceiling"])
    summary = document["summary"]
    if summary:
        lines += _summary_lines(summary)
    return "\n".join(lines) + "\n"


def _table_line(entry: dict[str, Any]) -> str:
    med = entry["median"]
    workers = (
        entry["workers"]
        if entry["parallelism"] == "workers"
        else (f"AUTOTUNE ({entry['workers']} cores)" if entry["parallelism"] == "threads" else "-")
    )
    if entry["status"] != "ok" or not med:
        return f"| {entry['label']} | {workers} | {entry['status']} | | | | | | |"
    memory = f"{med['trainer_maxrss_mb']:.0f} / {entry['peak_pss_mb_tree']:.0f}"
    return (
        f"| {entry['label']} | {workers} | {med['clips_per_s']:.1f} | {med['frames_per_s']:.0f} "
        f"| {med['trainer_cpu_ms_per_clip']:.2f} | {med['worker_cpu_ms_per_clip']:.2f} "
        f"| {memory} | {_fmt(entry['ratio_to_k_times_limit'], '.3f')} "
        f"| {med['other_load_cores']:.2f} |"
    )


def _ceiling_lines(ceiling: dict[str, Any]) -> list[str]:
    if "error" in ceiling:
        return ["## Consumer ceiling", "", f"failed: {ceiling['error']}", ""]
    lines = [
        "## Consumer ceiling",
        "",
        f"{ceiling['producers']} synthetic producer(s) on CPUs {ceiling['producer_cpus']}, "
        f"trainer on CPUs {ceiling['trainer_cpus']}; batches of 8 x 16 x 112 x 112 x 3 uint8.",
        "",
        "| path | GB/s | batches/s | trainer CPU ms/clip |",
        "|---|---|---|---|",
    ]
    for api, label in (("dataset", "h5feed.dataset"), ("batches", "h5feed.batches")):
        if api in ceiling:
            c = ceiling[api]
            lines.append(
                f"| {label} | {c['gb_per_s']:.2f} | {c['batches_per_s']:.0f} "
                f"| {c['trainer_cpu_ms_per_clip']:.3f} |"
            )
    if "memcpy" in ceiling:
        lines.append(f"| memcpy (np.copyto, one batch) | {ceiling['memcpy']['gb_per_s']:.2f} | | |")
    return [*lines, ""]


def _socket_lines(result: dict[str, Any]) -> list[str]:
    if "error" in result:
        return ["## Socket ceiling", "", f"failed: {result['error']}", ""]
    goals = result.get("targets") or {}
    stated = []
    if "dataset_vs_raw" in goals:
        stated.append(f"h5feed.dataset >= {goals['dataset_vs_raw']} x raw")
    if "trainer_cpu_ms_per_clip" in goals:
        stated.append(f"trainer CPU <= {goals['trainer_cpu_ms_per_clip']} ms/clip")
    lines = [
        "## Socket ceiling (TCP between network namespaces)",
        "",
        f"{result['producers']} sender(s) in network namespace {result['netns']} "
        f"({result['link']}) "
        f"on CPUs {result['producer_cpus']}, trainer on CPUs {result['trainer_cpus']}; "
        f"batches of {' x '.join(map(str, (BATCH_SIZE, *CLIP_SHAPE)))} uint8 "
        f"({BATCH_BYTES / 1e6:.1f} MB); raw = plain pyzmq, a msgpack header "
        "frame + the batch frame." + (f" Targets: {', '.join(stated)}." if stated else ""),
        "",
        "| transport | path | GB/s | batches/s | x raw | trainer CPU ms/clip | sender CPU "
        "ms/clip | other load (cores) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    labels = {"raw": "raw ZeroMQ", "batches": "h5feed.batches", "dataset": "h5feed.dataset"}
    for transport, entry in result["transports"].items():
        for path, label in labels.items():
            if path not in entry:
                continue
            c = entry[path]
            ratio = entry.get(f"{path}_vs_raw", 1.0 if path == "raw" else None)
            lines.append(
                f"| {transport} | {label} | {c['gb_per_s']:.2f} | {c['batches_per_s']:.0f} "
                f"| {_fmt(ratio, '.2f')} | {c['trainer_cpu_ms_per_clip']:.3f} "
                f"| {c['worker_cpu_ms_per_clip']:.3f} | {c['other_load_cores']:.2f} |"
            )
    lines += ["", "Where the trainer's CPU goes, ms per clip:", ""]
    for transport, entry in result["transports"].items():
        stages = entry.get("cpu_ms_per_clip_by_stage")
        if stages:
            parts = "; ".join(f"{name}: {value:.3f}" for name, value in stages.items())
            lines.append(f"- {transport}: {parts}")
    if not goals:
        return [*lines, ""]
    lines += ["", "Targets:", ""]
    for transport, entry in result["transports"].items():
        for name, met in entry["meets"].items():
            value = (
                entry["dataset_vs_raw"]
                if name == "dataset_vs_raw"
                else entry["dataset"]["trainer_cpu_ms_per_clip"]
            )
            lines.append(f"- {transport}: {name} {value:.3f}: {'MEETS' if met else 'MISSES'}")
    return [*lines, ""]


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    n = summary["workers"]
    judged = summary.get("judged", "h5feed")
    goals = summary.get("targets") or {}
    title = "## Targets" if goals else "## Summary"
    lines = [title, "", f"At {n} workers (medians; h5feed judged as `{judged}`):", ""]
    names = {
        "h5feed_vs_twice_limit": f"h5feed / ({n} x per-core limit), paired by window",
        "h5feed_vs_best_alternative": "h5feed / best alternative "
        f"({summary.get('best_alternative', '-')})",
        "trainer_cpu_ms_per_clip": "h5feed trainer CPU, ms per clip",
        "ceiling_gb_per_s": "consumer ceiling, GB/s (h5feed.dataset)",
    }
    for name, label in names.items():
        value = summary.get(name)
        if name not in goals:
            lines.append(f"- {label}: {_fmt(value, '.3f')}")
            continue
        sign = "<=" if lower_is_better(name) else ">="
        verdict = "" if value is None else (" MEETS" if summary["meets"][name] else " MISSES")
        lines.append(f"- {label}: {_fmt(value, '.3f')} (target {sign} {goals[name]}){verdict}")
    if summary.get("parallel_limit_vs_twice_limit") is not None:
        lines += [
            "",
            f"For scale (no target): {n} independent copies of the per-core limit at once "
            f"reach {summary['parallel_limit_vs_twice_limit']:.3f} x ({n} x per-core limit) "
            "on this machine; h5feed gives "
            f"{summary['h5feed_vs_parallel_limit']:.3f} of what those {n} processes give.",
        ]
    scaling = summary.get("scaling_efficiency") or {}
    if scaling:
        goal = summary.get("scaling_efficiency_target")
        target = "" if goal is None else f"; target >= {goal} with one worker per core"
        lines += ["", "Scaling efficiency (clips/s over N x the per-core limit, paired"
                  f"{target}):", ""]  # fmt: skip
        lines += [f"- {row}: {_fmt(value, '.3f')}" for row, value in scaling.items()]
    return [*lines, ""]
