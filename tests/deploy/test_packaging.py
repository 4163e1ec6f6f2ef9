"""The package builds as a user's pip builds it, and nothing in the project's own build
configuration is deprecated (setuptools stops supporting deprecated configuration on a date it
names: the build would then break on every install)."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
from docker_helpers import ROOT

_BUILD_TIMEOUT_S = 300  # a build environment from the package index, under load

# What the project's own build configuration is made of: a deprecation naming one of these comes
# from our files (a deprecation inside pip or setuptools about themselves does not).
_OURS = re.compile(r"`(project|tool\.setuptools)[.`]|\[(project|tool\.setuptools)|pyproject\.toml")

# setuptools 76's warning for `license = { text = ... }` (pip -v prints the backend's stderr
# indented, as below): the text the detector must find.
_LICENSE_TABLE_WARNING = """\
  /tmp/pip-build-env-r1mbubtc/overlay/lib/python3.11/site-packages/setuptools/config/_apply_pyprojecttoml.py:82: BuildBackendWarning: `project.license` as a TOML table is deprecated
  !!

          ********************************************************************************
          Please use a simple string containing a SPDX expression for `project.license`. You can also use `project.license-files`. (Both options available on setuptools>=77.0.0).

          By 2027-Feb-18, you need to update your project and remove deprecated calls
          or your builds will no longer be supported.
  !!
    corresp(dist, value, root_dir)
  Preparing metadata (pyproject.toml): started
"""  # noqa: E501


def deprecations_of_ours(output: str) -> list[str]:
    """Each deprecation warning in a build's output (its line and the block up to the next
    ``!!`` or 12 lines) that names the project's own configuration."""
    lines = output.splitlines()
    found = []
    for i, line in enumerate(lines):
        if not re.search(r"deprecat", line, re.IGNORECASE):
            continue
        block = [line]
        for more in lines[i + 1 : i + 13]:
            block.append(more)
            if more.strip() == "!!" and len(block) > 2:
                break
        text = "\n".join(block)
        if _OURS.search(text) and not any(text.startswith(f) for f in found):
            found.append(text)
    return found


def test_the_detector_finds_the_license_table_warning() -> None:
    (found,) = deprecations_of_ours(_LICENSE_TABLE_WARNING)
    assert "`project.license` as a TOML table is deprecated" in found
    assert deprecations_of_ours("DEPRECATION: pip's own option --foo is deprecated") == []


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, str]:
    """The wheel as a user's pip builds it, and the build's output (built once per module)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    # What the Dockerfile builds from: a copy, so the build leaves nothing in the checkout.
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "h5feed", source / "h5feed", ignore=shutil.ignore_patterns("__pycache__")
    )
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--verbose",
         "--wheel-dir", str(tmp_path / "wheels"), str(source)],
        capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S,
    )  # fmt: skip
    output = build.stdout + build.stderr
    assert build.returncode == 0, output[-4000:]
    (wheel,) = (tmp_path / "wheels").glob("h5feed-*.whl")
    return wheel, output


def test_the_wheel_builds_with_no_deprecation_from_our_files(
    built_wheel: tuple[pathlib.Path, str],
) -> None:
    wheel, output = built_wheel
    assert deprecations_of_ours(output) == [], output[-4000:]
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        assert "License-Expression: Apache-2.0" in archive.read(metadata).decode().splitlines()


# Run from the unpacked wheel, away from the checkout: every module of h5feed.bench imports
# (with the base install's packages: the contenders import theirs when they run) and the
# help of `h5feed bench` and of each of its subcommands prints.
_FROM_THE_WHEEL = """\
import importlib, pathlib, pkgutil, sys
import h5feed, h5feed.bench
from h5feed.bench.subcommands import STUDIES
from h5feed.cli import main
assert pathlib.Path(h5feed.__file__).is_relative_to(sys.argv[1]), h5feed.__file__
for module in pkgutil.walk_packages(h5feed.bench.__path__, "h5feed.bench."):
    importlib.import_module(module.name)
for argv in [["bench"], *(["bench", study.name] for study in STUDIES)]:
    try:
        main([*argv, "--help"])
    except SystemExit as exit:
        assert exit.code == 0, argv
print(sorted(m for m in sys.modules if m == "benchmarks" or m.startswith("benchmarks.")))
print(" ".join(study.name for study in STUDIES))
"""


def test_the_wheel_carries_h5feed_bench_and_its_subcommands(
    built_wheel: tuple[pathlib.Path, str], tmp_path: pathlib.Path
) -> None:
    wheel, _ = built_wheel
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path / "site")
    tops = {name.split("/")[0] for name in names if not name.startswith("h5feed-")}
    assert tops == {"h5feed"}, tops  # no top-level benchmarks (or anything else)
    shipped = {name for name in names if name.startswith("h5feed/bench/")}
    in_checkout = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "h5feed" / "bench").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert in_checkout <= shipped, sorted(in_checkout - shipped)
    run = subprocess.run(
        [sys.executable, "-c", _FROM_THE_WHEEL, str(tmp_path / "site")],
        cwd=tmp_path,  # not the checkout: nothing of it can be imported
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    lines = run.stdout.splitlines()
    assert lines[-2] == "[]"  # nothing imported a top-level benchmarks package
    from h5feed.bench.subcommands import STUDIES  # the checkout's: the wheel has them all

    assert lines[-1].split() == [study.name for study in STUDIES]
    assert {"scale", "soak", "open-files", "reduced-decode", "gpu-train"} <= set(lines[-1].split())
    assert "usage: h5feed bench scale" in run.stdout
