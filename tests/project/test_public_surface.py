"""The public surface, pinned: what users, dashboards and process monitors read of h5feed.

A refactor must keep every set here as it is. A deliberate change edits the pinned set in the
same commit (and the docs page that documents it), so the change is seen in review:
``stats()`` keys (an HDF5 feed's and a source feed's, after a short real run), the ``/metrics``
sample names, the documented import paths, and the worker's command line.
"""

from __future__ import annotations

import importlib
import pathlib
import subprocess
import sys
from typing import Any

import pytest
from conftest import one_file_of_tiny_videos, own_worker_pids
from metrics_helpers import scrape
from public_names import (
    DEPRECATED_KEYS,
    DEPRECATED_METRICS,
    DOCUMENTED_PATHS,
    FACE,
    HOST_KEYS,
    METRIC_NAMES,
    PRODUCERS_KEYS,
    STATS_KEYS,
    WORKER_KEYS,
    WORKER_MODULE,
)

import h5feed

_TIMEOUT_S = 60.0


def _run_to_the_end(feed: Any) -> dict[str, Any]:
    for _ in feed:
        pass
    stats: dict[str, Any] = feed.stats()
    return stats


def _assert_keys(stats: dict[str, Any]) -> None:
    assert set(stats) == STATS_KEYS, (
        f"stats() keys changed: added {sorted(set(stats) - STATS_KEYS)}, "
        f"removed {sorted(STATS_KEYS - set(stats))}"
    )
    assert stats["workers"], "no worker figures after a run"
    for worker in stats["workers"]:
        assert set(worker) == WORKER_KEYS
    for host in stats["hosts"].values():
        assert set(host) == HOST_KEYS
    assert set(stats["producers"]) == PRODUCERS_KEYS
    for old, new in DEPRECATED_KEYS.items():
        assert stats[old] is stats[new], f"stats()[{old!r}] is no longer {new!r}'s alias"


def test_an_hdf5_feeds_stats_keys_and_metric_names_are_the_pinned_ones(
    tmp_path: pathlib.Path,
) -> None:
    files = sorted(one_file_of_tiny_videos(tmp_path, videos=4).glob("*.h5*"))
    feed = h5feed.batches(files, clip_len=2, batch_size=2, workers=1, metrics_port=0,
                          start_timeout_s=_TIMEOUT_S, unit_timeout_s=_TIMEOUT_S)  # fmt: skip
    port = feed.metrics_port
    assert port is not None
    stats = _run_to_the_end(feed)
    assert stats.pop("metrics_port") == port  # the feed's, beside its iteration's keys
    assert stats["batches"] == 2  # it really ran: 4 clips in batches of 2
    _assert_keys(stats)
    names = set(scrape(port))
    assert names == METRIC_NAMES, (
        f"/metrics names changed: added {sorted(names - METRIC_NAMES)}, "
        f"removed {sorted(METRIC_NAMES - names)}"
    )


def test_a_source_feeds_stats_keys_are_the_same_pinned_ones() -> None:
    feed = h5feed.batches(source="user_sources:Tokens", source_args={"n": 6}, batch_size=3,
                          workers=1, start_timeout_s=_TIMEOUT_S,
                          unit_timeout_s=_TIMEOUT_S)  # fmt: skip
    stats = _run_to_the_end(feed)
    assert stats["batches"] == 2
    _assert_keys(stats)


def test_each_sizing_gauge_is_also_exported_under_its_deprecated_name() -> None:
    """Autoscalers read the gauges by name: each old ``h5feed_fleet_*`` name says the value of
    its ``h5feed_producers_*`` name, while known (a collector on given figures: no process)."""
    from h5feed.consumer.telemetry.metrics import FeedCollector, IterationTotals

    figures = {"demand_clips_per_s": 12.5, "replica_capacity_clips_per_s": 5.0}
    figures |= {"replicas": 2, "replicas_needed": 3, "shared": None}

    class _Feed:
        def stats(self) -> dict[str, Any]:
            return {"job": "j", "workers": [], "producers": figures, "fleet": figures}

    feed = _Feed()
    values = {
        sample.name: sample.value
        for family in FeedCollector(feed, IterationTotals()).collect()
        for sample in family.samples
    }
    assert set(DEPRECATED_METRICS) <= set(values), sorted(values)
    for new, old in DEPRECATED_METRICS.items():
        assert values[old] == values[new], (old, new)
    assert values["h5feed_producers_replicas_needed"] == 3


@pytest.mark.parametrize("name", sorted(FACE))
def test_the_package_face_names_resolve(name: str) -> None:
    assert getattr(h5feed, name) is not None


def test_the_package_face_lists_exactly_the_pinned_names() -> None:
    assert set(h5feed.__all__) == FACE


@pytest.mark.parametrize(("module", "name"), DOCUMENTED_PATHS)
def test_a_documented_import_path_resolves(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is not None


def test_local_workers_run_as_python_dash_m_the_worker_module(tmp_path: pathlib.Path) -> None:
    files = sorted(one_file_of_tiny_videos(tmp_path, videos=4).glob("*.h5*"))
    feed = h5feed.batches(files, clip_len=2, batch_size=2, workers=1, epochs=None,
                          start_timeout_s=_TIMEOUT_S, unit_timeout_s=_TIMEOUT_S)  # fmt: skip
    with feed.stream() as stream:
        next(stream)
        pids = set(stream.worker_pids)
        matched = set(own_worker_pids())  # what a monitor finds by the module's name
        cmdlines = {
            pid: pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in pids
        }
    assert pids and pids <= matched
    for pid, argv in cmdlines.items():
        at = argv.index(b"-m")
        assert argv[at + 1] == WORKER_MODULE.encode(), (pid, argv)


def test_the_worker_entry_point_answers_help_under_its_documented_name() -> None:
    done = subprocess.run(
        [sys.executable, "-m", WORKER_MODULE, "--help"],
        capture_output=True, text=True, timeout=_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m {WORKER_MODULE} ")
