"""The generated reference pages: tools/docs/reference.py, the MkDocs hook that turns
``h5feed.__all__``'s docstrings and the ``h5feed`` argparse parsers into
docs/reference/api.md and cli.md at build time (issue 28)."""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from typing import Any

import pytest
from paths import REPO

import h5feed
from h5feed.cli import build_parser

ROOT = REPO
HOOK = ROOT / "tools" / "docs" / "reference.py"
INTERNAL = ("h5feed.consumer.", "h5feed.common.", "h5feed.producer.")


def _load_hook() -> Any:
    """The hook as MkDocs loads it: from its file path, not as a module of a package, with
    its folder on ``sys.path`` while it loads (so its sibling module imports)."""
    spec = importlib.util.spec_from_file_location("h5feed_docs_reference", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    saved = sys.path.copy()
    sys.path.insert(0, str(HOOK.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


reference = _load_hook()


@pytest.fixture(scope="module")
def api_page() -> str:
    return str(reference.api_markdown())


def _anchors(markdown: str) -> set[str]:
    return set(re.findall(r"\{ #([\w.]+) \}", markdown)) | set(
        re.findall(r'id="([\w.]+)"', markdown)
    )


def _headings(markdown: str) -> list[str]:
    return re.findall(r"^#{1,6} .*$", markdown, flags=re.MULTILINE)


def _python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)\n```$", markdown, flags=re.MULTILINE | re.DOTALL)


def _fake_package(**replace: Any) -> types.ModuleType:
    """A stand-in for ``h5feed``: its public names, some replaced or added."""
    fake = types.ModuleType("h5feed")
    for name in h5feed.__all__:
        setattr(fake, name, getattr(h5feed, name))
    for name, value in replace.items():
        setattr(fake, name, value)
    fake.__all__ = sorted({*h5feed.__all__, *replace})
    return fake


# --------------------------------------------------------------------------------------------
# The Python API page


def test_every_public_name_has_an_entry(api_page: str) -> None:
    anchors = _anchors(api_page)
    missing = [name for name in h5feed.__all__ if f"h5feed.{name}" not in anchors]
    assert not missing, f"no entry for {missing}"
    layouts = [f"h5feed.layouts.{name}" for name in h5feed.layouts.__all__]
    assert not [path for path in layouts if path not in anchors]
    assert f"<code>{h5feed.__version__}</code>" in api_page
    signatures = "\n".join(_python_blocks(api_page))
    for name in h5feed.__all__:
        obj = getattr(h5feed, name)
        if callable(obj):
            assert f"h5feed.{name}(" in signatures, name
        if inspect.isfunction(obj):  # with the parameters it really takes
            for param in inspect.signature(obj).parameters:
                assert re.search(rf"\b{param}\b", signatures), (name, param)


def test_entries_carry_their_docstrings(api_page: str) -> None:
    # The first words of each docstring, as converted, are on the page.
    for name in h5feed.__all__:
        obj = getattr(h5feed, name)
        if callable(obj) or isinstance(obj, types.ModuleType):
            first_line = inspect.cleandoc(obj.__doc__).splitlines()[0]
            words = reference.rest_to_markdown(first_line).split()[:4]
            assert " ".join(words) in api_page, name


def test_headings_and_signatures_show_public_paths_only(api_page: str) -> None:
    shown = _headings(api_page) + _python_blocks(api_page)
    leaks = [text for text in shown if any(prefix in text for prefix in INTERNAL)]
    assert not leaks, leaks
    assert not [text for text in shown if "backup_and_restore" in text]
    assert any(block.startswith("h5feed.BackupAndRestore(") for block in _python_blocks(api_page))


def test_errors_are_listed_with_their_bases(api_page: str) -> None:
    errors = api_page[api_page.index("## Errors and warnings") :]
    for name in h5feed.__all__:
        cls = getattr(h5feed, name)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            base = cls.__bases__[0].__name__
            public = base in h5feed.__all__
            expected = f"[`h5feed.{base}`](#h5feed.{base})" if public else f"`{base}`"
            entry = errors[errors.index(f"{{ #h5feed.{name} }}") :].split("\n### ")[0]
            assert f"Base: {expected}." in entry, name
    # The hierarchy list nests a subclass under its base.
    assert "    - [`h5feed.H5FeedError`](#h5feed.H5FeedError)\n        - [`h5feed.DataError`]" in (
        errors
    )


def test_the_objects_a_user_holds_are_listed_with_their_methods(api_page: str) -> None:
    # batches() returns a Feed; iterating it gives a BatchStream (issue 41).
    anchors = _anchors(api_page)
    signatures = _python_blocks(api_page)
    for cls, members in (
        (h5feed.Feed, ("stream", "stats", "close", "length", "metrics_port")),
        (h5feed.BatchStream, ("state", "cursor", "stats", "close", "worker_pids")),
    ):
        for member in members:
            path = f"h5feed.{cls.__name__}.{member}"
            assert path in anchors, path
            assert any(block.startswith((f"{path}(", f"{path}: ")) for block in signatures), path
    assert "h5feed.Feed.stats() -> dict[str, Any]" in signatures
    assert "h5feed.BatchStream.cursor: Cursor  # property" in signatures
    assert not [p for p in anchors if re.search(r"\.(Feed|BatchStream)\._", p)], "a private member"
    held = api_page[api_page.index("{ #h5feed.Feed }") : api_page.index("{ #h5feed.Cursor }")]
    assert not [prefix for prefix in INTERNAL if prefix in held], "an internal path is cited"


def test_a_public_method_without_a_docstring_fails_the_build() -> None:
    class Feed:
        """A feed."""

        def stats(self) -> dict[str, Any]:
            return {}

    with pytest.raises(
        reference.ReferenceBuildError, match=r"h5feed\.Feed\.stats has no docstring"
    ):
        reference.api_markdown(_fake_package(Feed=Feed))


def test_signature_shows_an_internal_type_by_its_public_path() -> None:
    def take(
        layout: h5feed.common.layouts.Flat,  # type: ignore[name-defined]
        feed: h5feed.consumer.api.Feed,  # type: ignore[name-defined]
    ) -> None:
        """Take them."""

    text = reference.signature_text("h5feed.take", take, reference._Face())
    assert text == "h5feed.take(layout: Flat, feed: Feed) -> None"
    face = reference._Face()
    face.add("layouts.Flat")
    text = reference.signature_text("h5feed.take", take, face)
    assert text == "h5feed.take(layout: h5feed.layouts.Flat, feed: Feed) -> None"


def test_a_public_function_without_a_docstring_fails_the_build() -> None:
    def dataset(files: Any = None) -> None:
        pass

    with pytest.raises(reference.ReferenceBuildError, match=r"h5feed\.dataset has no docstring"):
        reference.api_markdown(_fake_package(dataset=dataset))


def test_a_public_class_without_its_own_docstring_fails_the_build() -> None:
    # inspect.getdoc would lend it H5FeedError's docstring: an entry about another class.
    class NoWorkersError(h5feed.H5FeedError):
        pass

    with pytest.raises(
        reference.ReferenceBuildError, match=r"h5feed\.NoWorkersError has no docstring"
    ):
        reference.api_markdown(_fake_package(NoWorkersError=NoWorkersError))


def test_a_public_name_in_no_section_fails_the_build() -> None:
    def shiny() -> None:
        """New and public."""

    with pytest.raises(reference.ReferenceBuildError, match=r"not placed in any section: shiny"):
        reference.api_markdown(_fake_package(shiny=shiny))


# --------------------------------------------------------------------------------------------
# Docstrings as Markdown


def _md(text: str) -> str:
    return str(reference.rest_to_markdown(textwrap.dedent(text).strip("\n")))


def test_roles_and_literals_become_code_spans() -> None:
    assert _md(":class:`~h5feed.x.Y` and :mod:`h5feed.consumer.position.resume`") == (
        "`Y` and `h5feed.consumer.position.resume`"
    )
    assert _md("``x`` and `y`, :meth:`!Feed.close`, :data:`LIMIT`") == (
        "`x` and `y`, `Feed.close`, `LIMIT`"
    )
    assert _md(":func:`the feed <h5feed.batches>`") == "`the feed`"
    assert _md("(:class:`~h5feed.common.errors.\n   ResumeError`)") == "(`ResumeError`)"
    assert _md("``a `b` c``") == "`` a `b` c ``"


def test_roles_to_public_names_link_to_their_entries() -> None:
    face = reference._Face()
    for name in ("dataset", "ProtocolError", "distribute", "layouts", "layouts.Flat"):
        face.add(name)

    def md(text: str) -> str:
        return str(reference.rest_to_markdown(text, face.resolve))

    assert md(":func:`dataset`, :func:`h5feed.dataset`, :class:`~h5feed.x.ProtocolError`") == (
        "[`dataset`](#h5feed.dataset), [`h5feed.dataset`](#h5feed.dataset), "
        "[`ProtocolError`](#h5feed.ProtocolError)"
    )
    assert md(":class:`Flat`, :py:class:`h5feed.common.layouts.Flat`") == (
        "[`Flat`](#h5feed.layouts.Flat), [`h5feed.common.layouts.Flat`](#h5feed.layouts.Flat)"
    )
    assert md(":func:`elsewhere`") == "`elsewhere`"
    # A module links only to its own entry, not to a function of the same last name.
    assert md(":mod:`h5feed.consumer.trainers.distribute`") == (
        "`h5feed.consumer.trainers.distribute`"
    )
    assert md(":mod:`h5feed.layouts`") == "[`h5feed.layouts`](#h5feed.layouts)"


def test_lists_get_a_blank_line_before_them_and_their_lines_joined() -> None:
    text = """\
        Defaults:
        * clip: ``clip_len=16``,
          stride 1;
        * layout: auto.

          More about layouts.

            1. nested, numbered
            2. second
        After the list.
        """
    assert _md(text) == (
        "Defaults:\n\n"
        "- clip: `clip_len=16`, stride 1;\n"
        "- layout: auto.\n\n"
        "    More about layouts.\n\n"
        "    1. nested, numbered\n"
        "    2. second\n\n"
        "After the list."
    )


def test_literal_blocks_become_fenced_code() -> None:
    text = """\
        A state::

            {"epoch": e,
             "batch": b}

        Then:

            h5feed produce --connect tcp://trainer:5555

        >>> h5feed.batches("a.h5")
        <Feed>
        """
    assert _md(text) == (
        "A state:\n\n"
        '```text\n{"epoch": e,\n "batch": b}\n```\n\n'
        "Then:\n\n"
        "```text\nh5feed produce --connect tcp://trainer:5555\n```\n\n"
        '```python\n>>> h5feed.batches("a.h5")\n<Feed>\n```'
    )


def test_cited_docs_pages_become_links_where_the_site_has_them() -> None:
    def pages(src: str) -> str | None:
        return f"../{src}" if src in ("semantics.md", "data/your_code.md") else None

    text = (
        "See docs/semantics.md#shards, docs/data/your_code.md. Not docs/gone.md or ``docs/x.md``."
    )
    assert reference.rest_to_markdown(text, pages=pages) == (
        r"See [docs/semantics.md#shards](../semantics.md#shards), "
        r"[docs/data/your\_code.md](../data/your_code.md). "
        r"Not docs/gone.md or `docs/x.md`."
    )


def test_markdown_markup_in_plain_text_is_escaped() -> None:
    assert _md("[B, *its shape] of max_skipped <n> {x}") == (
        r"\[B, \*its shape\] of max\_skipped &lt;n> \{x\}"
    )
    assert _md("A *state* is **kept**.") == "A *state* is **kept**."
    assert _md("# not a heading") == r"\# not a heading"
    assert _md("Title\n-----\n\nText.") == "**Title**\n\nText."


# --------------------------------------------------------------------------------------------
# The command line page


def _walk(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*words, name))


def _sections(markdown: str) -> dict[str, str]:
    found = re.findall(
        r"^#{2,6} (h5feed[^\n]*)\n\n```text\n(.*?)\n```$", markdown, flags=re.MULTILINE | re.DOTALL
    )
    return dict(found)


def test_every_subcommand_has_its_help_at_the_fixed_width(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    page = reference.cli_markdown()
    sections = _sections(page)
    monkeypatch.setenv("COLUMNS", str(reference.HELP_COLUMNS))
    parsers = {" ".join(("h5feed", *words)): parser for words, parser in _walk(build_parser())}
    assert "h5feed bench scale" in parsers  # the walk reaches nested subcommands
    assert sorted(sections) == sorted(parsers)
    for title, parser in parsers.items():
        assert sections[title] == parser.format_help().rstrip(), title


def test_help_width_does_not_follow_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    narrow = reference.cli_markdown()
    assert os.environ["COLUMNS"] == "60"  # put back
    monkeypatch.delenv("COLUMNS")
    assert reference.cli_markdown() == narrow
    assert "COLUMNS" not in os.environ
    monkeypatch.setenv("COLUMNS", "60")
    assert build_parser().format_help().rstrip() not in narrow  # not the 60-column text


# --------------------------------------------------------------------------------------------
# The hook in MkDocs


class _Files:
    """MkDocs' Files, as far as the hook asks: which pages the site has."""

    def __init__(self, *pages: str) -> None:
        self.pages = pages

    def get_file_from_path(self, path: str) -> object | None:
        return path if path in self.pages else None


def test_the_hook_replaces_only_its_markers() -> None:
    page = types.SimpleNamespace(file=types.SimpleNamespace(src_uri="reference/api.md"))
    config = types.SimpleNamespace(markdown_extensions=["toc", "attr_list"])
    files = _Files("guarantees.md")
    text = f"# API\n\n{reference.API_MARKER}\n\n# CLI\n\n{reference.CLI_MARKER}\n"
    out = reference.on_page_markdown(text, page, config, files)
    assert reference.API_MARKER not in out and reference.CLI_MARKER not in out
    assert "{ #h5feed.dataset }" in out and "## h5feed produce" in out
    # A docs page a docstring cites is linked relative to reference/api.md.
    assert "[docs/guarantees.md](../guarantees.md)" in out
    assert reference.on_page_markdown("# Plain\n", page, config, files) == "# Plain\n"
    config.markdown_extensions = ["toc"]
    with pytest.raises(reference.ReferenceBuildError, match="attr_list"):
        reference.on_page_markdown(text, page, config, files)


MKDOCS_YML = """\
site_name: reference test
docs_dir: docs
use_directory_urls: false
theme:
  name: material
  font: false
plugins: []
hooks:
  - {hook}
markdown_extensions:
  - attr_list
  - toc:
      permalink: true
  - pymdownx.highlight
  - pymdownx.superfences
validation:
  absolute_links: warn
  unrecognized_links: warn
  anchors: warn
"""


def test_mkdocs_build_strict_renders_both_pages(tmp_path: pathlib.Path) -> None:
    (tmp_path / "mkdocs.yml").write_text(MKDOCS_YML.format(hook=HOOK))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n[API](api.md), [CLI](cli.md)\n")
    (docs / "guarantees.md").write_text("# Guarantees\n")  # cited by docstrings
    for name in ("api", "cli"):
        (docs / f"{name}.md").write_text((ROOT / "docs" / "reference" / f"{name}.md").read_text())
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    api = (tmp_path / "site" / "api.html").read_text()
    assert '<h3 id="h5feed.dataset"><code>h5feed.dataset</code>' in api
    assert "<li>clip (<code>ClipSpec</code>)" in api  # the docstring's list is a list
    assert '<a href="#h5feed.ProtocolError"><code>ProtocolError</code></a>' in api
    assert '<a href="guarantees.html">docs/guarantees.md</a>' in api
    assert "h5feed:api" not in api
    cli = (tmp_path / "site" / "cli.html").read_text()
    assert '<h2 id="h5feed-produce">h5feed produce' in cli
    assert "usage: h5feed produce" in cli


# --------------------------------------------------------------------------------------------
# The stats() and /metrics page

stats_reference = sys.modules["stats_reference"]  # loaded by the hook, as MkDocs loads it


def _pinned() -> Any:
    import public_names  # the pinned keys and names (tests/ is on sys.path)

    return public_names


def test_every_pinned_stats_key_has_a_description_and_no_other() -> None:
    pinned = _pinned()
    for described, keys in (
        (stats_reference.STATS, pinned.STATS_KEYS),
        (stats_reference.WORKER, pinned.WORKER_KEYS),
        (stats_reference.HOST, pinned.HOST_KEYS),
        (stats_reference.PRODUCERS, pinned.PRODUCERS_KEYS),
    ):
        assert set(described) == set(keys), (
            f"no description: {sorted(set(keys) - set(described))}; "
            f"described but not pinned: {sorted(set(described) - set(keys))}"
        )
        assert all(text.strip() for text in described.values())


def test_every_pinned_metric_is_generated_with_its_help() -> None:
    families = {name: (kind, text) for name, kind, text in stats_reference.metric_families()}
    missing = sorted(_pinned().METRIC_NAMES - set(families))
    assert not missing, f"pinned metrics the reference does not list: {missing}"
    assert "h5feed_producers_replicas_needed" in families  # known in the sample: listed too
    assert all(kind in ("counter", "gauge") and text for kind, text in families.values())


def test_the_stats_page_lists_every_key_and_metric() -> None:
    page = stats_reference.stats_markdown()
    for key in (*stats_reference.STATS, *stats_reference.WORKER, *stats_reference.PRODUCERS):
        assert f"| `{key}` |" in page, key
    for name in _pinned().METRIC_NAMES:
        assert f"| `{name}` |" in page, name
