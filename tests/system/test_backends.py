"""Keras 3 on JAX and on PyTorch, and a PyTorch loop, without TensorFlow:
tests/support/backends_trainer.py
run in .venv-backends (``make backends``, which ``make test`` builds first)."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import subprocess

import pytest
from conftest import one_file_of_tiny_videos
from paths import REPO

import h5feed

ROOT = REPO
PYTHON = ROOT / ".venv-backends" / "bin" / "python"
WHEEL = "/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
VIDEOS = 17
_RUN_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return one_file_of_tiny_videos(tmp_path_factory.mktemp("backends"), VIDEOS)


def run(mode: str, data: pathlib.Path, out: pathlib.Path, **env: str) -> dict:
    """The script's JSON; a missing venv fails with what to do (never a silent skip)."""
    if not PYTHON.exists():
        torch = WHEEL if os.path.exists(WHEEL) else f"PyPI (no CPU wheel at {WHEEL})"
        pytest.fail(f"{PYTHON} is missing: run `make backends` (torch from {torch})")
    result = out / f"{mode}.json"
    proc = subprocess.run(
        [
            str(PYTHON),
            str(ROOT / "tests" / "support" / "backends_trainer.py"),
            mode,
            str(data),
            str(result),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=_RUN_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return {"stdout": proc.stdout, **json.loads(result.read_text())}


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_keras_fit_without_tensorflow(
    backend: str, data: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    result = run("keras", data, tmp_path, KERAS_BACKEND=backend)
    assert result["backend"] == backend
    assert result["tensorflow_importable"] is False
    assert result["length"] == 5  # ceil(17 / 4): Keras knows the step count...
    assert "5/5" in result["stdout"]  # ...and shows it
    assert result["steps"] == [5, 5]
    by_epoch: dict[int, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for keras_epoch, feed_epoch, sample in result["taken"]:
        assert keras_epoch == feed_epoch, "a Keras epoch took a batch of another h5feed epoch"
        by_epoch[keras_epoch][sample] += 1
    assert by_epoch == {e: collections.Counter(range(VIDEOS)) for e in (0, 1)}


def test_torch_loop_without_a_copy(data: pathlib.Path, tmp_path: pathlib.Path) -> None:
    result = run("torch", data, tmp_path)
    assert result["tensorflow_importable"] is False
    assert result["same_memory"] is True and result["is_tensor"] is True
    assert result["shape"] == [4, 2, 16, 16, 3]
    assert result["kinds"] == [
        "epoch:Tensor:torch.int64",
        "file:ndarray:object",  # strings stay NumPy
        "frames:Tensor:torch.uint8",
        "label:Tensor:torch.int64",
        "sample:Tensor:torch.int64",
    ]
    assert result["warnings"] == []  # read-only buffers: no warning per batch
    counts = collections.Counter(map(tuple, result["rows"]))
    assert counts == collections.Counter((e, s) for e in (0, 1) for s in range(VIDEOS))
    assert "pin_memory=True needs CUDA" in result["pin_error"]


def test_keras_batches_refuses_strings_and_fixed_arguments() -> None:
    with pytest.raises(ValueError, match="'file' holds strings"):
        h5feed.keras_batches("x", x=("frames", "file"))
    with pytest.raises(ValueError, match="unknown key 'nope'"):
        h5feed.keras_batches("x", y="nope")
    with pytest.raises(TypeError, match="sets epochs itself"):
        h5feed.keras_batches("x", epochs=3)
