"""A worker's allocator keeps what it frees for the next frame
(h5feed/producer/worker/allocator.py): counted in page faults, not timed. End to end through
a worker's transform: tests/unit/producer/test_transform.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from paths import SUPPORT

from h5feed.producer.worker.allocator import OPERATOR_VARIABLES, keep_freed_memory

_RUN_TIMEOUT_S = 60
#: Five clips' worth of a worker's allocations fault about 4,400 pages in when the heap's top
#: is given back after each clip (glibc's defaults, in a fresh interpreter).
FEW_FAULTS = 50


def faults_in_a_fresh_process(environ: dict[str, str]) -> tuple[bool, int]:
    """What :func:`keep_freed_memory` returns in a fresh interpreter with ``environ``, and the
    page faults of :func:`churn_faults` after it."""
    code = (
        "import os; from h5feed.producer.worker.allocator import keep_freed_memory; "
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
    assert keep_freed_memory({name: "131072"}) is False  # returns before touching anything
