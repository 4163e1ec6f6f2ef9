"""``h5feed bench gpu-train``: calibrate the model's width, then train it fed by each feeder in
turn, each in a fresh process; report and plot (what each figure means: ``h5feed bench
gpu-train --help``, :mod:`h5feed.bench.subcommands`).

A feeder's process is ``python -m h5feed.bench.gpu.train SPEC_JSON`` (so is the
calibration's); it prints one line ``@@gpu_train JSON``, its result. A feeder that fails or
outlasts ``_CHILD_TIMEOUT_S`` is reported with its error, never with a number.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import subprocess
import sys
from typing import Any

from h5feed.bench.gpu.loops import run_keras, run_torch
from h5feed.bench.workload import FULL_SPEC, prepare_dataset

_TAG = "@@gpu_train "
_CHILD_TIMEOUT_S = 300
#: What a feeder's process is told of the command line (JSON-able).
_CHILD_ARGS = ("workers", "seconds", "warmup", "widths", "margin", "need_clips_per_s",
               "device", "data_dir", "dataset")  # fmt: skip
_OTHER_ARGS = ("width", "calibrate", "need_from", "need_workers", "feeders", "json", "png")


def need_from(path: pathlib.Path, workers: int) -> float:
    """The clips/s of ``h5feed-numpy`` at ``workers`` in an ``h5feed bench`` JSON report (the
    most any worker count reached, when that count was not run)."""
    try:
        rows = json.loads(path.read_text())["contenders"]
        rates = {
            r["workers"]: r["median"]["clips_per_s"]
            for r in rows
            if r["contender"] == "h5feed-numpy" and r["status"] == "ok"
        }
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not an h5feed bench report ({error})") from None
    if not rates:
        raise ValueError(f"{path}: no h5feed-numpy row that ran")
    return float(rates.get(workers) or max(rates.values()))


def dataset_paths(args: argparse.Namespace) -> list[str]:
    """The bench dataset of ``args.dataset`` (files, videos per file) under ``args.data_dir``,
    made if missing."""
    files, videos_per_file = args.dataset
    spec = dataclasses.replace(FULL_SPEC, files=files, videos_per_file=videos_per_file)
    return prepare_dataset(pathlib.Path(args.data_dir), spec)


def calibrate(paths: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """The cached headspace at each of ``args.widths``; the chosen width: the heaviest whose
    clips/s is at least ``margin x need`` (the lightest, if none is)."""
    quick = argparse.Namespace(**{**vars(args), "warmup": 1.5, "seconds": 2.5})
    rates = {}
    for width in args.widths:
        rates[width] = run_torch("cached", paths, width, quick)["clips_per_s"]
        print(f"calibrate: width {width}: {rates[width]:.0f} clips/s", file=sys.stderr)
    floor = args.margin * args.need_clips_per_s
    fitting = [w for w in args.widths if rates[w] >= floor]
    width = max(fitting) if fitting else min(args.widths)
    return {"rates": rates, "floor_clips_per_s": floor, "width": width}


def run_child(args: argparse.Namespace, job: dict[str, Any]) -> dict[str, Any]:
    """``job`` (``{"calibrate": true}`` or ``{"feeder": ..., "width": ...}``) in a fresh
    process; its tagged JSON line."""
    known = {k: str(v) if isinstance(v, pathlib.Path) else v for k, v in vars(args).items()}
    spec = {"args": {k: known[k] for k in _CHILD_ARGS}, **job}
    command = [sys.executable, "-m", "h5feed.bench.gpu.train", json.dumps(spec)]
    done = subprocess.run(
        command, stdout=subprocess.PIPE, stderr=None, text=True, timeout=_CHILD_TIMEOUT_S
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith(_TAG)), None)
    if line is None:
        raise RuntimeError(f"{job}: exit {done.returncode}, no result")
    result: dict[str, Any] = json.loads(line[len(_TAG) :])
    return result


def child(spec: dict[str, Any]) -> int:
    """The feeder's (or the calibration's) process: one result line on stdout."""
    args = argparse.Namespace(**spec["args"])
    args.dataset = tuple(args.dataset)
    paths = dataset_paths(args)
    if spec.get("calibrate"):
        result = calibrate(paths, args)
    else:
        feeder = spec["feeder"]
        train = run_keras if feeder.startswith("keras") else run_torch
        result = train(feeder, paths, int(spec["width"]), args)
    print(_TAG + json.dumps(result), flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    """Calibrate (with ``--calibrate``), then every feeder of ``args.feeders`` in turn; print a
    line per feeder, write ``args.json`` and ``args.png`` when given."""
    if args.need_from is not None:
        args.need_clips_per_s = need_from(args.need_from, args.need_workers)
        print(f"need {args.need_clips_per_s:.1f} clips/s (from {args.need_from})", flush=True)
    dataset_paths(args)  # made once here, not by the first feeders at once
    calibration = run_child(args, {"calibrate": True}) if args.calibrate else None
    width = calibration["width"] if calibration else args.width
    print(f"width {width}", json.dumps(calibration), flush=True)
    results: list[dict[str, Any]] = []
    for feeder in args.feeders.split(","):
        try:
            result = run_child(args, {"feeder": feeder, "width": width})
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            result = {"feeder": feeder, "error": str(error)}
        results.append(result)
        print(json.dumps(result), flush=True)
    headspace = {r["framework"]: r["steps_per_s"] for r in results if "cached" in r["feeder"]
                 and "steps_per_s" in r}  # fmt: skip
    for result in results:
        base = headspace.get(result.get("framework", ""))
        if base and "steps_per_s" in result:
            result["vs_cached"] = result["steps_per_s"] / base
    summary = {"width": width, "calibration": calibration, "results": results}
    for r in results:
        print(f"{r['feeder']:>13}: " + (
            f"{r['steps_per_s']:7.1f} steps/s {r['clips_per_s']:7.1f} clips/s "
            f"vs cached {r.get('vs_cached', float('nan')):.3f} "
            f"nvml {r.get('gpu_util_nvml_mean')}" if "steps_per_s" in r else r["error"]
        ), flush=True)  # fmt: skip
    if args.json:
        settings = {k: str(getattr(args, k)) for k in (*_CHILD_ARGS, *_OTHER_ARGS)}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": settings} | summary, indent=1))
    if args.png:
        plot(results, width, args.png)
    return 0


def plot(results: list[dict[str, Any]], width: int, png: pathlib.Path) -> None:
    """Steps/s per feeder, each framework's cached headspace drawn as a line over its bars."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return
    done = [r for r in results if "steps_per_s" in r]
    figure, axes = plt.subplots(figsize=(8, 4))
    colours = ["#999999" if "cached" in r["feeder"] else "#1f77b4" for r in done]
    axes.bar([r["feeder"] for r in done], [r["steps_per_s"] for r in done], color=colours)
    for i, r in enumerate(done):
        share = r.get("gpu_util_nvml_mean")
        label = f"{r.get('vs_cached', 0):.2f}x" + (f"\nGPU {share:.0%}" if share else "")
        axes.annotate(label, (i, r["steps_per_s"]), ha="center", va="bottom", fontsize=8)
    axes.set_ylabel("training steps/s (batch 8)")
    axes.set_title(f"3D CNN width {width}: steps/s by feeder (grey: one cached batch)")
    figure.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png, dpi=100)


if __name__ == "__main__":
    sys.exit(child(json.loads(sys.argv[1])))
