"""The input kind is an object at the edge: outside its own package, no consumer module asks
a configuration or a handshake's lesson which kind it is (``isinstance`` on ``HdfConfig``,
``SourceConfig``, ``Learnt`` or ``Index``); it asks the kind's input object instead."""

from __future__ import annotations

import ast
import pathlib

import h5feed

PACKAGE = pathlib.Path(h5feed.__file__).resolve().parent
CONSUMER = PACKAGE / "consumer"

#: The types that tell the input kinds apart: their configurations and what they learn.
KIND_TYPES = frozenset({"HdfConfig", "SourceConfig", "Learnt", "Index"})

#: Where asking is the module's own business: each input kind's package (its config, its
#: lesson, its input object), and inputs.py, which makes a config's input object.
OWN_PACKAGES = ("hdf5", "sources", "inputs.py")


def kind_tests(path: pathlib.Path) -> list[str]:
    """The kind types ``isinstance`` calls in ``path`` test against, one per call and type
    (``isinstance(x, (A, B))`` counts A and B; ``isinstance(x, module.A)`` counts A)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
        ):
            continue
        kinds = node.args[1]
        for target in kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]:
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name in KIND_TYPES:
                found.append(name)
    return sorted(found)


def uses_outside_the_kinds() -> dict[str, list[str]]:
    uses: dict[str, list[str]] = {}
    for path in sorted(CONSUMER.rglob("*.py")):
        relative = path.relative_to(CONSUMER)
        if relative.parts[0] in OWN_PACKAGES:
            continue
        found = kind_tests(path)
        if found:
            uses[relative.as_posix()] = found
    return uses


def test_no_consumer_module_outside_the_kinds_asks_a_config_its_kind() -> None:
    """(main before the input objects: 16 such tests in 7 modules.)"""
    uses = uses_outside_the_kinds()
    assert not uses, f"isinstance on an input kind's types outside its package: {uses}"


def test_the_check_sees_each_form(tmp_path: pathlib.Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "isinstance(c, HdfConfig)\nisinstance(c, (options.SourceConfig, int))\n"
        "isinstance(x, Learnt) and isinstance(x, dict)\n"
    )
    assert kind_tests(module) == ["HdfConfig", "Learnt", "SourceConfig"]
