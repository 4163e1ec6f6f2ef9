"""The seeding of a user's randomness inside a source job (issue 22), in this process: the
job as a worker runs it, without sockets (``tests/system/test_sources.py`` runs it in workers)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import types
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from paths import REPO, SUPPORT

from h5feed.common.errors import SourceError
from h5feed.common.protocol import messages
from h5feed.producer.sources import SourceJob
from h5feed.producer.worker import seeding
from h5feed.producer.worker.code_policy import TRUSTED

ROOT = REPO

TESTS = SUPPORT


def job(
    path: str, args: Mapping[str, Any], worker: int = 0, workers: int = 1, seed: int = 0,
    batched: bool = False,
) -> SourceJob:  # fmt: skip
    """A loaded source job with its probed spec, as after the handshake."""
    source = messages.Source(
        "job", path, args, (str(TESTS),), worker, workers, seed, 0, None, batched
    )
    loaded = SourceJob(source, True, TRUSTED)
    loaded.set_spec(loaded.info().spec)
    return loaded


def pull(loaded: SourceJob, count: int, pass_: int) -> list[tuple[float, float]]:
    data, _nbytes = loaded.produce(messages.Pull("job", 0, 0, pass_, count, pass_))
    values = [a for name, a in sorted(data.arrays.items()) if a.dtype == np.float64]
    return list(zip(*(v.tolist() for v in values), strict=True))


def test_a_generator_pass_is_seeded_from_seed_epoch_and_shard() -> None:
    first = pull(job("user_sources:noisy", {"n": 8}, 0, 2, seed=1), 4, 0)
    assert first == pull(job("user_sources:noisy", {"n": 8}, 0, 2, seed=1), 4, 0)
    assert first != pull(job("user_sources:noisy", {"n": 8}, 1, 2, seed=1), 4, 0)  # shard
    assert first != pull(job("user_sources:noisy", {"n": 8}, 0, 2, seed=2), 4, 0)  # seed
    again = job("user_sources:noisy", {"n": 8}, 0, 2, seed=1)
    assert pull(again, 4, 0) == first
    assert pull(again, 4, 1) != first  # the next pass (epoch 1) draws anew
    assert len({v for pair in first for v in pair}) == 8  # and each element its own draws


def test_a_map_item_is_the_same_whichever_worker_and_order_fetches_it() -> None:
    def item(loaded: SourceJob, index: int, epoch: int) -> list[float]:
        data, _nbytes = loaded.produce(messages.Items("job", 0, 0, epoch, (index,)))
        return [v for a in data.arrays.values() if a.dtype == np.float32 for v in a.ravel()]

    a = job("user_sources:Augmented", {"n": 6}, 0, 3, seed=5)
    b = job("user_sources:Augmented", {"n": 6}, 2, 3, seed=5)
    in_order = [item(a, i, 0) for i in range(6)]
    backwards = [item(b, i, 0) for i in reversed(range(6))][::-1]
    assert in_order == backwards
    assert item(a, 3, 1) != in_order[3]  # another epoch, another augmentation


def test_a_batch_with_a_single_value_field_is_an_error_naming_it() -> None:
    with pytest.raises(SourceError, match=r"field '1' is a single value, not a batch"):
        job("user_sources:single_label_batches", {}, batched=True)


def test_seeding_never_imports_torch() -> None:
    code = (
        "import sys; from h5feed.producer.worker import seeding; seeding.seed_for(1, "
        "seeding.Purpose.ITEM, 0, 3); print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "False"


def test_an_imported_torch_is_seeded_with_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch is not installed here: a module under its name in ``sys.modules`` stands for an
    imported one (``seed_globals`` only looks it up there and calls ``manual_seed``)."""
    seeds: list[int] = []
    stand_in = types.ModuleType("torch")
    stand_in.manual_seed = seeds.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", stand_in)
    seeding.seed_for(3, seeding.Purpose.ITEM, 0, 7)
    first = (random.random(), np.random.random())
    seeding.seed_for(3, seeding.Purpose.ITEM, 0, 7)
    assert (random.random(), np.random.random()) == first
    assert seeds == [seeding.derive(3, seeding.Purpose.ITEM, 0, 7)] * 2


_REAL_TORCH_SEEDED = """
import torch
from h5feed.producer.worker import seeding
seeding.seed_for(3, seeding.Purpose.ITEM, 0, 7)
first = torch.rand(3)
seeding.seed_for(3, seeding.Purpose.ITEM, 0, 7)
again = torch.rand(3)
seeding.seed_for(3, seeding.Purpose.ITEM, 0, 8)
print(bool(torch.equal(again, first)), bool(torch.equal(torch.rand(3), first)))
"""


def test_a_real_torch_is_seeded() -> None:
    """The real torch (in .venv-backends, which ``make test`` builds: the main venv has none):
    the same (seed, purpose, epoch, item) gives the same draws, another item others."""
    python = ROOT / ".venv-backends" / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: run `make backends`")
    done = subprocess.run(
        [str(python), "-c", _REAL_TORCH_SEEDED],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "False"]


def test_a_keras_batch_of_an_epoch_the_copy_moved_past_is_made_as_it_was_then() -> None:
    """A unit of epoch 0 handed over after this copy began epoch 1: a new copy, moved to
    epoch 0 as every copy is, makes it (not the reshuffled epoch-1 state)."""
    pytest.importorskip("keras")
    loaded = job("user_keras:ShuffledRows", {"rows": 12, "batch": 4}, seed=2)

    def rows(epoch: int, batch: int) -> list[int]:
        data, _nbytes = loaded.produce(messages.Items("job", 0, 0, epoch, (batch,)))
        return data.arrays["1"].ravel().tolist()  # y: the rows (leaf 1; "1.shape" beside)

    before = [rows(0, b) for b in range(3)]
    after = [rows(1, b) for b in range(3)]
    assert before != after  # on_epoch_end reshuffled
    assert [rows(0, b) for b in range(3)] == before
    assert [rows(1, b) for b in range(3)] == after
