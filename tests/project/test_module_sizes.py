"""Small modules with one job: no module of the package is longer than 400 lines (the
project's rule; a module that outgrows it is split by what it does, not trimmed)."""

from __future__ import annotations

import pathlib

import h5feed

#: The most lines a module of h5feed/ may have.
MAX_LINES = 400
PACKAGE = pathlib.Path(h5feed.__file__).resolve().parent


def test_no_module_of_the_package_exceeds_the_line_limit() -> None:
    sizes = {
        str(path.relative_to(PACKAGE.parent)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert len(sizes) > 100  # the walk found the package
    over = {path: lines for path, lines in sizes.items() if lines > MAX_LINES}
    assert over == {}, f"modules over {MAX_LINES} lines (split each by its jobs): {over}"
