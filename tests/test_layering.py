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


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("common", ("h5feed.producer", "h5feed.consumer", "tensorflow", "keras")),
        ("producer", ("h5feed.consumer", "tensorflow", "keras")),
        ("consumer", ("h5feed.producer",)),
        ("pack", ("h5feed.consumer", "tensorflow", "keras")),
    ],
)
def test_dependencies_point_one_way(package: str, forbidden: tuple[str, ...]) -> None:
    for path in sorted((PACKAGE / package).glob("*.py")):
        bad = {m for m in imported_modules(path) if m.startswith(forbidden)}
        assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize(
    "module", ["h5feed", "h5feed.producer.worker", "h5feed.consumer.api", "h5feed.cli"]
)
def test_importing_does_not_import_tensorflow(module: str) -> None:
    code = f"import sys, {module}; print('tensorflow' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
