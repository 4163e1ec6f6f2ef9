"""``h5feed bench soak``: full rate for a while with a local worker SIGKILLed now and then;
the trainer's and the workers' memory (RSS) and open descriptors over time (see
``h5feed bench soak --help``). ``--storage s3`` reads the same files as ``s3://`` URLs from
moto's S3 server on loopback, in this process (:func:`h5feed.bench.object_storage.moto_bucket`),
through :class:`h5feed.bench.s3_proxy.FaultProxy`, which answers every ``--fault-every``-th
request 503 SlowDown, resets the connection of every ``--reset-every``-th, cuts every
``--truncate-every``-th ranged GET short and delays each request by ``--latency-ms``:
h5feed's own retries run all along, not only its happy path.

Guarantees: each epoch's samples are checked to arrive exactly once as soon as the epoch is
complete (then dropped, so the check itself does not grow), and every kill but the last must
be answered by a replacement; either failure ends the run with ``AssertionError``. So does a
hang: no batch for ``--hang-after`` seconds (:func:`hang_guard`). The stream's own
``unit_timeout_s`` is set to half of that, so a worker that stops answering is killed and
replaced by the stream first (counted in ``workers_lost_without_a_kill``), and the guard
catches what the stream does not bound (the trainer's own thread stuck). Growth is reported,
not judged.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import math
import os
import pathlib
import random
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import h5feed
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

#: 8 files x 24 videos of 16..48 frames, 128x160: decoding costs what real clips cost.
DATA = SampleSpec(
    files=8, videos_per_file=24, min_frames=16, max_frames=48, height=128, width=160, seed=3
)

#: Where the guard writes the stacks: the process's own stderr, even under a capture that
#: replaced ``sys.stderr`` with an object without a descriptor.
_STDERR_FD = 2


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


@contextlib.contextmanager
def hang_guard(limit_s: float) -> Iterator[Callable[[], None]]:
    """Yields ``arm()``, to call at each batch: if ``limit_s`` seconds pass without one, the
    main thread gets ``AssertionError`` naming how long it waited, after every thread's stack
    is written to stderr (where it hangs). A SIGALRM timer (``setitimer``): its handler runs
    in the main thread, so the guard is entered there; the handler and a timer already set
    (pytest-timeout's) are restored on exit. Should the main thread never run Python again
    (a deadlock holding the GIL), faulthandler's own thread writes the stacks and ends the
    process (exit status 1) 50 to 60 s later: a hang never outlives the guard by more."""
    waited = {"since": time.monotonic(), "backstop": -math.inf}

    def expired(signum: int, frame: FrameType | None) -> None:
        faulthandler.dump_traceback(_STDERR_FD, all_threads=True)
        raise AssertionError(
            f"no batch for {time.monotonic() - waited['since']:.1f} s (the soak's hang guard, "
            f"--hang-after {limit_s:g})"
        )

    def arm() -> None:
        now = waited["since"] = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, limit_s)
        if now - waited["backstop"] > 10:  # not at every batch: each call starts a thread
            faulthandler.dump_traceback_later(limit_s + 60, exit=True, file=_STDERR_FD)
            waited["backstop"] = now

    began = time.monotonic()
    previous = signal.signal(signal.SIGALRM, expired)
    outer, interval = signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        arm()
        yield arm
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, previous)
        if outer > 0:
            left = max(outer - (time.monotonic() - began), 0.001)
            signal.setitimer(signal.ITIMER_REAL, left, interval)


def soak(
    files: str | list[pathlib.Path],
    seconds: float,
    kill_every_s: float,
    sample_every_s: float,
    seed: int,
    hang_after_s: float = 120.0,
) -> dict[str, Any]:
    """Soak ``files`` (paths or an ``s3://`` glob) for ``seconds``: see the module's docstring."""
    rng = random.Random(seed)
    feed = h5feed.batches(
        files, clip_len=8, resize=(112, 112), batch_size=8, workers=2, epochs=None, seed=seed,
        max_restarts=1000, unit_timeout_s=hang_after_s / 2,
    )  # fmt: skip
    samples_per_epoch = DATA.files * DATA.videos_per_file
    epochs: dict[int, list[int]] = {}  # the epochs not yet complete (checked, then dropped)
    checked = 0
    samples: list[dict[str, Any]] = []
    kills = 0
    killed: set[int] = set()
    known: set[int] = set()  # the worker pids of the latest batch
    lost_unkilled = 0  # workers gone that were not killed here (stuck, or dead on their own)
    began = time.monotonic()
    next_kill, next_sample = began + kill_every_s, began
    clips = 0
    with hang_guard(hang_after_s) as batch_arrived, feed.stream() as stream:
        for batch in stream:
            batch_arrived()
            pids = set(stream.worker_pids)
            lost_unkilled += len(known - pids - killed)
            known = pids
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
                stats = stream.stats()
                samples.append({
                    "t_s": round(now - began, 1),
                    "clips": clips,
                    "trainer_rss_mb": round(trainer[0] / 2**20, 1),
                    "trainer_fds": trainer[1],
                    "worker_rss_mb": [round(w[0] / 2**20, 1) for w in workers],
                    "worker_fds": [w[1] for w in workers],
                    "worker_object_requests": [w["object_requests"] for w in stats["workers"]],
                    "kills": kills,
                    "replaced": stats["workers_replaced"],
                })  # fmt: skip
                print(json.dumps(samples[-1]), flush=True)
            if now >= next_kill:
                next_kill += kill_every_s
                victim = rng.choice(stream.worker_pids)
                os.kill(victim, signal.SIGKILL)
                killed.add(victim)
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
        # Workers lost without a kill (stuck past unit_timeout_s, or dead on their own):
        "workers_lost_without_a_kill": lost_unkilled,
        "peers_lost": stats["peers_lost"],
        "units_remade": stats["units_remade"],
        "epochs_checked_exactly_once": checked,
        "clips_per_s": round(clips / (time.monotonic() - began), 1),
        "hang_after_s": hang_after_s,
        # The live workers' own counts at the end (a killed worker's die with it):
        "worker_object_requests": [w["object_requests"] for w in stats["workers"]],
        "worker_object_retries": [w["object_retries"] for w in stats["workers"]],
        "samples": samples,
    }


def soak_s3(files: list[pathlib.Path], args: argparse.Namespace) -> dict[str, Any]:
    """:func:`soak` over ``files`` uploaded to moto's server, read through the fault proxy;
    the proxy's counts (requests, 503s, bodies cut short, bytes) go in the result's ``"s3"``."""
    from h5feed.bench.object_storage import DATA_URL, moto_bucket
    from h5feed.bench.s3_proxy import FaultProxy
    from h5feed.common import storage_config

    with moto_bucket([str(f) for f in files]) as endpoint:
        proxy = FaultProxy(
            endpoint, every=args.fault_every, delay_s=args.latency_ms / 1000,
            truncate=args.truncate_every, reset=args.reset_every,
        )  # fmt: skip
        block = args.block_kib << 10  # small blocks: the files are read from the server all along
        os.environ[storage_config.STORAGE_ENV] = json.dumps(
            {"endpoint_url": proxy.endpoint, "default_block_size": block}
        )
        try:
            result = soak(DATA_URL, *_timing(args))
        finally:
            proxy.stop()
    result["s3"] = {
        "url": DATA_URL, "block_bytes": block, "latency_ms": args.latency_ms,
        "fault_every": args.fault_every, "truncate_every": args.truncate_every,
        "reset_every": args.reset_every, "requests": proxy.requests,
        "answered_503": proxy.faults, "resets": proxy.resets,
        "bodies_cut_short": proxy.truncated, "body_bytes": proxy.body_bytes,
    }  # fmt: skip
    return result


def _timing(args: argparse.Namespace) -> tuple[float, float, float, int, float]:
    """:func:`soak`'s arguments after ``files``, from the command line's."""
    return args.minutes * 60, args.kill_every, args.sample_every, args.seed, args.hang_after


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
        result = soak_s3(files, args) if args.storage == "s3" else soak(files, *_timing(args))
    result["storage"] = args.storage
    warmup = min(args.warmup, args.minutes * 60 / 2)
    result["warmup_s"] = warmup
    result["trainer_rss_growth"] = round(growth(result["samples"], "trainer_rss_mb", warmup), 4)
    result["trainer_fds_growth"] = round(growth(result["samples"], "trainer_fds", warmup), 4)
    print(
        f"{result['seconds']} s, {result['kills']} kills, {result['workers_replaced']} "
        f"replaced, {result['epochs_checked_exactly_once']} epochs exactly once, "
        f"{result['clips_per_s']} clips/s; after {warmup:g} s warm-up: trainer RSS "
        f"{result['trainer_rss_growth']:+.1%}, trainer fds {result['trainer_fds_growth']:+.1%}; "
        f"{result['workers_lost_without_a_kill']} workers lost without a kill"
    )
    if "s3" in result:
        s3 = result["s3"]
        print(
            f"s3: {s3['requests']} requests through the proxy ({s3['answered_503']} answered "
            f"503, {s3['resets']} reset, {s3['bodies_cut_short']} bodies cut short); the live "
            f"workers counted {sum(result['worker_object_requests'])} requests, "
            f"{sum(result['worker_object_retries'])} retries of their own"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0
