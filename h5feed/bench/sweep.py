"""``h5feed bench --dataset A,B,...``: the loaders over several dataset shapes in one run.

For each shape (:mod:`h5feed.bench.shapes`: a file count, or files of unequal sizes) the
whole comparison runs as ``h5feed bench`` runs it for one dataset (the same contenders and
settings, the per-core limit windows between theirs: :func:`h5feed.bench.main.
measure_dataset`), without the consumer ceiling (it does not depend on the files). The sweep
then reads, per shape, the summary at 2 workers (:func:`h5feed.bench.summary.
comparison_summary`): h5feed / the parallel limit (``per-core-parallel`` at 2 workers: the
2-core limit, as today), h5feed / the best alternative there, the trainer's and the
workers' CPU per clip and the cores h5feed kept busy (:func:`cores_busy`: all of them means
the ratio is set by CPU per clip, not by idle workers). Writes PREFIX.json (the sweep and
every shape's whole document), PREFIX.md (the sweep's table, then each shape's report) and
PREFIX.png (the two ratios per shape).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Sequence
from typing import Any

from h5feed.bench.main import Options, log, measure_dataset
from h5feed.bench.markdown import markdown
from h5feed.bench.summary import JUDGED_H5FEED
from h5feed.bench.targets import NONE
from h5feed.bench.targets import load as load_targets
from h5feed.common.system.procstat import available_cores


def sweep_row(
    shape_text: str, files: int, videos: int, document: dict[str, Any] | None
) -> dict[str, Any]:
    """One shape's figures from its document (None: its per-core limit failed)."""
    row: dict[str, Any] = {"dataset": shape_text, "files": files, "videos": videos}
    summary = None if document is None else document.get("summary")
    if document is None or not summary:
        row["error"] = "the per-core limit failed: nothing judged"
        return row
    n = summary["workers"]
    parallel = _median(document, "per-core-parallel", n, "clips_per_s")
    best = summary.get("best_alternative")
    best_rate = next(
        (e["median"].get("clips_per_s") for e in document["contenders"] if e["key"] == best),
        None,
    )
    row.update(
        workers=n,
        judged=summary.get("judged"),
        h5feed_clips_per_s=summary.get("h5feed_clips_per_s"),
        parallel_limit_clips_per_s=parallel,
        h5feed_vs_parallel_limit=summary.get("h5feed_vs_parallel_limit"),
        best_alternative=best,
        best_alternative_clips_per_s=best_rate,
        h5feed_vs_best_alternative=summary.get("h5feed_vs_best_alternative"),
        trainer_cpu_ms_per_clip=summary.get("trainer_cpu_ms_per_clip"),
        worker_cpu_ms_per_clip=next(  # of the contender the summary judged
            (
                cpu
                for key in JUDGED_H5FEED
                if (cpu := _median(document, key, n, "worker_cpu_ms_per_clip")) is not None
            ),
            None,
        ),
        limit_cpu_ms_per_clip=_median(document, "per-core-parallel", n, "worker_cpu_ms_per_clip"),
        not_run=[
            f"{e['key']}: {e['status']}" for e in document["contenders"] if e["status"] != "ok"
        ],
    )
    row["cores_busy"] = cores_busy(row)
    return row


def _median(document: dict[str, Any], contender: str, workers: int, field: str) -> Any:
    """``field`` of ``contender``'s median at ``workers`` workers in ``document``, or None."""
    return next(
        (
            e["median"].get(field)
            for e in document["contenders"]
            if e["contender"] == contender and e["workers"] == workers and e["median"]
        ),
        None,
    )


def cores_busy(row: dict[str, Any]) -> float | None:
    """The cores h5feed kept busy: clips/s x (its workers' + the trainer's CPU per clip). At
    the machine's core count, h5feed / limit is set by its CPU per clip against the limit's,
    not by idle workers (a balance problem would show as fewer cores busy)."""
    rate = row.get("h5feed_clips_per_s")
    worker, trainer = row.get("worker_cpu_ms_per_clip"), row.get("trainer_cpu_ms_per_clip")
    if rate is None or worker is None or trainer is None:
        return None
    return float(rate) * (float(worker) + float(trainer)) / 1000.0


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def sweep_markdown(rows: Sequence[dict[str, Any]], command: str, date: str) -> str:
    """The sweep's table (one line per shape)."""
    lines = [
        "# h5feed bench: file-count sweep",
        "",
        f"Command: `{command}`; {date}; {available_cores()} cores available.",
        "",
        "| dataset | files | videos | h5feed clips/s | parallel limit clips/s | h5feed / limit "
        "| best alternative | its clips/s | h5feed / best | trainer CPU ms/clip "
        "| worker CPU ms/clip | limit's CPU ms/clip | cores busy |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dataset']} | {r['files']} | {r['videos']} "
            f"| {_fmt(r.get('h5feed_clips_per_s'), '.1f')} "
            f"| {_fmt(r.get('parallel_limit_clips_per_s'), '.1f')} "
            f"| {_fmt(r.get('h5feed_vs_parallel_limit'), '.2f')} "
            f"| {r.get('best_alternative') or '-'} "
            f"| {_fmt(r.get('best_alternative_clips_per_s'), '.1f')} "
            f"| {_fmt(r.get('h5feed_vs_best_alternative'), '.2f')} "
            f"| {_fmt(r.get('trainer_cpu_ms_per_clip'), '.3f')} "
            f"| {_fmt(r.get('worker_cpu_ms_per_clip'), '.2f')} "
            f"| {_fmt(r.get('limit_cpu_ms_per_clip'), '.2f')} "
            f"| {_fmt(r.get('cores_busy'), '.2f')} |"
        )
    skipped = sorted({s for r in rows for s in r.get("not_run", [])})
    if skipped:
        lines += ["", "Not run: " + "; ".join(skipped) + "."]
    errors = [f"{r['dataset']}: {r['error']}" for r in rows if r.get("error")]
    if errors:
        lines += ["", "Failed: " + "; ".join(errors) + "."]
    return "\n".join(lines) + "\n"


def plot(rows: Sequence[dict[str, Any]], path: pathlib.Path) -> str | None:
    """Bars of h5feed / limit and h5feed / best per shape; None when written, else why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'h5feed[bench]'): no plot"
    labels = [r["dataset"] for r in rows]
    xs = range(len(rows))
    figure, axes = plt.subplots(figsize=(max(6, 1.4 * len(rows)), 4.5))
    for offset, key, label in (
        (-0.2, "h5feed_vs_parallel_limit", "h5feed / parallel limit"),
        (0.2, "h5feed_vs_best_alternative", "h5feed / best alternative"),
    ):
        values = [r.get(key) or 0.0 for r in rows]
        axes.bar([x + offset for x in xs], values, width=0.4, label=label)
    axes.axhline(1.0, color="k", linewidth=0.8)
    axes.set_xticks(list(xs))
    axes.set_xticklabels(labels)
    axes.set_xlabel("dataset (FILESxVIDEOS, or videos per file)")
    axes.set_ylabel("ratio at 2 workers")
    axes.set_title("h5feed bench: file-count sweep")
    axes.legend(fontsize="small")
    axes.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return None


def run_sweep(options: Options) -> int:
    """Every shape of ``options.datasets`` in turn; writes PREFIX.json, .md and .png."""
    if not options.loaders:
        log("h5feed bench: error: a sweep (--dataset A,B,...) runs the loaders: drop --ceiling")
        return 2
    goals = load_targets(options.targets) if options.targets is not None else NONE
    each = dataclasses.replace(options, ceiling=False)
    documents: dict[str, dict[str, Any] | None] = {}
    rows = []
    for shape in options.datasets:
        log(f"sweep: dataset {shape.text} ({shape.files} files, {shape.videos} videos)")
        document = measure_dataset(each, shape, goals)
        documents[shape.text] = document
        rows.append(sweep_row(shape.text, shape.files, shape.videos, document))
    out = options.out or pathlib.Path("docs/bench") / f"sweep-{available_cores()}cores"
    out.parent.mkdir(parents=True, exist_ok=True)
    png = out.with_name(out.name + ".png")
    why_not = plot(rows, png)
    text = sweep_markdown(rows, options.command, options.date)
    if why_not is None:
        text += f"\n![h5feed per dataset shape]({png.name})\n"
    for shape_text, document in documents.items():
        if document is not None:
            text += f"\n## Dataset {shape_text}\n\n" + markdown(document).split("\n", 1)[1]
    whole = {"command": options.command, "date": options.date, "sweep": rows, "datasets": documents}
    out.with_name(out.name + ".json").write_text(json.dumps(whole, indent=2) + "\n")
    out.with_name(out.name + ".md").write_text(text)
    print(sweep_markdown(rows, options.command, options.date))
    if why_not is not None:
        log(f"note: {why_not}")
    log(f"wrote {out}.json, {out}.md" + ("" if why_not else f", {out}.png"))
    return 0 if all("error" not in r for r in rows) else 1
