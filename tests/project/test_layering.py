"""The package's layering: producer -> common <- consumer; TensorFlow only where asked for."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest
from paths import REPO

PACKAGE = REPO / "h5feed"


def imported_modules(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


# What the consumer's foundation (plan, position, telemetry) never imports: an input kind, the
# front door (api, feed, stream, iteration, inputs, parameters) or a front end.
FOUNDATION_MAY_NOT = (
    "h5feed.consumer.hdf5",
    "h5feed.consumer.sources",
    "h5feed.consumer.api",
    "h5feed.consumer.feed",
    "h5feed.consumer.stream",
    "h5feed.consumer.iteration",
    "h5feed.consumer.inputs",
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


# -- The import graph, transitive ------------------------------------------------------------
#
# The rules above read each module's own import statements: a module that reaches an input
# kind through another (core -> options -> sources, as the core did before config/) passes
# them. What follows builds the graph of the whole package and checks what a module LOADS:
# the closure of its imports.


def module_names(root: pathlib.Path, package: str) -> dict[str, pathlib.Path]:
    """Every module under ``root`` (the directory of ``package``) by dotted name; a package
    by its own name (its ``__init__.py``)."""
    names: dict[str, pathlib.Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes inside ``if TYPE_CHECKING:`` blocks (never run)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for statement in node.body:
                inside.update(id(n) for n in ast.walk(statement))
    return inside


def import_statements(name: str, path: pathlib.Path, *, typing: bool) -> set[str]:
    """What the import statements of module ``name`` name, anywhere in it (module level,
    functions, methods, classes, ``try``), relative ones resolved; for ``from p import m``
    also ``p.m`` (which the graph keeps only when it is a module). ``typing``: with the
    imports of ``if TYPE_CHECKING:`` blocks too, else without them (they never run)."""
    tree = ast.parse(path.read_text())
    skipped = set() if typing else _type_checking_only(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
        elif (  # importlib.import_module("a.literal.name"): the same as an import statement
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
    return found


def import_graph(
    root: pathlib.Path = PACKAGE,
    package: str = "h5feed",
    *,
    typing: bool = False,
    skip: frozenset[tuple[str, str]] = frozenset(),
) -> dict[str, set[str]]:
    """Module -> what loading it loads directly: each module of the package the statements
    name, with the packages above it (``import a.b.c`` runs ``a`` and ``a.b`` first), and
    its own parent package; an outside module as its top-level name (``tensorflow``).
    ``skip``: (module, what it imports) statements left out; KeyError if one is not there."""
    modules = module_names(root, package)
    graph: dict[str, set[str]] = {}
    statements = {
        name: import_statements(name, path, typing=typing) for name, path in modules.items()
    }
    for module, target in skip:
        left = {t for t in statements[module] if t != target and not t.startswith(target + ".")}
        if left == statements[module]:
            raise KeyError(f"{module} no longer imports {target}: drop it from skip")
        statements[module] = left
    for name in modules:
        edges: set[str] = set()
        for target in statements[name] | {name.rpartition(".")[0]}:
            if not target:
                continue
            if target.split(".")[0] != package:
                edges.add(target.split(".")[0])
                continue
            parts = target.split(".")
            heads = (".".join(parts[:n]) for n in range(1, len(parts) + 1))
            edges.update(head for head in heads if head in modules)
        edges.discard(name)
        graph[name] = edges
    return graph


def loaded_by(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Everything loading ``start`` loads, each with the module that imports it (the path
    back to ``start`` follows these)."""
    seen: dict[str, str] = {start: ""}
    todo = [start]
    while todo:
        module = todo.pop()
        for target in graph.get(module, ()):
            if target not in seen:
                seen[target] = module
                todo.append(target)
    del seen[start]
    return seen


def _chain(seen: dict[str, str], start: str, end: str) -> str:
    chain = [end]
    while seen.get(chain[-1], start) != start:
        chain.append(seen[chain[-1]])
    return " -> ".join([start, *reversed(chain)])


#: What the loop core never loads, however deep: an input kind, the front door and front ends,
#: the process plumbing (the announcer included), TensorFlow and its kin.
CORE_NEVER_LOADS = (
    "h5feed.consumer.hdf5",
    "h5feed.consumer.sources",
    "h5feed.consumer.trainers",
    "h5feed.consumer.processes",
    "h5feed.consumer.api",
    "h5feed.consumer.feed",
    "h5feed.consumer.stream",
    "h5feed.consumer.iteration",
    "h5feed.consumer.inputs",
    "h5feed.consumer.parameters",
    "h5feed.consumer.options",
    "h5feed.producer",
    "tensorflow",
    "keras",
    "torch",
)


#: Late imports, in modules the core loads, of functions the core never calls, each with
#: the function: the rule leaves these statements out (and fails once one is gone, so the
#: list cannot rot).
LATE_IMPORTS_THE_CORE_NEVER_RUNS = {
    # Every module loads the package face, which loads h5feed.layouts, whose
    # directory_classes() imports the consumer's file search when a user calls it.
    ("h5feed.layouts", "h5feed.consumer.hdf5.files"): "h5feed.layouts.directory_classes()",
}


def _forbidden(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_core_loads_no_input_kind_front_end_or_announcer() -> None:
    """Transitive: over the closure of every import statement of every core module, those in
    functions included (importing late dodges a ``sys.modules`` check, not this), and the
    packages each import runs. ``if TYPE_CHECKING:`` imports are left out: they never run.
    So are the few late imports of :data:`LATE_IMPORTS_THE_CORE_NEVER_RUNS`, each named with
    the function the core never calls. Blind only to imports by a computed name
    (``importlib.import_module(variable)``): the core has none."""
    graph = import_graph(skip=frozenset(LATE_IMPORTS_THE_CORE_NEVER_RUNS))
    core = sorted(m for m in graph if m.startswith("h5feed.consumer.core"))
    assert "h5feed.consumer.core.loop" in core
    for module in core:
        seen = loaded_by(graph, module)
        bad = sorted(m for m in seen if _forbidden(m, CORE_NEVER_LOADS))
        assert not bad, f"{module} loads {bad[0]}: {_chain(seen, module, bad[0])}"


def consumer_units(module: str) -> str | None:
    """The part of consumer/ a module belongs to: its sub-package (``h5feed.consumer.core``)
    or, for a top-level module, the module itself (``h5feed.consumer.feed``); None outside
    (and for ``h5feed.consumer`` itself, which every part sits in)."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["h5feed", "consumer"] and len(parts) > 2 else None


def unit_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles between units (:func:`consumer_units`): each strongly connected set of
    more than one unit, found by reachability (a few dozen units: no need for Tarjan)."""
    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        unit = consumer_units(module)
        if unit is None:
            continue
        units.setdefault(unit, set()).update(
            u for u in map(consumer_units, targets) if u is not None and u != unit
        )
    reach = {unit: set(loaded_by(units, unit)) for unit in units}
    cycles: list[list[str]] = []
    for unit in sorted(units):
        together = sorted({unit} | {u for u in reach[unit] if unit in reach.get(u, ())})
        if len(together) > 1 and together not in cycles:
            cycles.append(together)
    return cycles


def test_consumer_has_no_import_circle_between_its_parts() -> None:
    """consumer/'s parts (each sub-package, each top-level module) import each other without
    a circle: the graph of every import statement (functions and ``if TYPE_CHECKING:``
    included: a circle of types is a circle of design) folded onto the parts, with no set of
    parts that reach each other. Within one sub-package, modules may import each other."""
    cycles = unit_cycles(import_graph(typing=True))
    assert not cycles, f"import circles between consumer/'s parts: {cycles}"


def test_the_graph_sees_late_relative_and_literal_dynamic_imports(tmp_path: pathlib.Path) -> None:
    """The dodges a direct-import or ``sys.modules`` check misses are edges here."""
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("")
    (root / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (root / "sub" / "b.py").write_text("from . import c\n")
    (root / "sub" / "c.py").write_text(
        "import importlib\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    import pkg.d\ndef g():\n    importlib.import_module('tensorflow')\n"
    )
    (root / "d.py").write_text("import pkg.a\n")
    graph = import_graph(root, "pkg")
    assert set(loaded_by(graph, "pkg.a")) >= {"pkg.sub.b", "pkg.sub.c", "pkg.sub", "tensorflow"}
    assert "pkg.d" not in loaded_by(graph, "pkg.a")  # TYPE_CHECKING never runs
    assert "pkg.d" in import_graph(root, "pkg", typing=True)["pkg.sub.c"]


def test_a_circle_between_parts_is_found() -> None:
    graph = {
        "h5feed.consumer.core.loop": {"h5feed.consumer.options"},
        "h5feed.consumer.options": {"h5feed.consumer.sources.options"},
        "h5feed.consumer.sources.options": {"h5feed.consumer.core.ledger"},
        "h5feed.consumer.core.ledger": set(),
        "h5feed.consumer.plan.rest": {"h5feed.consumer.plan.epoch_plan"},
        "h5feed.consumer.plan.epoch_plan": {"h5feed.consumer.plan.rest"},  # inside one: fine
    }
    assert unit_cycles(graph) == [
        ["h5feed.consumer.core", "h5feed.consumer.options", "h5feed.consumer.sources"]
    ]
