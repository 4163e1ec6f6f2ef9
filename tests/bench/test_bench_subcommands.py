"""``h5feed bench SUBCOMMAND``: the measurements beside the comparison, each a subcommand of
the installed package (their code in h5feed/bench/, never in a top-level ``benchmarks``).

Behaviour only: exit status, what is written and its shape, never a speed threshold. The scale
and soak subcommands run in tests/system/test_scale.py and tests/bench/test_bench_parts.py.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib

import pytest
from paths import REPO

from h5feed.bench.subcommands import STUDIES, Study
from h5feed.cli import main


def help_text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_bench_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_text(capsys, "bench")
    for study in STUDIES:
        assert f"    {study.name} " in text, study.name
    assert "--contenders" in text and "--ceiling" in text  # the comparison's own options


@pytest.mark.parametrize("study", STUDIES, ids=lambda s: s.name)
def test_each_subcommand_has_its_help_with_every_option_and_an_example(
    study: Study, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    study.arguments(parser)
    options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    text = help_text(capsys, "bench", study.name)
    assert text.startswith(f"usage: h5feed bench {study.name}")
    assert study.description.splitlines()[0] in text
    assert f"h5feed bench {study.name}" in text.split("examples:")[1]
    for option in options:
        assert option in text, option


def test_a_subcommand_refuses_a_bad_value_with_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "scale", "--files", "10,zero"])
    assert exited.value.code == 2
    assert "not a list of integers" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["bench", "open-files", "--frames", "3"])  # shorter than the 4-frame clips
    assert exited.value.code == 2
    assert "--frames" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["bench", "gpu-train", "--feeders", "cached,tpu"])
    assert exited.value.code == 2
    assert "feeders are cached, h5feed" in capsys.readouterr().err


def test_open_files_measures_both_bounds(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "open.json"
    argv = ["--files", "40", "--frames", "4", "--size", "16", "--epochs", "2", "--repeats", "1"]
    assert main(["bench", "open-files", *argv, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert (result["files"], result["frames"], result["size"]) == (40, 4, 16)
    assert result["max_open_files=128"] > 0 and result["all files open"] > 0
    printed = capsys.readouterr().out
    assert "max_open_files=128:" in printed and "all files open:" in printed


def test_reduced_decode_reports_speed_and_pixel_differences(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from h5feed.bench import reduced_decode

    monkeypatch.setattr(reduced_decode, "CASES", (((480, 640), (112, 112)),))  # one, small
    out = tmp_path / "reduced.json"
    argv = ["--data-dir", str(tmp_path / "data"), "--frames", "4", "--repeats", "1"]
    assert main(["bench", "reduced-decode", *argv, "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert (row["stored"], row["resize"], row["reduction"], row["frames"]) == (
        "640x480", "112x112", "1/4", 4,
    )  # fmt: skip
    assert row["full_ms_per_frame"] > 0 and row["reduced_ms_per_frame"] > 0
    assert 0 < row["mean_abs_diff"] <= row["max_abs_diff"] and row["psnr_db"] > 20
    assert "| 640x480 | 112x112 | 1/4 |" in capsys.readouterr().out


def bench_report(path: pathlib.Path, rates: dict[int, float]) -> pathlib.Path:
    """An ``h5feed bench`` JSON with h5feed-numpy at these worker counts (and a failed row)."""
    rows = [
        {"contender": "h5feed-numpy", "workers": n, "status": "ok", "median": {"clips_per_s": r}}
        for n, r in rates.items()
    ]
    rows.append({"contender": "h5feed-numpy", "workers": 16, "status": "failed", "median": {}})
    rows.append(
        {"contender": "per-core-parallel", "workers": 8, "status": "ok",
         "median": {"clips_per_s": 9999.0}}
    )  # fmt: skip
    path.write_text(json.dumps({"contenders": rows}))
    return path


def test_gpu_train_needs_the_rate_of_h5feed_at_the_workers_asked(tmp_path: pathlib.Path) -> None:
    from h5feed.bench.gpu.train import need_from

    report = bench_report(tmp_path / "scale.json", {1: 130.0, 8: 800.0, 15: 1100.0})
    assert need_from(report, 8) == 800.0
    assert need_from(report, 4) == 1100.0  # not run: the most measured


def test_gpu_train_refuses_a_report_without_the_rate_naming_the_file(
    tmp_path: pathlib.Path,
) -> None:
    from h5feed.bench.gpu.train import need_from

    empty = bench_report(tmp_path / "empty.json", {})
    with pytest.raises(ValueError, match=r"empty\.json: no h5feed-numpy row that ran"):
        need_from(empty, 8)
    other = tmp_path / "other.json"
    other.write_text('{"rows": []}')
    with pytest.raises(ValueError, match=r"other\.json: not an h5feed bench report"):
        need_from(other, 8)
    with pytest.raises(ValueError, match=r"missing\.json: not an h5feed bench report"):
        need_from(tmp_path / "missing.json", 8)


def test_gpu_train_reports_a_feeder_that_fails_in_its_process_with_its_error(
    tmp_path: pathlib.Path,
) -> None:
    """A feeder's process that dies (here: a model of width 0, or no torch at all) gives an
    error naming the feeder, never a number; ``run`` records it and goes on."""
    import argparse

    from h5feed.bench.gpu import train

    (study,) = [s for s in STUDIES if s.name == "gpu-train"]
    parser = argparse.ArgumentParser()
    study.arguments(parser)
    args = parser.parse_args(
        ["--device", "cpu", "--dataset", "1x8", "--data-dir", str(tmp_path / "data"),
         "--seconds", "0.1", "--warmup", "0"]
    )  # fmt: skip
    with pytest.raises(RuntimeError, match=r"'feeder': 'cached'.*exit 1, no result"):
        train.run_child(args, {"feeder": "cached", "width": 0})


def imported_modules(path: pathlib.Path) -> set[str]:
    """Every module ``path`` imports (``import a.b`` and ``from a.b import c``: ``a.b``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_benchmarks_have_one_home_in_the_package() -> None:
    assert not (REPO / "benchmarks").exists()
    offenders = [
        str(path.relative_to(REPO))
        for root in ("h5feed", "tests")
        for path in sorted((REPO / root).rglob("*.py"))
        if any(m == "benchmarks" or m.startswith("benchmarks.") for m in imported_modules(path))
    ]
    assert offenders == []


def test_the_import_scan_sees_a_benchmarks_import(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "x.py"
    path.write_text("import os\nfrom benchmarks import scale\nimport benchmarks.soak as s\n")
    assert imported_modules(path) == {"os", "benchmarks", "benchmarks.soak"}


def test_lineage_measures_the_trainer_without_and_with_the_record(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "lineage.json"
    argv = ["--files", "1", "--videos-per-file", "9", "--epochs", "2", "--repeats", "2"]
    assert main(["bench", "lineage", *argv, "--calls", "20", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert len(result["off"]) == len(result["on"]) == 2
    assert result["trainer_cpu_ms_per_clip_off"] > 0 and result["trainer_cpu_ms_per_clip_on"] > 0
    assert result["record_us_per_clip"] > 0
    printed = capsys.readouterr().out
    assert "lineage off" in printed and "the record alone:" in printed


def study_argv(
    out: pathlib.Path, *, files: int = 1, videos: int = 4, latency_ms: int = 5
) -> list[str]:
    """A tiny ``h5feed bench object-storage``: videos of 8 frames, 1 worker, 64 KiB blocks,
    its JSON written to ``out``."""
    return ["--files", str(files), "--videos", str(videos), "--min-frames", "8",
            "--max-frames", "8", "--workers", "1", "--latency-ms", str(latency_ms),
            "--block-kib", "64", "--json", str(out)]  # fmt: skip


@pytest.mark.processes
def test_object_storage_measures_local_and_s3_and_writes_its_json(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    out = tmp_path / "object-storage.json"
    argv = study_argv(out)
    assert main(["bench", "object-storage", *argv]) == 0
    result = json.loads(out.read_text())
    assert (result["files"], result["block_bytes"], result["cache_bytes_per_file"]) == (
        1, 64 << 10, 256 << 10,
    )  # fmt: skip
    assert result["local_clips_per_s"] > 0
    for row in ("s3_0ms", "s3_5ms"):  # every request went through the counting proxy
        assert result[row]["requests"] > 0 and result[row]["bytes_read_per_byte_stored"] > 0
    printed = capsys.readouterr().out
    assert "local files" in printed and "+5 ms/request" in printed


@pytest.mark.processes
def test_object_storage_over_local_files_behind_a_latency_counts_the_workers_requests(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("fsspec")
    out = tmp_path / "local-latency.json"
    argv = study_argv(out)
    argv += ["--node-cache"]
    assert main(["bench", "object-storage", "--server", "local-latency", *argv]) == 0
    result = json.loads(out.read_text())
    assert result["server"] == "local-latency" and result["local_clips_per_s"] > 0
    for row in ("latency_0ms", "latency_5ms"):  # the workers' own counts (stats())
        assert result[row]["requests"] > 0 and result[row]["bytes_read_per_byte_used"] > 0
        assert result[row]["requests_to_learn_one_index"] > 0
        assert result[row]["to_first_batch"]["requests"] > 0  # the opens and index walks
        assert result[row]["after_first_batch"]["requests_per_clip"] >= 0
        assert result[row]["worker_cpu_ms_per_clip"] > 0  # the workers' processes, read
    assert result["local_worker_cpu_ms_per_clip"] > 0
    # the node cache's second run: new workers read the first run's copies (HEADs only)
    assert result["node_cache_first_run"]["bytes_read_per_byte_stored"] > 0
    second = result["node_cache_second_run"]
    assert second["requests"] > 0 and second["bytes_read_per_byte_stored"] == 0
    printed = capsys.readouterr().out
    assert "local files" in printed and "h5feed-bench:// +5 ms/request" in printed
    assert "node cache, second run" in printed
    from h5feed.common.object_urls import BENCH_ENV
    from h5feed.producer.files.node_cache import DIR_ENV

    assert BENCH_ENV not in os.environ and DIR_ENV not in os.environ  # the bench's own


@pytest.mark.processes
def test_object_storage_reads_the_same_frames_as_h5feed_pack_writes_them(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("fsspec")
    out = tmp_path / "pack.json"
    argv = study_argv(out, files=2, videos=3, latency_ms=0)
    assert main(["bench", "object-storage", "--server", "local-latency", "--layout", "pack",
                 "--frame-size", "48x64", *argv]) == 0  # fmt: skip
    result = json.loads(out.read_text())
    assert (result["layout"], result["files"]) == ("pack", 2)  # shards of about 3 videos
    assert result["frame_size"] == "48x64"
    assert result["latency_0ms"]["requests_to_learn_one_index"] > 0
    assert "2 files (pack)" in (printed := capsys.readouterr().out)
    assert "frames of 48x64" in printed
    assert main(["bench", "object-storage", "--layout", "pack", *argv]) != 0  # moto's: refused
    assert "--layout pack is measured with --server local-latency" in capsys.readouterr().err


@pytest.mark.processes  # it asks git for the commit
def test_a_study_report_names_its_command_its_h5feed_and_its_host_then_its_rows(
    tmp_path: pathlib.Path,
) -> None:
    from h5feed.bench.study_report import study_report, write_report

    report = study_report("balance", {"videos": 3, "clip_ms": 2.0}, [{"workers": 2}])
    assert report["benchmark"] == "balance"
    assert report["command"].startswith("h5feed bench balance")
    assert report["videos"] == 3 and report["clip_ms"] == 2.0
    assert pathlib.Path(report["h5feed"], "__init__.py").is_file()
    assert report["commit"] is None or len(report["commit"]) >= 7  # a checkout: its commit
    assert report["cpus"] >= 1 and len(report["load_avg_at_end"]) == 3
    assert list(report)[-1] == "rows" and report["rows"] == [{"workers": 2}]
    written = tmp_path / "new" / "study.json"
    write_report(written, report)
    assert json.loads(written.read_text()) == json.loads(json.dumps(report))
