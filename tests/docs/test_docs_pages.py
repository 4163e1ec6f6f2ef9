"""The pages a newcomer reads first (issue 41): the Concepts glossary defines each word once
and every page links a word to it where it first uses it; the Troubleshooting page lists
every h5feed error under the class the trainer catches; no page names an internal import
path. Pure text checks: nothing is built or run."""

from __future__ import annotations

import ast
import re

import pytest
from paths import REPO

ROOT = REPO
DOCS = ROOT / "docs"
CONCEPTS = DOCS / "concepts.md"
TROUBLESHOOTING = DOCS / "troubleshooting.md"

#: The words the glossary must define (issue 41's list, and what its definitions lean on).
GLOSSARY = (
    "feed", "iteration", "batch", "sample", "epoch", "epoch plan", "cursor", "shard",
    "trainer", "worker", "local worker", "producer", "replica", "remote producers",
    "shared fleet", "job", "index", "owner", "unit", "part", "slot", "credit", "step wait",
    "feed wait",
)  # fmt: skip
#: Every page links each glossary word at its first use, but the glossary itself and the raw
#: benchmark output under bench/ (not in the nav).
PAGES = tuple(
    page.relative_to(DOCS).as_posix()
    for page in sorted(DOCS.rglob("*.md"))
    if page != CONCEPTS and not page.relative_to(DOCS).as_posix().startswith("bench/")
)
#: (page, word): a first use in another sense, which must not link to the glossary.
OTHER_SENSE = {
    ("trainer/index.md", "replica"): "tf.distribute's replicas: copies of the model",
    ("semantics.md", "replica"): "tf.distribute's replicas",
    ("getting-started.md", "sample"): "the sample data: example files",
    ("architecture/development.md", "sample"): "the sample data",
    ("performance/index.md", "sample"): "the sample data",
    ("getting-started.md", "part"): "part of the waits",
    ("architecture/index.md", "part"): "each part of the wiring (a component)",
    ("data/layouts.md", "part"): "part of the resume fingerprint",
    ("deploy/security.md", "part"): "takes part in the run",
    ("performance/index.md", "part"): "part of the package",
    ("performance/socket-path.md", "part"): "the largest part of the cost",
    ("semantics.md", "part"): "a shard's part of each epoch",
    ("trainer/parameters.md", "part"): "a shard's part of every epoch",
    ("trainer/resume.md", "part"): "each part of the fingerprint",
    ("getting-started.md", "index"): "a batch's index in its epoch: its number",
    ("semantics.md", "index"): "a batch's index in its epoch",
    ("data/layouts.md", "index"): "index order: by number",
    ("data/your-code.md", "index"): "a generator's shard index",
    ("architecture/index.md", "job"): "each part has one job: a responsibility",
    ("changelog.md", "job"): "a SLURM job",
    ("deploy/preemption.md", "job"): "a cluster scheduler's job",
    ("deploy/shared-fleet.md", "job"): "a training job: a run",
    ("deploy/sizing.md", "job"): "a Prometheus scrape job",
    ("performance/index.md", "job"): "other jobs on the machine",
    ("performance/scale.md", "job"): "other jobs on the machine",
    ("trainer/resume.md", "job"): "a data-parallel training job",
    ("deploy/preemption.md", "batch"): "SLURM's batch shell",
    ("architecture/development.md", "worker"): "pytest-xdist's workers",
    ("deploy/security.md", "owner"): "a file's owner and mode",
    ("data/pack.md", "shard"): "the files h5feed pack writes",
    ("architecture/wire-format.md", "shard"): "a generator's per-worker shard",
    ("data/your-code.md", "shard"): "a generator's per-worker shard",
    ("guarantees.md", "shard"): "a generator's per-worker shard",
    ("performance/input-wait.md", "shard"): "a generator's per-worker shards",
    ("semantics.md", "shard"): "a generator's per-worker shards",
}


def glossary_terms(text: str) -> list[str]:
    """The words the Concepts page defines: its ``###`` headings, in page order."""
    return re.findall(r"^### (.+)$", text, flags=re.MULTILINE)


def slug(term: str) -> str:
    """The anchor MkDocs gives a heading (toc's default slugify, for plain words)."""
    return re.sub(r"[^\w]+", "-", term.lower()).strip("-")


_LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]*)\)")


def _blank(match: re.Match[str]) -> str:
    return " " * (match.end() - match.start())


def _prose(text: str) -> str:
    """``text`` with what is not prose blanked out, offsets kept: fenced code, HTML
    comments, headings, images, code spans and paths (a word there is a name, not a use); a link
    keeps its text and loses its target."""
    text = re.sub(r"^```.*?^```", _blank, text, flags=re.DOTALL | re.MULTILINE)
    text = re.sub(r"<!--.*?-->", _blank, text, flags=re.DOTALL)
    text = re.sub(r"^#.*$", _blank, text, flags=re.MULTILINE)
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", _blank, text)
    text = re.sub(r"`(?:[^`\n]|\n(?!\s*\n))*`", _blank, text)  # may span lines, not paragraphs
    text = _LINK.sub(lambda m: f"[{m.group(1)}]" + " " * (len(m.group(2)) + 2), text)
    return re.sub(r"\b[\w.*-]+(?:/[\w.*-]+)+", _blank, text)  # a path (tests/unit/...): a name


def first_uses(text: str, terms: list[str]) -> dict[str, tuple[int, int, str | None]]:
    """Each term's first use in ``text``'s prose: (start, end, the link it sits in or None).

    A use inside the text of a link to another page does not count (the reader has a link
    there), nor one inside a longer glossary term ("worker" in "local workers"). A term
    matches with an optional plural "s", in any case."""
    links = [(m.start(1), m.end(1), m.group(2)) for m in _LINK.finditer(text)]
    clean = _prose(text)
    patterns = {t: re.compile(rf"\b{re.escape(t)}s?\b", re.IGNORECASE) for t in terms}
    found: dict[str, tuple[int, int, str | None]] = {}
    for term in terms:
        longer = [other for other in terms if other != term and term in other]
        inside_longer = [(m.start(), m.end()) for o in longer for m in patterns[o].finditer(clean)]
        for match in patterns[term].finditer(clean):
            at = match.start()
            if any(a <= at < b for a, b in inside_longer):
                continue
            link = next((href for a, b, href in links if a <= at < b), None)
            if link is not None and "concepts.md" not in link:
                continue
            found[term] = (match.start(), match.end(), link)
            break
    return found


def unlinked_first_uses(page: str, text: str, terms: list[str]) -> list[str]:
    """The terms whose first use on ``page`` is not a link to their glossary entry."""
    problems = []
    for term, (start, _, link) in first_uses(text, terms).items():
        other_sense = (page, term) in OTHER_SENSE
        linked = link is not None and link.endswith(f"concepts.md#{slug(term)}")
        if linked == other_sense:
            line = text.count("\n", 0, start) + 1
            problems.append(
                f"{page}:{line}: {term!r}" + (" (another sense)" if other_sense else "")
            )
    return problems


def test_every_glossary_term_is_defined_once() -> None:
    terms = glossary_terms(CONCEPTS.read_text())
    duplicates = sorted({t for t in terms if terms.count(t) > 1})
    assert not duplicates, f"defined twice: {duplicates}"
    assert sorted(terms) == sorted(GLOSSARY), (
        f"not defined: {sorted(set(GLOSSARY) - set(terms))}; "
        f"not in GLOSSARY: {sorted(set(terms) - set(GLOSSARY))}"
    )


def test_the_glossary_has_its_diagram_and_is_in_the_nav() -> None:
    assert "](diagrams/architecture.svg)" in CONCEPTS.read_text()
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in ("concepts.md", "troubleshooting.md", "deploy/which-setup.md"):
        assert f": {page}\n" in nav, page


#: The names "fleet" had in the sense of any remote producers (issue 39), now deprecated.
_OLD_FLEET = re.compile(
    r'stats\(\)\["fleet"\](?!\["shared"\])|Sizing the fleet|Upgrading a running fleet'
    r"|h5feed_fleet_(?:replicas_needed|demand_clips|replica_capacity)"
)
#: The pages that may name them: the glossary and the sizing page, each saying they are
#: deprecated, and the changelog's history.
_OLD_FLEET_PAGES = ("concepts.md", "deploy/sizing.md", "changelog.md")


def test_fleet_means_the_shared_fleet_alone() -> None:
    """Remote producers' figures are ``stats()["producers"]`` and ``h5feed_producers_*``;
    "fleet" is the shared fleet's word (``fleet=``). The old names appear only where they are
    said to be deprecated."""
    text = CONCEPTS.read_text()
    remote = text[text.index("### remote producers") : text.index("### shared fleet")]
    assert 'stats()["producers"]' in remote and "[Sizing the producers]" in remote
    assert "deprecated" in remote
    assert "`fleet=" in text[text.index("### shared fleet") :]
    for page in ("concepts.md", "deploy/sizing.md"):
        assert "until 0.4.0" in (DOCS / page).read_text(), page
    uses = [
        f"{page.relative_to(DOCS)}:{number}"
        for page in sorted(DOCS.rglob("*.md"))
        if page.relative_to(DOCS).as_posix() not in _OLD_FLEET_PAGES
        for number, line in enumerate(page.read_text().splitlines(), 1)
        if _OLD_FLEET.search(line)
    ]
    readme = (ROOT / "README.md").read_text()
    assert not uses and not _OLD_FLEET.search(readme), f"fleet in the old sense: {uses}"


@pytest.mark.parametrize("page", PAGES)
def test_a_page_links_each_term_at_its_first_use(page: str) -> None:
    terms = glossary_terms(CONCEPTS.read_text())
    problems = unlinked_first_uses(page, (DOCS / page).read_text(), terms)
    assert not problems, "first uses not linked to docs/concepts.md#TERM: " + ", ".join(problems)


def test_the_first_use_check_sees_a_plain_use_and_skips_code_and_other_links() -> None:
    terms = ["worker", "local worker"]
    text = "Run `worker` code ([the worker docs](x.md)); two local workers and a worker.\n"
    uses = first_uses(text, terms)
    assert text[slice(*uses["local worker"][:2])] == "local workers"
    assert text[uses["worker"][0] :].startswith("worker.")  # the plain one, last on the line
    assert unlinked_first_uses("p.md", text, terms) == [
        "p.md:1: 'worker'",
        "p.md:1: 'local worker'",
    ]
    linked = text.replace("a worker.", "a [worker](concepts.md#worker).")
    assert unlinked_first_uses("p.md", linked, terms) == ["p.md:1: 'local worker'"]


# --------------------------------------------------------------------------------------------
# Troubleshooting


def h5feed_error_classes() -> dict[str, str]:
    """Every subclass of H5FeedError defined in the package: name -> module path, read from
    the source (no import: the producer's own errors are included without importing it)."""
    bases: dict[str, tuple[str, list[str]]] = {}
    for path in sorted((ROOT / "h5feed").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
                bases[node.name] = (path.relative_to(ROOT).as_posix(), names)
    found = {"H5FeedError": bases["H5FeedError"][0]}
    grew = True
    while grew:
        grew = False
        for name, (where, parents) in bases.items():
            if name not in found and any(p in found for p in parents):
                found[name] = where
                grew = True
    return found


def _sections(text: str) -> dict[str, str]:
    """Each ``##`` section of the page by its title."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {title: body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def error_problems(
    text: str, classes: dict[str, str], in_worker_error: tuple[str, ...]
) -> list[str]:
    """What the page lacks: a heading for each class (exactly one), and, for the classes a
    producer's worker raises, their row and heading inside the WorkerError section."""
    problems = []
    for name in sorted(classes):
        headings = re.findall(rf"^#{{2,3}} `{name}`$", text, flags=re.MULTILINE)
        if len(headings) != 1:
            problems.append(f"{name}: {len(headings)} headings")
    worker = _sections(text).get("`WorkerError`", "")
    for name in in_worker_error:
        if f"| `{name}` |" not in worker or f"### `{name}`" not in worker:
            problems.append(f"{name}: not under WorkerError")
    return problems


def test_troubleshooting_lists_every_error_under_the_class_the_trainer_catches() -> None:
    from h5feed.producer.worker.loop import _REFUSALS  # what a producer refuses, as ERRORs

    classes = h5feed_error_classes()
    assert {"PathRefused", "LimitRefused", "CodeRefused", "WorkerError"} <= set(classes)
    worker_side = (*_REFUSALS, "FrameError", "FileReadError", "TransformImportError")
    assert error_problems(TROUBLESHOOTING.read_text(), classes, worker_side) == []


def test_the_troubleshooting_check_catches_a_missing_error() -> None:
    text = TROUBLESHOOTING.read_text()
    classes = {**h5feed_error_classes(), "ShinyNewError": "h5feed/x.py"}
    assert error_problems(text, classes, ()) == ["ShinyNewError: 0 headings"]
    moved = text.replace("### `PathRefused`", "## `PathRefused`")
    assert error_problems(moved, h5feed_error_classes(), ("PathRefused",)) == [
        "PathRefused: not under WorkerError"
    ]


# --------------------------------------------------------------------------------------------
# Public paths only

#: Pages written for the people who change h5feed, which name its modules on purpose.
_DEVELOPER_PAGES = ("architecture/", "changelog.md", "bench/")
_INTERNAL_PATH = re.compile(r"\bh5feed\.(?:common|consumer|producer)\.\w")


def test_no_user_page_points_at_an_internal_import_path() -> None:
    leaks = [
        f"{page.relative_to(DOCS)}:{number}"
        for page in sorted(DOCS.rglob("*.md"))
        if not page.relative_to(DOCS).as_posix().startswith(_DEVELOPER_PAGES)
        for number, line in enumerate(page.read_text().splitlines(), 1)
        if _INTERNAL_PATH.search(line)
    ]
    assert not leaks, f"internal import paths (use the public h5feed.X): {leaks}"


# --------------------------------------------------------------------------------------------
# The package layout of docs/architecture/index.md


def _layout_block() -> str:
    text = (DOCS / "architecture" / "index.md").read_text()
    after = text[text.index("Package layout") :]
    return after[after.index("```") + 3 : after.index("```", after.index("```") + 3)]


def test_the_package_layout_names_every_module_and_only_modules_that_exist() -> None:
    """Each folder of the package has its heading in the block (``h5feed/consumer/plan/``), and
    its heading names exactly the modules in that folder: a module moved to another folder, or
    a folder that is not there, fails."""
    block = _layout_block()
    headings = re.findall(r"^(h5feed/(?:\w+/)*)", block, flags=re.M)
    sections = re.split(r"^h5feed/(?:\w+/)*", block, flags=re.M)[1:]
    named = {
        h: set(re.findall(r"\b(\w+\.py)\b", text))
        for h, text in zip(headings, sections, strict=True)
    }
    assert len(named) == len(headings), "a folder has two headings"
    folders = {
        path.parent.relative_to(ROOT).as_posix() + "/"
        for path in (ROOT / "h5feed").rglob("__init__.py")
        if "bench" not in path.relative_to(ROOT).parts
    }
    assert set(named) == folders, (sorted(folders - set(named)), sorted(set(named) - folders))
    for folder, names in named.items():
        modules = {p.name for p in (ROOT / folder).glob("*.py") if p.name != "__init__.py"}
        assert names == modules, (folder, sorted(modules - names), sorted(names - modules))
