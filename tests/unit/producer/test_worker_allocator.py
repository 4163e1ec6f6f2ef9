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
#: Five clips' worth of a worker's allocations: about 590 faults with glibc's defaults.
FEW_FAULTS = 50


def faults_in_a_fresh_process(keep: bool, environ: dict[str, str]) -> int:
    code = (
        "import os, sys; from h5feed.producer.worker.allocator import keep_freed_memory; "
        f"kept = keep_freed_memory(os.environ) if {keep} else False; "
        "from sample_transforms import churn_faults; print(kept, churn_faults())"
    )
    env = {**environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT), *sys.path])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=_RUN_TIMEOUT_S, check=True).stdout.split()  # fmt: skip
    assert out[0] == str(keep)
    return int(out[1])


def plain_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in OPERATOR_VARIABLES}


def test_freed_frames_are_reused_without_faulting_their_pages_in_again() -> None:
    assert faults_in_a_fresh_process(True, plain_environment()) < FEW_FAULTS
    # What it saves: glibc's defaults give the pages back and fault them in at every frame.
    assert faults_in_a_fresh_process(False, plain_environment()) > 4 * FEW_FAULTS


@pytest.mark.parametrize("name", OPERATOR_VARIABLES)
def test_an_operators_allocator_setting_is_kept(name: str) -> None:
    assert keep_freed_memory({name: "131072"}) is False  # returns before touching anything
