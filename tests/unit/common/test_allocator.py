"""glibc's allocator keeps what a worker or a trainer frees for the next block of its size
(h5feed/common/system/allocator.py): counted in page faults, not timed. End to end through a
worker's transform: tests/unit/producer/test_transform.py; through a trainer: the last test
here."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from paths import SUPPORT
from sample_transforms import FEW_FAULTS

from h5feed.common.system.allocator import OPERATOR_VARIABLES

_RUN_TIMEOUT_S = 60


def faults_in_a_fresh_process(environ: dict[str, str]) -> tuple[bool, int]:
    """What :func:`keep_freed_memory` returns in a fresh interpreter with ``environ``, and the
    page faults of :func:`churn_faults` after it."""
    code = (
        "import os; from h5feed.common.system.allocator import keep_freed_memory; "
        "kept = keep_freed_memory(os.environ); "
        "from sample_transforms import churn_faults; print(kept, churn_faults())"
    )
    env = {**environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT), *sys.path])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=_RUN_TIMEOUT_S, check=True).stdout.split()  # fmt: skip
    return out[0] == "True", int(out[1])


def plain_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in OPERATOR_VARIABLES}


def test_freed_frames_are_reused_without_faulting_their_pages_in_again() -> None:
    kept, faults = faults_in_a_fresh_process(plain_environment())
    assert kept and faults < FEW_FAULTS


def test_an_operators_setting_is_kept_and_glibc_does_as_it_says() -> None:
    """A trim threshold of 128 KB from the environment: nothing is changed, so the heap's
    top is given back after each clip and faulted in again (what the setting saves)."""
    kept, faults = faults_in_a_fresh_process(
        {**plain_environment(), "MALLOC_TRIM_THRESHOLD_": "131072"}
    )
    assert not kept and faults > 4 * FEW_FAULTS


@pytest.mark.parametrize("name", OPERATOR_VARIABLES)
def test_every_way_of_setting_the_allocator_is_an_operators_choice(name: str) -> None:
    """In a fresh interpreter: the answer is kept for the process (a trainer's pytest worker
    may have asked already)."""
    kept, _faults = faults_in_a_fresh_process({**plain_environment(), name: "131072"})
    assert not kept


def test_a_trainers_own_large_arrays_reuse_their_pages(small_dataset: list[pathlib.Path]) -> None:
    """``tune_malloc`` (the default) in a trainer: a user's 2.7 MB arrays, made and dropped
    beside the batches, reuse pages (``M_TOP_PAD``, set here up to 0.2.0, turned glibc's
    dynamic threshold off: 822 page faults at each such array). Counted for the training
    thread alone, as the feed's receiving thread faults pages of its own meanwhile."""
    code = f"""
import os, resource, sys
import numpy as np
import h5feed
for name in {OPERATOR_VARIABLES!r}:
    os.environ.pop(name, None)
feed = h5feed.batches(sys.argv[1:], clip_len=2, resize=(24, 32), workers=1, epochs=1)
def step():
    frame = np.ones((720, 1280, 3), np.uint8)
    return float(frame.astype(np.float32)[0, 0, 0])
faults = []
for batch in feed:
    step()
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    step()
    faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
print(max(faults))
"""
    args = [sys.executable, "-c", code, *map(str, small_dataset)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=_RUN_TIMEOUT_S, check=True)
    assert int(out.stdout.split()[-1]) < FEW_FAULTS, out.stdout
