"""The JSON report of a study (``h5feed bench balance``, ``many-workers``, ``scale``): what it
measured and everything needed to read the figures later — the command that ran it, which
h5feed (its folder and commit), and the host (name, cores, load average at the end: a figure
taken on a busy machine says so)."""

from __future__ import annotations

import json
import os
import pathlib
import platform
import subprocess
from collections.abc import Mapping
from typing import Any

import h5feed
from h5feed.bench.subcommands import own_arguments


def study_report(study: str, settings: Mapping[str, Any], rows: list[Any]) -> dict[str, Any]:
    """The report of ``h5feed bench STUDY``: its name, its command line (as this process was
    called; ``h5feed bench STUDY`` alone when called in process), ``settings`` (the study's own
    arguments worth keeping), where h5feed was loaded from and its commit, the host's facts,
    then ``rows`` (the study's measurements), in that order."""
    return {
        "benchmark": study,
        "command": " ".join([f"h5feed bench {study}", *own_arguments(study)]),
        **settings,
        "h5feed": str(pathlib.Path(h5feed.__file__).parent),
        "commit": commit(),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load_avg_at_end": os.getloadavg(),
        "rows": rows,
    }


def write_report(path: str | os.PathLike[str], report: Mapping[str, Any]) -> None:
    """Write ``report`` as indented JSON to ``path`` (its folder made if missing)."""
    where = pathlib.Path(path)
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(json.dumps(report, indent=2) + "\n")


def commit() -> str | None:
    """The short git commit of the h5feed that runs, or None outside a git checkout (an
    installed wheel) or without git."""
    where = str(pathlib.Path(h5feed.__file__).parent)
    try:
        out = subprocess.run(
            ["git", "-C", where, "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None
