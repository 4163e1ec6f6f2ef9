"""docs/architecture/index.md's "Who owns what" and "Where to change what" stay true:
every file a row names exists,
and every code name a row places in a file is defined there; and no page under docs/ (but the
history pages) names a module by a path it no longer has.

A row is the newcomer's map (issue 24): a renamed module or a moved class must change the row
in the same commit, or this test names the row and what it no longer finds."""

from __future__ import annotations

import importlib
import pathlib
import re

import pytest
from paths import REPO

ROOT = REPO
TABLES = ("**Who owns what.**", "**Where to change what.**")
# `path/x.py` or `path/folder/`, relative to h5feed/ (or the repository root for tests/, docs/)
PATH = re.compile(r"`((?:[\w.]+/)+(?:[\w.]+\.(?:py|json|yml|md))?)`")
# `Name` or `Class.attr` in `path.py` (also: `Name` of `path.py`, `Name` there)
PLACED = re.compile(r"`([A-Za-z_][\w.]*)`(?: \([^)]*\))? (?:in|of) `([\w/]+\.py)`")


def table_rows() -> list[tuple[str, str]]:
    lines = (ROOT / "docs" / "architecture" / "index.md").read_text().splitlines()
    rows: list[tuple[str, str]] = []
    for title in TABLES:
        start = next(i for i, line in enumerate(lines) if line.startswith(title))
        body = [line for line in lines[start + 1 : start + 40] if line.startswith("| ")]
        table = body[: next((i for i, b in enumerate(body) if not b.startswith("| ")), len(body))]
        rows += [(row.split("|")[1].strip(), row) for row in table[1:]]  # no header
    return rows


def resolve(path: str) -> pathlib.Path:
    top = path.split("/")[0]
    return ROOT / path if top in {"tests", "docs", "deploy", "h5feed"} else ROOT / "h5feed" / path


def defined_in(name: str, path: str) -> bool:
    module = importlib.import_module("h5feed." + path.removesuffix(".py").replace("/", "."))
    obj: object = module
    for part in name.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


ROWS = table_rows()


def test_both_tables_are_found_and_have_rows() -> None:
    assert len(ROWS) >= 15, [title for title, _ in ROWS]


@pytest.mark.parametrize("row", [row for _, row in ROWS], ids=[title for title, _ in ROWS])
def test_every_file_a_row_names_exists(row: str) -> None:
    for path in PATH.findall(row):
        assert resolve(path).exists(), f"{path} (named in: {row[:60]}...)"


@pytest.mark.parametrize("row", [row for _, row in ROWS], ids=[title for title, _ in ROWS])
def test_every_name_a_row_places_in_a_file_is_defined_there(row: str) -> None:
    for match in PLACED.finditer(row):
        name, path = match.groups()
        if "/" not in path:  # `kind.py` beside the last folder the row named before it
            folder = [p for p in PATH.findall(row[: match.start()]) if "/" in p][-1]
            path = folder.rsplit("/", 1)[0] + "/" + path
        if path.startswith("tests/"):
            assert name in resolve(path).read_text(), (name, path)
        else:
            assert defined_in(name, path), f"`{name}` is not in {path} (row: {row[:60]}...)"


def test_the_check_sees_a_name_that_moved() -> None:
    row = "| x | `FeedLoop` in `consumer/core/loop.py`, `Nowhere` in `consumer/core/loop.py` |"
    placed = PLACED.findall(row)
    assert [defined_in(name, path) for name, path in placed] == [True, False]
    assert not resolve("consumer/core/no_such.py").exists()


METHOD = re.compile(r"`([A-Z]\w+)\.(\w+)`")


def module_defining(cls: str) -> str:
    """The h5feed module whose source defines ``class cls``."""
    (path,) = [
        p
        for p in (ROOT / "h5feed").rglob("*.py")
        if re.search(rf"^class {cls}\b", p.read_text(), re.M)
    ]
    return str(path.relative_to(ROOT / "h5feed"))


@pytest.mark.parametrize("row", [row for _, row in ROWS], ids=[title for title, _ in ROWS])
def test_every_class_attribute_a_row_names_exists(row: str) -> None:
    for cls, attr in METHOD.findall(row):
        assert defined_in(f"{cls}.{attr}", module_defining(cls)), f"{cls}.{attr} ({row[:60]}...)"


# A module path anywhere in the docs' prose: `folder/module.py`, with at least one folder.
MODULE_PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)+\w+\.py)\b")
#: Where a path without h5feed/ in front may start: the package, its sub-packages, the root.
BASES = ("", "h5feed/", "h5feed/consumer/", "h5feed/common/", "h5feed/producer/")
#: Pages that tell history (old paths are what was), raw benchmark output, and paths that
#: are named on purpose though not in this tree.
HISTORY = ("changelog.md", "performance/history.md", "bench/")
ELSEWHERE = {("performance/scale.md", "benchmarks/scale.py"): "the tree measured before"}


def module_paths(text: str) -> list[str]:
    """The module paths ``text`` names, but inside a URL, and but tests/ (the cited-tests
    check of tests/docs/test_docs.py follows those)."""
    paths = MODULE_PATH.findall(re.sub(r"\w+://\S+", " ", text))
    return [path for path in paths if not path.startswith("tests/")]


@pytest.mark.parametrize(
    "page",
    [
        p.relative_to(ROOT / "docs").as_posix()
        for p in sorted((ROOT / "docs").rglob("*.md"))
        if not p.relative_to(ROOT / "docs").as_posix().startswith(HISTORY)
    ],
)
def test_every_module_path_a_page_names_exists(page: str) -> None:
    """After a module moves (commit 8209d8a moved most of them), no page, the architecture
    page's prose included, names it by its old path."""
    missing = [
        path
        for path in module_paths((ROOT / "docs" / page).read_text())
        if not any((ROOT / (base + path)).exists() for base in BASES)
        and (page, path) not in ELSEWHERE
    ]
    assert not missing, f"{page} names modules that are not there: {missing}"


def test_the_module_path_check_sees_an_old_path() -> None:
    text = "`producer/worker_loop.py`, https://example.org/x/y.py, `tests/test_x.py`, core/loop.py"
    assert module_paths(text) == ["producer/worker_loop.py", "core/loop.py"]
    assert not (ROOT / "h5feed" / "producer" / "worker_loop.py").exists()
