"""``h5feed bench soak``: full rate for a while with a local worker SIGKILLed now and then;
the trainer's and the workers' memory (RSS) and open descriptors over time (see
``h5feed bench soak --help``).

Guarantees: each epoch's samples are checked to arrive exactly once as soon as the epoch is
complete (then dropped, so the check itself does not grow), and every kill but the last must
be answered by a replacement; either failure ends the run with ``AssertionError``. Growth is
reported, not judged.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import signal
import tempfile
import time
from typing import Any

import h5feed
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

#: 8 files x 24 videos of 16..48 frames, 128x160: decoding costs what real clips cost.
DATA = SampleSpec(
    files=8, videos_per_file=24, min_frames=16, max_frames=48, height=128, width=160, seed=3
)


def rss_and_fds(pid: int) -> tuple[int, int]:
    """(resident bytes, open descriptors) of process ``pid`` now; (0, 0) if it is gone."""
    try:
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
        rss = next(
            int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS")
        )
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return 0, 0


def soak(
    files: list[pathlib.Path], seconds: float, kill_every_s: float, sample_every_s: float, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    feed = h5feed.batches(
        files, clip_len=8, resize=(112, 112), batch_size=8, workers=2, epochs=None, seed=seed,
        max_restarts=1000,
    )  # fmt: skip
    samples_per_epoch = DATA.files * DATA.videos_per_file
    epochs: dict[int, list[int]] = {}  # the epochs not yet complete (checked, then dropped)
    checked = 0
    samples: list[dict[str, Any]] = []
    kills = 0
    began = time.monotonic()
    next_kill, next_sample = began + kill_every_s, began
    clips = 0
    with feed.stream() as stream:
        for batch in stream:
            epoch = int(batch["epoch"][0])
            epochs.setdefault(epoch, []).extend(batch["sample"].tolist())
            for done in [e for e in epochs if e < epoch]:  # checked as soon as complete, and
                check_epoch(done, epochs.pop(done), samples_per_epoch)  # dropped: no growth
                checked += 1
            clips += len(batch["sample"])
            now = time.monotonic()
            if now >= next_sample:
                next_sample += sample_every_s
                trainer = rss_and_fds(os.getpid())
                workers = [rss_and_fds(pid) for pid in stream.worker_pids]
                samples.append({
                    "t_s": round(now - began, 1),
                    "clips": clips,
                    "trainer_rss_mb": round(trainer[0] / 2**20, 1),
                    "trainer_fds": trainer[1],
                    "worker_rss_mb": [round(w[0] / 2**20, 1) for w in workers],
                    "worker_fds": [w[1] for w in workers],
                    "kills": kills,
                    "replaced": stream.stats()["workers_replaced"],
                })  # fmt: skip
                print(json.dumps(samples[-1]), flush=True)
            if now >= next_kill:
                next_kill += kill_every_s
                os.kill(rng.choice(stream.worker_pids), signal.SIGKILL)
                kills += 1
            if now - began >= seconds:
                break
        stats = stream.stats()
    if stats["workers_replaced"] < kills - 1:  # the last kill may land after the last batch
        raise AssertionError(f"{kills} kills, {stats['workers_replaced']} replacements")
    return {
        "seconds": round(time.monotonic() - began, 1),
        "kills": kills,
        "workers_replaced": stats["workers_replaced"],
        "epochs_checked_exactly_once": checked,
        "clips_per_s": round(clips / (time.monotonic() - began), 1),
        "samples": samples,
    }


def check_epoch(epoch: int, samples: list[int], expected: int) -> None:
    if sorted(samples) != list(range(expected)):
        raise AssertionError(f"epoch {epoch}: samples lost or repeated under kills")


def growth(samples: list[dict[str, Any]], key: str, warmup_s: float) -> float:
    """Relative growth of ``key`` from the first sample after warm-up to the last one."""
    after = [s for s in samples if s["t_s"] >= warmup_s]
    if len(after) < 2 or not after[0][key]:
        return 0.0
    return float((after[-1][key] - after[0][key]) / after[0][key])


def run(args: argparse.Namespace) -> int:
    """The soak with ``args``; prints a summary line, writes ``args.json`` when given."""
    with tempfile.TemporaryDirectory(prefix="h5feed-soak-") as directory:
        files = make_sample_dataset(directory, DATA)
        result = soak(files, args.minutes * 60, args.kill_every, args.sample_every, args.seed)
    warmup = min(args.warmup, args.minutes * 60 / 2)
    result["warmup_s"] = warmup
    result["trainer_rss_growth"] = round(growth(result["samples"], "trainer_rss_mb", warmup), 4)
    result["trainer_fds_growth"] = round(growth(result["samples"], "trainer_fds", warmup), 4)
    print(
        f"{result['seconds']} s, {result['kills']} kills, {result['workers_replaced']} "
        f"replaced, {result['epochs_checked_exactly_once']} epochs exactly once, "
        f"{result['clips_per_s']} clips/s; after {warmup:g} s warm-up: trainer RSS "
        f"{result['trainer_rss_growth']:+.1%}, trainer fds {result['trainer_fds_growth']:+.1%}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0
