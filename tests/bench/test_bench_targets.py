"""``h5feed bench``'s targets: read from a file outside the installed package
(docs/bench/targets.json in the checkout, or --targets FILE); without one the report gives the
same figures and judges none."""

from __future__ import annotations

import json
import pathlib

import pytest
from paths import REPO

from h5feed.bench import markdown
from h5feed.bench.targets import COMPARISON, NONE, SOCKET, Targets, default_path, load, met
from h5feed.cli import main


def test_the_checkouts_targets_file_sets_every_figure() -> None:
    goals = load(REPO / "docs" / "bench" / "targets.json")
    assert set(goals.comparison) == set(COMPARISON)
    assert set(goals.socket) == set(SOCKET)
    assert goals.scaling_efficiency is not None


def test_cpu_per_clip_is_met_at_or_below_its_goal_every_other_figure_at_or_above() -> None:
    assert met("trainer_cpu_ms_per_clip", 0.3, 0.3) and not met(
        "trainer_cpu_ms_per_clip", 0.31, 0.3
    )
    assert met("dataset_vs_raw", 0.8, 0.8) and not met("dataset_vs_raw", 0.79, 0.8)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"comparisons": {}}', r"unknown keys \['comparisons'\]"),
        ('{"comparison": {"clips_per_s": 1}}', r"'comparison' has unknown figures \['clips_per_s"),
        ('{"comparison": [0.9]}', "'comparison' must be an object"),
        ('{"socket": {"dataset_vs_raw": "0.8"}}', "socket.dataset_vs_raw must be a finite number"),
        ('{"socket": {"dataset_vs_raw": true}}', "socket.dataset_vs_raw must be a finite number"),
        ('{"scaling_efficiency": NaN}', "scaling_efficiency must be a finite number"),
    ],
)  # fmt: skip
def test_a_bad_targets_file_is_refused_naming_the_file_and_the_key(
    tmp_path: pathlib.Path, content: str, message: str
) -> None:
    path = tmp_path / "goals.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=rf"goals\.json: .*{message}"):
        load(path)


def test_a_comment_key_is_allowed_and_missing_sections_judge_nothing(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "goals.json"
    path.write_text('{"_about": "why", "comparison": {"ceiling_gb_per_s": 2}}')
    assert load(path) == Targets(comparison={"ceiling_gb_per_s": 2.0})


def test_the_default_is_the_working_directorys_docs_bench_targets(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert default_path() is None  # e.g. a pip install, run anywhere
    (tmp_path / "docs" / "bench").mkdir(parents=True)
    (tmp_path / "docs" / "bench" / "targets.json").write_text("{}")
    assert default_path() == pathlib.Path("docs/bench/targets.json")


def test_h5feed_bench_refuses_a_bad_targets_file_before_any_work(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "goals.json"
    path.write_text('{"comparison": {"h5feed_vs_twice_limit": "high"}}')
    data = tmp_path / "data"
    argv = ["bench", "--quick", "--targets", str(path), "--data-dir", str(data)]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 1
    assert "goals.json: comparison.h5feed_vs_twice_limit must be" in capsys.readouterr().err
    assert not data.exists()  # refused before the dataset was made


SUMMARY = {
    "workers": 2,
    "judged": "h5feed",
    "h5feed_vs_twice_limit": 0.904,
    "best_alternative": "grain workers=2",
    "h5feed_vs_best_alternative": 1.141,
    "trainer_cpu_ms_per_clip": 0.278,
    "ceiling_gb_per_s": 6.144,
    "scaling_efficiency": {"h5feed x2": 0.904},
}


def test_without_targets_the_summary_gives_the_figures_and_judges_none() -> None:
    text = "\n".join(markdown._summary_lines({**SUMMARY, "targets": {}, "meets": {}}))
    assert text.startswith("## Summary")
    assert "- h5feed / (2 x per-core limit), paired by window: 0.904" in text
    assert "- consumer ceiling, GB/s (h5feed.dataset): 6.144" in text
    assert "- h5feed x2: 0.904" in text
    for word in ("target", "MEETS", "MISSES"):
        assert word not in text


def test_with_targets_the_summary_judges_each_figure() -> None:
    goals = {"h5feed_vs_twice_limit": 0.95, "trainer_cpu_ms_per_clip": 0.3}
    meets = {"h5feed_vs_twice_limit": False, "trainer_cpu_ms_per_clip": True}
    summary = {**SUMMARY, "targets": goals, "meets": meets, "scaling_efficiency_target": 0.9}
    text = "\n".join(markdown._summary_lines(summary))
    assert text.startswith("## Targets")
    assert "paired by window: 0.904 (target >= 0.95) MISSES" in text
    assert "ms per clip: 0.278 (target <= 0.3) MEETS" in text
    assert "- consumer ceiling, GB/s (h5feed.dataset): 6.144\n" in text  # no goal: no verdict
    assert "paired; target >= 0.9 with one worker per core):" in text


def test_no_target_is_left_in_the_installed_package() -> None:
    """The figures an issue asked for are data in the checkout, not constants in the code."""
    assert Targets() == NONE
    goals = json.loads((REPO / "docs" / "bench" / "targets.json").read_text())
    bench = REPO / "h5feed" / "bench"
    code = "\n".join(p.read_text() for p in bench.rglob("*.py"))
    for name in ("TARGETS", "SOCKET_TARGETS"):
        assert name not in code, name
    for section in ("comparison", "socket"):
        for figure, goal in goals[section].items():
            assert f'"{figure}": {goal}' not in code, figure
