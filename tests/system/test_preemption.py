"""The preemption drill in the suite (issue 38, item 9): a Keras trainer with 2 local workers
and ``h5feed.BackupAndRestore(..., save_on_sigterm=True)``, SIGTERMed mid-epoch at a seeded
random step as SLURM sends it (to the whole process group, workers included) and as
Kubernetes does (to the trainer only), then restarted: the backup holds the step in hand,
every process is gone within the grace period, and the restarted run trains every sample of
each epoch exactly once against what the saved weights saw (``tools/preemption_drill.py``,
which runs 20 of these). Then :class:`~h5feed.consumer.trainers.preemption.StopSignal`'s
handler rules, in this process.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import random
import signal
import sys
import time
from types import ModuleType
from typing import Any

import pytest
from paths import REPO

from h5feed.consumer.trainers.preemption import StopSignal

pytest.importorskip("tensorflow")  # the tf extra is part of the test install: never skipped
ROOT = REPO
#: The drill (tools/preemption_drill.py) runs trainer scripts with their workers.
pytestmark = pytest.mark.processes


def _drill_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "preemption_drill", ROOT / "tools" / "preemption_drill.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["preemption_drill"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


DRILL = _drill_module()


@pytest.fixture(scope="module")
def drill_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return DRILL.prepare(tmp_path_factory.mktemp("drill-data"))  # type: ignore[no-any-return]


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("mode", "seed"), [("slurm", 1), ("k8s", 2)])
def test_a_trainer_sigtermed_mid_epoch_saves_the_step_in_hand_and_resumes_exactly_once(
    drill_files: list[str], tmp_path: pathlib.Path, mode: str, seed: int
) -> None:
    step = random.Random(seed).randrange(1, DRILL.EPOCHS * DRILL.LENGTH - 1)
    outcome = DRILL.drill(tmp_path / "run", drill_files, 0, mode, step)
    assert outcome.problems == [], f"{mode}, SIGTERM after step {step}"
    assert outcome.backup_written and outcome.exactly_once
    assert outcome.gone_s is not None and outcome.gone_s < DRILL.GRACE_S


# -- the handler's rules, in this process ---------------------------------------------------


def _wait(condition: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(condition())


def test_a_stop_signal_installs_nothing_until_armed_and_chains_the_previous_handler() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        stop = StopSignal()
        mine = signal.getsignal(signal.SIGTERM)
        assert mine is not stop._on_signal and not stop.requested  # nothing yet
        stop.arm()
        os.kill(os.getpid(), signal.SIGTERM)
        assert _wait(lambda: stop.requested)
        assert seen == []  # only noted: the save comes first, at the step boundary
        stop.finish()  # the previous handler back, and the signal passed on to it
        assert seen == [signal.SIGTERM] and signal.getsignal(signal.SIGTERM) is mine
        assert not stop.requested
        # A handler left behind (training raised before disarm) passes the signal on.
        stop.arm()
        stop._armed = False
        os.kill(os.getpid(), signal.SIGTERM)
        assert _wait(lambda: len(seen) == 2) and not stop.requested
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_stop_signal_outside_the_main_thread_is_refused_naming_why() -> None:
    import threading

    errors: list[BaseException] = []

    def arm() -> None:
        try:
            StopSignal().arm()
        except ValueError as exc:
            errors.append(exc)

    thread = threading.Thread(target=arm)
    thread.start()
    thread.join(timeout=10)
    assert len(errors) == 1 and "main thread" in str(errors[0])
