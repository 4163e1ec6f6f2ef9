"""``h5feed bench many-workers``, ``h5feed bench balance`` and ``--dataset`` sweeps: each runs
end to end at tiny sizes and writes what it says (behaviour, never a speed), and the credit
budget grows with connected remote workers (measured by the many-workers study).
"""

from __future__ import annotations

import argparse
import json
import pathlib

import pytest

from h5feed.bench.shapes import DatasetShape, parse_dataset_shapes
from h5feed.cli import main
from h5feed.consumer.config.groups import ProcessOptions


@pytest.mark.timeout(300)
def test_many_workers_measures_a_trainer_with_many_sockets_and_hands_over_a_vanished_tenth(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 6 workers in 3 processes (many sockets per process): one process is a third of them.
    out = tmp_path / "mw.json"
    argv = ["--workers", "6", "--processes", "3", "--files", "12", "--window-s", "0.5"]
    argv += ["--batch-size", "2"]  # about 2 one-row units a batch
    assert main(["bench", "many-workers", *argv, "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["workers"] == 6 and row["processes"] == 3
    assert row["first_batch_s"] > 0 and row["full"]["batches_per_s"] > 0
    assert row["idle"]["loop_cpu_share"] >= 0 and row["full"]["loop_cpu_ms_per_batch"] > 0
    # The budget grew from the 4 batches of a workers=0 feed to two units per connected
    # worker, 12 units in batches of 1 or 2 (on the old code it stayed at 4 whatever joined).
    assert 6 <= row["credit_budget"] <= 12
    for how in ("sigkill", "sigstop"):  # the workers of one process each, all handed over
        assert row[how]["lost"] == 2 and row[how]["hand_over_s"] is not None, how
    assert "kill s" in capsys.readouterr().out


def test_a_budget_the_user_set_is_never_grown() -> None:
    assert ProcessOptions().grows_budget
    assert not ProcessOptions(max_inflight_batches=3).grows_budget


def test_dataset_shapes_read_file_counts_unequal_files_and_lists() -> None:
    one, unequal = parse_dataset_shapes("2x3, 5+1+1")
    assert one == DatasetShape((3, 3), "2x3") and (one.files, one.videos) == (2, 6)
    assert unequal.sizes == (5, 1, 1) and (unequal.files, unequal.videos) == (3, 7)
    from h5feed.producer.sample_data import SampleSpec

    specs = unequal.specs(SampleSpec())
    assert [(s.files, s.videos_per_file) for s in specs] == [(1, 5), (2, 1)]
    for bad in ("", "3", "2x0", "5+0", "5+x", "0x4"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_dataset_shapes(bad)


@pytest.mark.timeout(600)
def test_a_dataset_sweep_runs_each_shape_and_reports_the_ratios(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sweep"
    argv = [
        "bench", "--quick", "--dataset", "1x4,3+1", "--workers", "2", "--no-ceiling",
        "--contenders", "per-core-parallel,h5feed-numpy,torch",
        "--data-dir", str(tmp_path / "data"), "--out", str(out),
    ]  # fmt: skip
    main(argv)
    whole = json.loads(out.with_name("sweep.json").read_text())
    assert [r["dataset"] for r in whole["sweep"]] == ["1x4", "3+1"]
    assert [(r["files"], r["videos"]) for r in whole["sweep"]] == [(1, 4), (2, 4)]
    for row in whole["sweep"]:
        assert row["h5feed_clips_per_s"] > 0 and row["parallel_limit_clips_per_s"] > 0
        assert row["h5feed_vs_parallel_limit"] > 0
        assert row["worker_cpu_ms_per_clip"] > 0 and row["limit_cpu_ms_per_clip"] > 0
        assert 0 < row["cores_busy"] <= 2.5  # two workers and a trainer, CPU sampled
    assert set(whole["datasets"]) == {"1x4", "3+1"}
    text = out.with_name("sweep.md").read_text()
    assert "| 1x4 | 1 | 4 |" in text and "| 3+1 | 2 | 4 |" in text
    assert "## Dataset 3+1" in text
    assert "| cores busy |" in text.splitlines()[4]


@pytest.mark.timeout(300)
def test_balance_prints_each_workers_share_of_the_clips(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "balance.json"
    argv = ["--workers", "2", "--files", "1,2", "--videos", "16", "--clip-ms", "5"]
    assert main(["bench", "balance", *argv, "--epochs", "2", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["files"], r["workers"], r["slow_worker"]) for r in rows] == [
        (1, 2, False), (1, 2, True), (2, 2, False), (2, 2, True),
    ]  # fmt: skip
    for row in rows:
        assert len(row["shares"]) == 2 and sum(row["shares"]) == pytest.approx(1.0, abs=1e-3)
        assert row["clips_per_s"] > 0
    assert rows[1]["slow_share"] is not None and rows[0]["slow_share"] is None
    assert "shares %" in capsys.readouterr().out
