"""What a trainer's local workers do with SIGTERM (issue 38, item 9): a cluster's preemption
signals every process of the job at once (SLURM; ``killpg``), and a worker that left then
would starve the trainer's last steps before its emergency checkpoint. A local worker takes
SIGTERM from its trainer only (``h5feed/producer/worker/lifetime.py`` guarantee 4): another sender's
is ignored (the worker keeps serving, goes when the trainer does); the trainer's own still
makes it leave after the unit in hand (``test_failures.py`` sends it from the trainer too).
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import time

from conftest import wait_until_gone

import h5feed

CLIP = {"clip_len": 2, "resize": (16, 16), "shuffle": True, "start_timeout_s": 60.0}


def _sigterm_from_another_process(pid: int) -> None:
    """SIGTERM ``pid`` from a process that is not its parent (as slurmstepd would)."""
    subprocess.run(["kill", "-TERM", str(pid)], check=True, timeout=30)


def test_a_local_worker_ignores_a_sigterm_its_trainer_did_not_send(
    small_dataset: list[pathlib.Path],
) -> None:
    """Both workers SIGTERMed by another process mid-epoch: neither leaves, nothing is
    replaced, the epoch arrives exactly once from the same two processes."""
    feed = h5feed.batches(small_dataset, **CLIP, batch_size=2, workers=2, seed=4)
    samples: list[int] = []
    with feed.stream() as stream:
        for i, batch in enumerate(stream):
            samples += batch["sample"].tolist()
            if i == 0:
                pids = list(stream.worker_pids)
                for pid in pids:
                    _sigterm_from_another_process(pid)
                time.sleep(1.0)  # a worker that obeyed would be gone by now
                assert stream.worker_pids == pids
        stats = stream.stats()
    del feed, stream  # its workers are kept for the next iteration while it lives
    assert sorted(samples) == list(range(24))
    assert stats["workers_replaced"] == 0 and stats["peers_lost"] == 0
    assert wait_until_gone(pids) == []  # and they went with the iteration


def test_a_local_worker_still_leaves_on_its_trainers_sigterm(
    small_dataset: list[pathlib.Path],
) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, batch_size=2, workers=2, seed=4)
    samples: list[int] = []
    with feed.stream() as stream:
        for i, batch in enumerate(stream):
            samples += batch["sample"].tolist()
            if i == 0:
                first = list(stream.worker_pids)
                os.kill(first[1], signal.SIGTERM)  # from the trainer: it says BYE, exits 0
        stats = stream.stats()
    del feed, stream
    assert sorted(samples) == list(range(24))
    assert stats["workers_replaced"] == 1
    assert wait_until_gone(first) == []
