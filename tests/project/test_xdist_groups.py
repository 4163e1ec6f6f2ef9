"""``make test``'s scheduling: ``--dist loadgroup`` keeps each ``xdist_group`` on one pytest
worker. The Docker, Swarm and network-namespace tests share one machine-wide resource and are
in the group "machine" so that they run one after another; pytest 9.2 with pytest-xdist 3.8
silently dropped the groups (pytest-xdist#1386: the test IDs lost their ``@group`` suffix and
the tests were dealt to both workers, one waiting minutes on the other's lock). This runs a
small session the way ``make test`` does and fails when grouping stops working."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

_GROUPED = """
import time

import pytest

pytestmark = pytest.mark.xdist_group("machine")


@pytest.mark.parametrize("i", range(3))
def test_grouped(i):
    time.sleep(0.2)
"""
_FREE = """
import time

import pytest


@pytest.mark.parametrize("i", range(4))
def test_free(i):
    time.sleep(0.2)
"""


def test_loadgroup_runs_a_group_on_one_worker(tmp_path: pathlib.Path) -> None:
    (tmp_path / "test_grouped.py").write_text(_GROUPED)
    (tmp_path / "test_free.py").write_text(_FREE)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v",
         "-p", "no:cacheprovider", "-o", "addopts=", "-c", "/dev/null", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ran = re.findall(r"\[(gw\d)\] .*PASSED \S*::(test_\w+)\[\d\](@\w+)?", result.stdout)
    grouped = [(worker, suffix) for worker, name, suffix in ran if name == "test_grouped"]
    assert len(grouped) == 3 and len(ran) == 7, result.stdout[-3000:]
    assert {suffix for _worker, suffix in grouped} == {"@machine"}, grouped  # the group's ID
    assert len({worker for worker, _suffix in grouped}) == 1, grouped  # one worker ran them
