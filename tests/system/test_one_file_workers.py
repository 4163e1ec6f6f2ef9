"""Work follows cores, not files, through real processes: 1 file on 3 local workers and 2
files on 5, over 2 epochs, with a local worker SIGKILLed mid-epoch (replaced) and a remote
producer joining mid-epoch. Every sample exactly once per epoch, every worker that is
connected at the end delivered clips, and the batches are those of a 1-worker run, byte for
byte.

Nothing depends on timing luck: the kill and the start of the remote producer are triggered
by batches received, the epoch is held open (bounded wait) until the producer has joined, and
every wait is bounded."""

from __future__ import annotations

import collections
import contextlib
import os
import pathlib
import signal
import subprocess
import time
from typing import Any

import numpy as np
import pytest
from ports import free_port
from remote_producers import start_producer

import h5feed
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

CLIP: dict[str, Any] = {"clip_len": 2, "resize": (24, 32), "clips_per_video": 2}


def dataset(root: pathlib.Path, files: int) -> list[str]:
    """``files`` files of 24 videos (in all) under ``root``, as paths relative to it."""
    spec = SampleSpec(
        files=files, videos_per_file=24 // files, min_frames=4, max_frames=8, height=24,
        width=32, seed=5,
    )  # fmt: skip
    return [p.name for p in make_sample_dataset(root, spec)]


def collect(feed: Any) -> list[dict[str, np.ndarray]]:
    return [{k: np.array(v) for k, v in batch.items()} for batch in feed]


@pytest.mark.parametrize(("files", "workers"), [(1, 3), (2, 5)])
def test_every_worker_reads_a_share_through_a_kill_and_a_join(
    tmp_path: pathlib.Path, files: int, workers: int
) -> None:
    names = dataset(tmp_path, files)
    options: dict[str, Any] = {
        **CLIP, "data_root": str(tmp_path), "batch_size": 2, "epochs": 2, "seed": 13,
        "index_cache": False,
    }  # fmt: skip
    expected = collect(h5feed.batches(names, workers=1, **options))
    port = free_port()
    feed = h5feed.batches(
        names, workers=workers, listen=f"tcp://127.0.0.1:{port}",
        **options,
    )  # fmt: skip
    late: subprocess.Popen[str] | None = None
    got: list[dict[str, np.ndarray]] = []
    killed: int | None = None
    try:
        with feed.stream() as stream:
            for i, batch in enumerate(stream):
                got.append({k: np.array(v) for k, v in batch.items()})
                if i == 4:  # mid-epoch, units in flight at the workers
                    killed = stream.worker_pids[0]
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(killed, signal.SIGKILL)
                if i == 5:
                    late = start_producer(port, tmp_path, "late")
                if i == 6:  # hold the epoch open until "late" has joined (said hello)
                    deadline = time.monotonic() + 60
                    while not any(w["name"].startswith("late") for w in stream.stats()["workers"]):
                        assert time.monotonic() < deadline, "the late producer never joined"
                        time.sleep(0.1)
            stats = stream.stats()
    finally:
        feed.close()
        if late is not None and late.poll() is None:
            late.kill()
            late.communicate(timeout=10)
    assert killed is not None and stats["workers_replaced"] >= 1
    per_epoch: dict[int, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for batch in got:
        per_epoch[int(batch["epoch"][0])].update(batch["sample"].tolist())
    assert sorted(per_epoch) == [0, 1]
    for epoch, counts in per_epoch.items():
        assert sorted(counts) == list(range(48)) and set(counts.values()) == {1}, epoch
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected, strict=True):
        assert mine.keys() == theirs.keys()
        for key in mine:
            assert np.array_equal(mine[key], theirs[key]), key
    delivered = {w["name"]: w["clips"] for w in stats["workers"]}
    shown = str(sorted((w["name"], w["files"], w["clips"], w["local"]) for w in stats["workers"]))
    assert any(name.startswith("late") for name in delivered), shown
    assert len(delivered) >= workers + 1 and all(c > 0 for c in delivered.values()), shown
