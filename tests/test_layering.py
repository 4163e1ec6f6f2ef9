"""The package's layering: producer -> common <- consumer; TensorFlow only where asked for."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "h5feed"


def imported_modules(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


# What the consumer's foundation (plan, position, telemetry) never imports: an input kind, the
# front door (api, feed, stream, iteration, parameters) or a front end.
FOUNDATION_MAY_NOT = (
    "h5feed.consumer.hdf5",
    "h5feed.consumer.sources",
    "h5feed.consumer.api",
    "h5feed.consumer.feed",
    "h5feed.consumer.stream",
    "h5feed.consumer.iteration",
    "h5feed.consumer.parameters",
    "h5feed.consumer.trainers",
)

# Each rule: the modules under a folder (recursively) never import the forbidden prefixes.
# ``h5feed`` alone is the package face: the producer and common sides must not import it (it
# pulls the consumer's lazy names into every worker).
LAYERS = [
    ("common", ("h5feed.producer", "h5feed.consumer", "tensorflow", "keras", "=h5feed")),
    ("producer", ("h5feed.consumer", "tensorflow", "keras", "=h5feed")),
    ("pack", ("h5feed.consumer", "tensorflow", "keras", "=h5feed")),
    ("consumer", ("h5feed.producer",)),
    # The loop core knows no input kind, no front end and no process plumbing: its options
    # are config/'s groups, not the feed's config (options.py knows the input kinds).
    (
        "consumer/core",
        (
            *FOUNDATION_MAY_NOT,
            "h5feed.consumer.processes",
            "h5feed.consumer.options",
            "h5feed.consumer.position",
            "h5feed.consumer.telemetry",
            "tensorflow",
        ),
    ),
    # The option groups: below the core, so they know nothing of the consumer but the plan.
    (
        "consumer/config",
        (
            *FOUNDATION_MAY_NOT,
            "h5feed.consumer.core",
            "h5feed.consumer.processes",
            "h5feed.consumer.options",
            "h5feed.consumer.position",
            "h5feed.consumer.telemetry",
        ),
    ),
    # The input kinds know the core, never each other nor the front ends.
    # (An input kind's config is options.py's feed config: HdfConfig there, SourceConfig in
    # sources/options.py, which options.py imports.)
    (
        "consumer/hdf5",
        (
            *(f for f in FOUNDATION_MAY_NOT if f != "h5feed.consumer.hdf5"),
            "tensorflow",
        ),
    ),
    (
        "consumer/sources",
        (
            *(f for f in FOUNDATION_MAY_NOT if f != "h5feed.consumer.sources"),
            "h5feed.consumer.options",
        ),
    ),
    # Front ends reach the workers through a feed and its streams only, and never the entry
    # points that re-export them (api.py re-exports dataset() of trainers/tf_dataset.py).
    (
        "consumer/trainers",
        ("h5feed.consumer.core", "h5feed.consumer.processes", "h5feed.consumer.api"),
    ),
    (
        "consumer/processes",
        ("h5feed.consumer.hdf5", "h5feed.consumer.sources", "h5feed.consumer.trainers"),
    ),
    # The plan is pure: what an epoch holds, from the seed and the files' lengths alone.
    (
        "consumer/plan",
        (
            *FOUNDATION_MAY_NOT,
            "h5feed.consumer.core",
            "h5feed.consumer.position",
            "h5feed.consumer.telemetry",
            "h5feed.consumer.options",
        ),
    ),
    # What a feed tells about itself reads the core's counters, never an input kind.
    ("consumer/telemetry", (*FOUNDATION_MAY_NOT, "h5feed.consumer.position")),
    # Where a stream stands: the plan's positions, never the loop's plumbing nor a front end
    # (writing a merged backup is trainers/merged_backup.py's).
    ("consumer/position", (*FOUNDATION_MAY_NOT, "h5feed.consumer.processes")),
]


def forbidden_imports(path: pathlib.Path, forbidden: tuple[str, ...]) -> set[str]:
    exact = {f[1:] for f in forbidden if f.startswith("=")}
    prefixes = tuple(f for f in forbidden if not f.startswith("="))
    return {
        m
        for m in imported_modules(path)
        if m in exact or any(m == p or m.startswith(p + ".") for p in prefixes)
    }


@pytest.mark.parametrize(("folder", "forbidden"), LAYERS, ids=[layer[0] for layer in LAYERS])
def test_dependencies_point_one_way(folder: str, forbidden: tuple[str, ...]) -> None:
    paths = sorted((PACKAGE / folder).rglob("*.py"))
    assert paths, f"no modules under h5feed/{folder}"
    for path in paths:
        bad = forbidden_imports(path, forbidden)
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


def test_every_consumer_module_lives_in_a_folder_the_layers_name() -> None:
    """A new consumer sub-package gets its rule here, so the layering never silently skips it."""
    named = {PACKAGE / folder for folder, _ in LAYERS}
    for sub in (PACKAGE / "consumer").iterdir():
        if sub.is_dir() and (sub / "__init__.py").exists():
            assert sub in named, f"consumer/{sub.name} has no layering rule"


def test_the_rule_sees_an_import_of_the_package_face(tmp_path: pathlib.Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from h5feed import __version__\nimport h5feed.common.version\n")
    assert forbidden_imports(module, ("=h5feed",)) == {"h5feed"}


@pytest.mark.parametrize(
    "module", ["h5feed", "h5feed.producer.worker.process", "h5feed.consumer.api", "h5feed.cli"]
)
def test_importing_does_not_import_tensorflow(module: str) -> None:
    code = f"import sys, {module}; print('tensorflow' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
