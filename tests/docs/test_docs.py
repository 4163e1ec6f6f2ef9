"""The documentation site (mkdocs.yml, docs/) and the README stay true to the code.

- The site builds with ``mkdocs build --strict``: a broken link, anchor or nav entry, or a
  generated reference that cannot be made, fails the suite.
- The getting-started page's Python blocks marked ``<!-- runnable -->`` run as they stand, on
  the sample data its ``h5feed make-sample`` command makes (shell and docker blocks are not run).
- Every test the docs or the README cite (``tests/x.py::name``, or ``::name`` after a path on
  the same line) exists, so a renamed test cannot leave a guarantee pinned by nothing.
- The README stays a five-minute read, and each of its links into the docs leads somewhere.
"""

from __future__ import annotations

import ast
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
from paths import REPO

ROOT = REPO
DOCS = ROOT / "docs"
GETTING_STARTED = DOCS / "getting-started.md"
#: Every page a person writes (docs/bench/ holds benchmark output, not prose).
PAGES = sorted(p for p in DOCS.rglob("*.md") if "bench" not in p.relative_to(DOCS).parts)
MKDOCS_ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def fenced_blocks(text: str) -> list[tuple[str, str, bool]]:
    """(language, code, marked runnable) of each fenced block, in page order."""
    blocks = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        blocks.append((match.group(1), match.group(2), before.strip() == "<!-- runnable -->"))
    return blocks


@pytest.mark.timeout(300)
def test_the_site_builds_with_strict(tmp_path: pathlib.Path) -> None:
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, env=MKDOCS_ENV, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-4000:]
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    assert {"index.html", "getting-started.html", "reference/api.html"} <= pages
    assert "bench/bench-2cores.png" in {p.relative_to(site).as_posix() for p in site.rglob("*")}


def test_runnable_marks_only_python_blocks_and_getting_started_has_two() -> None:
    blocks = fenced_blocks(GETTING_STARTED.read_text())
    runnable = [lang for lang, _, marked in blocks if marked]
    assert runnable == ["python", "python"]


@pytest.mark.timeout(600)
def test_the_getting_started_examples_run_on_the_sample_data(tmp_path: pathlib.Path) -> None:
    blocks = fenced_blocks(GETTING_STARTED.read_text())
    (make_sample,) = [
        line
        for lang, code, _ in blocks
        if lang == "bash"
        for line in code.splitlines()
        if line.startswith("h5feed make-sample ")
    ]
    argv = [sys.executable, "-m", "h5feed", *shlex.split(make_sample)[1:]]
    made = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert made.returncode == 0, made.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    printed = []
    for number, (_, code, _) in enumerate(b for b in blocks if b[2]):
        ran = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=280,
        )  # fmt: skip
        assert ran.returncode == 0, f"runnable block {number}:\n{ran.stderr[-4000:]}"
        printed.append(ran.stdout)
    assert "16 clips; 4 batches" in printed[0]


# `tests/x.py`, `tests/x.py::name` or `::name` (the same file as the citation before it)
CITATION = re.compile(r"`(tests/[\w/]+\.py)?(?:::(\w+))?(?:\[[^\]`]*\])?`")


def citations(text: str) -> list[tuple[str, str | None]]:
    found: list[tuple[str, str | None]] = []
    for line in text.splitlines():
        current: str | None = None
        for path, name in CITATION.findall(line):
            current = path or current
            if current and (path or name):
                found.append((current, name or None))
    return found


def defined_tests(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


CITED = sorted(
    {c for page in [*PAGES, ROOT / "README.md"] for c in citations(page.read_text())},
    key=lambda c: (c[0], c[1] or ""),
)


def test_the_docs_cite_tests_at_all() -> None:
    assert len(CITED) >= 100
    assert ("tests/docs/test_docs.py", "test_every_cited_test_exists") in citations(
        "pinned by `tests/docs/test_docs.py::test_the_site_builds_with_strict`, "
        "`::test_every_cited_test_exists`"
    )


@pytest.mark.parametrize("cited", CITED, ids=[f"{p}::{n}" for p, n in CITED])
def test_every_cited_test_exists(cited: tuple[str, str | None]) -> None:
    path, name = cited
    assert (ROOT / path).is_file(), f"{path} is cited but does not exist"
    if name is not None:
        assert name in defined_tests(ROOT / path), f"{path}::{name} is cited but not defined"


def test_a_cited_test_that_is_gone_is_caught() -> None:
    (cited,) = citations("`tests/docs/test_docs.py::test_that_was_renamed`")
    with pytest.raises(AssertionError, match="cited but not defined"):
        test_every_cited_test_exists(cited)


README_LINK = re.compile(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)")


def test_the_readme_is_a_five_minute_read_and_its_links_lead_somewhere() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 160
    links = README_LINK.findall(text)
    assert len(links) >= 8, links
    for link in links:
        assert (ROOT / link).exists(), f"README links to {link}, which does not exist"
