"""A feed over real processes through a local worker SIGKILLed mid-epoch (replaced) and a remote
producer joining mid-epoch, and the checks of what it gave: shared by the tests that work
follows cores, not files (tests/system/test_one_file_workers.py, test_one_file_layouts.py).

Nothing depends on timing luck: the kill and the start of the remote producer are triggered
by batches received, the epoch is held open (bounded wait) until the producer has joined, and
every wait is bounded."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import pathlib
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from ports import free_port
from remote_producers import start_producer

import h5feed

#: The batch after which a local worker is killed, the producer "late" started, and the
#: epoch held until it has joined: mid-epoch, with units in flight at the workers.
KILL_AT, JOIN_AT, HOLD_AT = 4, 5, 6
JOIN_TIMEOUT_S = 60.0


@dataclasses.dataclass
class Run:
    """What a feed through a kill and a join gave."""

    batches: list[dict[str, np.ndarray]]
    stats: dict[str, Any]
    killed: int | None


def collect(feed: Any) -> list[dict[str, np.ndarray]]:
    return [{k: np.array(v) for k, v in batch.items()} for batch in feed]


def run_with_kill_and_join(
    names: Sequence[str], data_root: pathlib.Path, workers: int, options: dict[str, Any]
) -> Run:
    """``h5feed.batches(names, workers=workers, **options)`` (files relative to
    ``data_root``) to the end, with :data:`KILL_AT`, :data:`JOIN_AT` and :data:`HOLD_AT`."""
    port = free_port()
    feed = h5feed.batches(
        list(names), workers=workers, data_root=str(data_root),
        listen=f"tcp://127.0.0.1:{port}", **options,
    )  # fmt: skip
    late: subprocess.Popen[str] | None = None
    got: list[dict[str, np.ndarray]] = []
    killed: int | None = None
    try:
        with feed.stream() as stream:
            for i, batch in enumerate(stream):
                got.append({k: np.array(v) for k, v in batch.items()})
                if i == KILL_AT:
                    killed = stream.worker_pids[0]
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(killed, signal.SIGKILL)
                if i == JOIN_AT:
                    late = start_producer(port, data_root, "late")
                if i == HOLD_AT:  # hold the epoch open until "late" has joined (said hello)
                    deadline = time.monotonic() + JOIN_TIMEOUT_S
                    while not any(w["name"].startswith("late") for w in stream.stats()["workers"]):
                        assert time.monotonic() < deadline, "the late producer never joined"
                        time.sleep(0.1)
            stats = stream.stats()
    finally:
        feed.close()
        if late is not None and late.poll() is None:
            late.kill()
            late.communicate(timeout=10)
    return Run(got, stats, killed)


def check_kill_and_join(
    run: Run, expected: list[dict[str, np.ndarray]], samples: int, epochs: int, workers: int
) -> None:
    """Every sample (``samples`` per epoch) exactly once in each of ``epochs`` epochs, the
    batches those of the 1-worker run ``expected``, byte for byte, a local worker replaced,
    and every worker connected at the end (the ``workers`` local ones and "late") delivered
    clips and reads the dataset's one file or more."""
    assert run.killed is not None and run.stats["workers_replaced"] >= 1
    per_epoch: dict[int, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for batch in run.batches:
        per_epoch[int(batch["epoch"][0])].update(batch["sample"].tolist())
    assert sorted(per_epoch) == list(range(epochs))
    for epoch, counts in per_epoch.items():
        assert sorted(counts) == list(range(samples)) and set(counts.values()) == {1}, epoch
    assert len(run.batches) == len(expected)
    for mine, theirs in zip(run.batches, expected, strict=True):
        assert mine.keys() == theirs.keys()
        for key in mine:
            assert np.array_equal(mine[key], theirs[key]), key
    workers_seen = run.stats["workers"]
    shown = str(sorted((w["name"], w["files"], w["clips"], w["local"]) for w in workers_seen))
    assert any(w["name"].startswith("late") for w in workers_seen), shown
    assert len(workers_seen) >= workers + 1, shown
    assert all(w["clips"] > 0 and w["files"] >= 1 for w in workers_seen), shown
