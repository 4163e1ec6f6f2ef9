"""The demo's input-wait report and the verdict behind it (issue 41): two waits whose names say
where each is measured, one verdict, and advice that never asks for more local workers than the
cores they may use. Pure functions: no processes, no TensorFlow."""

from __future__ import annotations

import re

import pytest

from h5feed.consumer.telemetry.stats import verdict
from h5feed.demo_report import input_wait_lines


def _suggested_total(line: str) -> int | None:
    found = re.search(r"\((\d+) in all\)", line)
    return int(found.group(1)) if found else None


def test_the_verdict_never_suggests_more_local_workers_than_cores() -> None:
    # What `make demo` printed on a 2-core machine: "about 6 more workers (8 in all)".
    bound, extra, line = verdict(0.73, workers=2, cores=2)
    assert bound is True and extra == 0, line
    assert "more workers would not help here" in line and "other hosts" in line, line
    assert _suggested_total(line) is None, line


@pytest.mark.parametrize(
    ("share", "workers", "cores"),
    [(0.73, 2, 2), (0.73, 1, 2), (0.9, 3, 16), (0.5, 4, 8), (0.99, 1, 1), (0.2, 8, 4)],
)
def test_the_suggested_total_fits_the_cores(share: float, workers: int, cores: int) -> None:
    bound, extra, line = verdict(share, workers=workers, cores=cores)
    assert bound is True
    assert workers + extra <= max(cores, workers), line
    total = _suggested_total(line)
    assert total is None or total <= cores, line


def test_without_a_core_count_the_advice_is_about_other_hosts() -> None:
    bound, extra, line = verdict(0.73, workers=2, cores=None)
    assert (bound, extra) == (True, 6) and "(8 in all)" in line and "their hosts" in line


def test_not_input_bound_suggests_nothing() -> None:
    assert verdict(0.05, workers=2, cores=2)[:2] == (False, 0)


def _feed(share: float, workers: int, cores: int) -> dict[str, object]:
    bound, extra, line = verdict(share, workers, cores)
    return {
        "wait_share_recent": share,
        "input_bound": bound,
        "suggested_extra_workers": extra,
        "verdict": line,
    }


def test_the_demo_names_its_two_waits_and_gives_one_verdict() -> None:
    lines = input_wait_lines(1.2, 2.13, _feed(0.73, 2, 2))
    assert [line.split(":")[0] for line in lines] == ["step wait", "feed wait", "verdict"]
    assert lines[0].startswith("step wait: 36.0% of the measured step time")
    assert "73%" in lines[1] and "prefetch" in lines[1]
    assert "would not help" in lines[2] and "(8 in all)" not in lines[2]


def test_a_fed_step_is_not_input_bound_whatever_the_feed_wait() -> None:
    # The prefetch buffer hides the feed's waits: the step does not wait, so no advice.
    lines = input_wait_lines(0.1, 5.0, _feed(0.73, 2, 2))
    assert lines[-1].startswith("verdict: not input-bound"), lines


def test_a_waiting_step_with_workers_that_keep_up_blames_tf_data() -> None:
    lines = input_wait_lines(2.0, 2.0, _feed(0.05, 2, 2))
    assert lines[-1].startswith("verdict: input-bound, but not on h5feed's workers"), lines
    assert "more workers would not help" in lines[-1]


def test_without_figures_from_h5feed_the_report_says_so() -> None:
    lines = input_wait_lines(0.0, 0.0, {"verdict": "no figures (training did not finish)"})
    assert lines == [
        "step wait: 0.0% of the measured step time was spent in next(), waiting for a batch "
        "(wait 0.00s, compute 0.00s)",
        "verdict: no figures (training did not finish)",
    ]
