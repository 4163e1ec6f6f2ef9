"""What ``h5feed bench`` writes: raw JSON, a markdown table and a PNG plot (``--out PREFIX``:
PREFIX.json, PREFIX.md, PREFIX.png), and the table on stdout. The figures come from
:mod:`h5feed.bench.summary`, the text from :mod:`h5feed.bench.markdown`.
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
from collections.abc import Sequence
from typing import Any

from h5feed.bench.contender import CANNOT_RUN
from h5feed.bench.markdown import markdown
from h5feed.bench.runner import Row
from h5feed.bench.summary import (
    ceiling_summary,
    comparison_summary,
    medians,
    row_summary,
    socket_ceiling_summary,
)
from h5feed.bench.targets import NONE, Targets
from h5feed.common.system.procstat import available_cores

__all__ = ["build_document", "machine_info", "markdown", "plot", "write_all"]


def machine_info(rows: Sequence[Row]) -> dict[str, Any]:
    """CPU model, cores, load and library versions (as the contender processes saw them)."""
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as handle:
            model = next(
                (ln.split(":", 1)[1].strip() for ln in handle if ln.startswith("model name")),
                model,
            )
    except OSError:
        pass
    versions: dict[str, Any] = {}
    for row in rows:
        for name, version in (row.ready.get("versions") or {}).items():
            if version:
                versions[name] = version
    return {
        "cpu_model": model,
        "cores_available": available_cores(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "loadavg": list(os.getloadavg()),
        "versions": versions,
    }


def build_document(
    settings: dict[str, Any],
    limit_row: Row | None,
    rows: Sequence[Row],
    ceiling: dict[str, Any] | None,
    socket_ceiling: dict[str, Any] | None = None,
    goals: Targets = NONE,
) -> dict[str, Any]:
    """Everything, as one JSON-able dict; figures judged against ``goals`` (none: none)."""
    limit = medians(limit_row.windows).get("clips_per_s", 0.0) if limit_row else 0.0
    ceiling_doc = ceiling_summary(ceiling)
    return {
        "settings": settings,
        "machine": machine_info([*([limit_row] if limit_row else []), *rows]),
        "per_core_limit": row_summary(limit_row) if limit_row else None,
        "contenders": [row_summary(r) for r in rows],
        "cannot_run": CANNOT_RUN,
        "ceiling": ceiling_doc,
        "socket_ceiling": socket_ceiling_summary(socket_ceiling, goals),
        "summary": comparison_summary(rows, limit, ceiling_doc, goals) if limit_row else None,
    }


def plot(document: dict[str, Any], path: pathlib.Path) -> str | None:
    """Throughput vs workers, one line per contender, and the per-core limit x workers; None
    when written, else why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'h5feed[bench]'): no plot"
    entries = [e for e in document["contenders"] if e["status"] == "ok" and e["median"]]
    limit = (document["per_core_limit"] or {}).get("median", {}).get("clips_per_s")
    counts = sorted({e["workers"] for e in entries if e["parallelism"] == "workers"} | {1})
    figure, axes = plt.subplots(figsize=(8, 5))
    if limit:
        axes.plot(counts, [limit * n for n in counts], "k--x", label="per-core limit x workers")
    for index, key in enumerate(dict.fromkeys(e["contender"] for e in entries)):
        mine = [e for e in entries if e["contender"] == key]
        label = mine[0]["label"]
        if mine[0]["parallelism"] == "workers":
            mine.sort(key=lambda e: e["workers"])
            xs = [e["workers"] for e in mine]
            rates = [e["median"]["clips_per_s"] for e in mine]
            axes.plot(xs, rates, "o-", color=f"C{index}", label=label)
        else:  # tf.data: threads in the trainer process, no worker count
            rate = mine[0]["median"]["clips_per_s"]
            axes.axhline(rate, linestyle=":", color=f"C{index}", label=f"{label} (no workers)")
    axes.set_xlabel("worker processes")
    axes.set_ylabel("clips/s (median)")
    axes.set_xticks(counts)
    axes.set_ylim(bottom=0)
    axes.set_title(f"h5feed bench, {document['machine']['cores_available']} cores")
    axes.legend(fontsize="small")
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return None


def write_all(document: dict[str, Any], prefix: pathlib.Path) -> list[str]:
    """PREFIX.json, PREFIX.md and PREFIX.png; returns notes (e.g. why there is no plot)."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    png = prefix.with_name(prefix.name + ".png")
    notes = []
    why_not = plot(document, png) if document["per_core_limit"] is not None else "no loaders run"
    text = markdown(document)
    if why_not is None:
        text += f"\n![throughput vs workers]({png.name})\n"
    else:
        notes.append(why_not)
    prefix.with_name(prefix.name + ".json").write_text(json.dumps(document, indent=2) + "\n")
    prefix.with_name(prefix.name + ".md").write_text(text)
    return notes
