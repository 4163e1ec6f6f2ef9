"""Users' PyTorch datasets and Keras PyDatasets, unchanged, through h5feed: torch tensors as
element fields, ``torch_batches(source=)`` and ``keras_batches(source=)`` on Keras over JAX
and PyTorch. Their scripts (tests/support/backends_sources.py, over tests/support/user_torch.py)
run in
.venv-backends (``make backends``, which ``make test`` builds first: torch, keras, jax and
h5feed without TensorFlow), as tests/system/test_backends.py's do."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import subprocess
from typing import Any

import pytest
from paths import REPO

ROOT = REPO
PYTHON = ROOT / ".venv-backends" / "bin" / "python"
_RUN_TIMEOUT_S = 300
TORCH_MODES = ("numpy_tensors", "torch_tuple", "torch_dict", "ragged", "odd", "meta")
KERAS_MODES = ("keras_sequence", "keras_torch_dataset")
# One script runs every mode (torch imported in the trainer and in each worker: ~10 s each
# on a loaded 2-core machine), bounded by _RUN_TIMEOUT_S, not by the 120 s default.
pytestmark = pytest.mark.timeout(_RUN_TIMEOUT_S + 60)


def run(modes: tuple[str, ...], out: pathlib.Path, **env: str) -> dict[str, Any]:
    """The script's JSON by mode; a missing venv fails with what to do (never a skip)."""
    if not PYTHON.exists():
        pytest.fail(f"{PYTHON} is missing: run `make backends`")
    result = out / "result.json"
    proc = subprocess.run(
        [
            str(PYTHON),
            str(ROOT / "tests" / "support" / "backends_sources.py"),
            ",".join(modes),
            str(result),
        ],
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests' / 'support'}", **env},
        capture_output=True,
        text=True,
        timeout=_RUN_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    results: dict[str, Any] = json.loads(result.read_text())
    assert results.pop("tensorflow_importable") is False
    return results


@pytest.fixture(scope="module")
def torch_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every torch mode, in one process of .venv-backends (one torch import)."""
    return run(TORCH_MODES, tmp_path_factory.mktemp("torch_sources"))


def test_a_torch_dataset_of_tensors_through_torchvision_style_transforms(
    torch_runs: dict[str, Any],
) -> None:
    result = torch_runs["numpy_tensors"]
    assert result["seen"] == list(range(10))  # each item once
    assert result["exact"] is True  # the clips as ToTensor + Normalize made them, [C, T, H, W]
    assert result["dtypes"] == ["ndarray:float32:[3, 3, 4, 5]"]


def test_torch_batches_of_a_source_with_tuple_items(torch_runs: dict[str, Any]) -> None:
    result = torch_runs["torch_tuple"]
    assert result["kinds"] == ["tuple:Tensor:torch.float32"]
    assert result["labels"] == [i % 3 for i in range(10)]
    assert result["equal"] is True


def test_torch_batches_of_a_source_with_dict_items_and_strings(
    torch_runs: dict[str, Any],
) -> None:
    first, second = torch_runs["torch_dict"]["iterations"]
    assert first["names"] == [f"video-{i}" for i in range(6)]
    assert first["indices"] == list(range(6))  # a 0-d tensor per item: int64 [B]
    assert first["kinds"] == [
        "clip:Tensor", "index:Tensor", "name:ndarray", "threads:Tensor",
    ]  # fmt: skip
    assert second["names"] == first["names"] and second["indices"] == first["indices"]


def test_a_worker_that_imported_torch_runs_one_torch_thread(torch_runs: dict[str, Any]) -> None:
    # user_torch sets 4 threads at import: the workers set 1 after it, as DataLoader's do
    for iteration in torch_runs["torch_dict"]["iterations"]:
        assert iteration["threads"] == [1]


def test_a_source_feed_keeps_its_workers_across_iterations(torch_runs: dict[str, Any]) -> None:
    first, second = torch_runs["torch_dict"]["iterations"]
    assert len(first["pids"]) == 2
    assert second["pids"] == first["pids"]  # torch imported once per worker, not per epoch


def test_ragged_on_the_time_dimension_of_channels_first_clips(
    torch_runs: dict[str, Any],
) -> None:
    result = torch_runs["ragged"]
    assert result["axis"] == 1
    assert result["shapes"] == [[3, 1 + i % 3, 2, 2] for i in range(6)]
    assert result["values"] == [float(i) for i in range(6)]  # no padding in a row


def test_bfloat16_tensors_become_float32_exactly(torch_runs: dict[str, Any]) -> None:
    result = torch_runs["odd"]["bfloat16"]
    assert result["dtype"] == "float32"
    assert result["values"] == [[i + 0.5, -float(i)] for i in range(4)]


def test_tensors_that_require_grad_are_detached(torch_runs: dict[str, Any]) -> None:
    assert torch_runs["odd"]["grad"] == {"dtype": "float32", "values": [[0.0], [2.0], [4.0], [6.0]]}


def test_a_tensor_outside_host_memory_is_refused_naming_the_fix(
    torch_runs: dict[str, Any],
) -> None:
    error = torch_runs["meta"]["error"]
    assert error.startswith("WorkerError")
    assert "a torch tensor on device 'meta'" in error and ".cpu()" in error
    assert "source 'user_torch:Odd', items [0, 1, 2, 3]" in error


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_keras_batches_of_a_users_pydataset_and_torch_dataset(
    backend: str, tmp_path: pathlib.Path
) -> None:
    results = run(KERAS_MODES, tmp_path, KERAS_BACKEND=backend)
    for mode, rows in (("keras_sequence", 20), ("keras_torch_dataset", 18)):
        result = results[mode]
        assert result["backend"] == backend
        assert result["length"] == 5  # 5 batches of the Sequence; ceil(18 / 4) of the dataset
        assert result["steps"] == [5, 5]
        everything = collections.Counter(range(rows))
        assert {e: dict(c) for e, c in result["taken"].items()} == {
            "0": dict(everything), "1": dict(everything),
        }, mode  # fmt: skip
