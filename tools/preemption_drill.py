"""The preemption drill (issue 38, item 9): a Keras trainer with 2 local workers, SIGTERMed
mid-epoch at a random step, then restarted; does the backup hold the step in hand, is every
process gone within the grace period, and does the restarted run train every sample of each
epoch exactly once against what the saved weights saw?

``python tools/preemption_drill.py --runs 20 [--seed S] [--mode slurm|k8s|both]`` prints a
table (run, mode, signal step, backup written, processes gone in s, exactly once yes/no)
and exits 1 if any run failed. ``tests/system/test_preemption.py`` runs :func:`drill` a few times.

One run (:func:`drill`): the trainer (``tests/support/backup_trainer.py``, ``model.fit`` on
``h5feed.dataset(..., resume=backup_dir)`` with ``h5feed.BackupAndRestore(...,
save_on_sigterm=True, save_freq="epoch")``, 2 epochs of 9 batches, each step slowed down by
``step_sleep_s``) starts in a session of its own; once it has trained ``step`` batches it is
sent SIGTERM as a cluster would send it:

- ``slurm``: to its whole process group, its local workers included (``srun``/``scancel``
  signal every process of the step at once);
- ``k8s``: to the trainer only (the container's PID 1), SIGKILL to the group after the grace
  period (``terminationGracePeriodSeconds``, :data:`GRACE_S`).

Then: the trainer must end by SIGTERM (exit -15: it passed the signal on after its save),
the backup's position must be the step after the last one it trained (the step in hand), its
workers and itself gone within the grace period; a restarted trainer (no signal) must start
at that position and, with the batches the first run trained before it, train each (epoch,
batch) of the plan once, each epoch's samples once each; the batches the two runs share a
position for (none, unless the save lagged) must be the same samples.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
TRAINER = ROOT / "tests" / "support" / "backup_trainer.py"
#: Kubernetes' default ``terminationGracePeriodSeconds``: SIGKILL this long after SIGTERM.
GRACE_S = 30.0
#: The longest a trainer may take to reach the signalled step, or to run to its end.
RUN_TIMEOUT_S = 180.0
EPOCHS, LENGTH, SAMPLES = 2, 9, 18  # 2 files x 9 videos, batch_size 2
ARGS: dict[str, Any] = {"clip_len": 2, "batch_size": 2, "seed": 5, "flip": True}
_POLL_S = 0.02


@dataclasses.dataclass
class Outcome:
    """One run's figures and verdicts (``problems`` empty: every check passed)."""

    run: int
    mode: str
    step: int
    backup_written: bool = False
    gone_s: float | None = None
    exactly_once: bool = False
    problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems


def prepare(directory: pathlib.Path) -> list[str]:
    """The drill's HDF5 files under ``directory``, indexed once (so every trainer knows the
    epoch's length from the start)."""
    import h5feed
    from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

    spec = SampleSpec(files=2, videos_per_file=9, min_frames=3, max_frames=6, height=16, width=16)
    files = [str(p) for p in make_sample_dataset(directory, spec)]
    with h5feed.batches(files, **ARGS).stream() as stream:
        next(stream)
    return files


def _environment() -> dict[str, str]:
    return {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }


def _lines(log: pathlib.Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    text = log.read_text()
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


def _children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (its local workers)."""
    found = []
    for task in pathlib.Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def drill(directory: pathlib.Path, files: list[str], run: int, mode: str, step: int) -> Outcome:
    """One run of the drill in ``directory`` (made here), signalled after ``step`` trained
    batches (1 <= step < EPOCHS * LENGTH); see the module docstring."""
    outcome = Outcome(run, mode, step)
    directory.mkdir(parents=True)
    config = directory / "config.json"
    log, backup = directory / "trained.jsonl", directory / "backup"
    config.write_text(
        json.dumps(
            {
                "files": files, "clip_len": ARGS["clip_len"], "args": ARGS, "epochs": EPOCHS,
                "backup_dir": str(backup), "log": str(log), "save_freq": "epoch",
                "steps_per_execution": 1, "workers": [2], "save_on_sigterm": True,
                "step_sleep_s": 0.15,
            }
        )
    )  # fmt: skip
    command = [sys.executable, str(TRAINER), str(config)]
    with open(directory / "run-0.err", "wb") as err:
        trainer = subprocess.Popen(
            [*command, "0"], env=_environment(), stdout=err, stderr=err, start_new_session=True
        )
        try:
            _signal_and_wait(trainer, log, step, mode, outcome)
        finally:
            if trainer.poll() is None:
                os.killpg(trainer.pid, signal.SIGKILL)
                trainer.wait(timeout=10)
    if outcome.problems:
        return outcome
    _check_backup(backup, _lines(log), outcome)
    restarted = subprocess.run(
        [*command, "1"], env=_environment(), capture_output=True, text=True,
        timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    if restarted.returncode != 0:
        outcome.problems.append(f"the restarted run failed: {restarted.stderr[-2000:]}")
        return outcome
    _check_exactly_once(_lines(log), outcome)
    return outcome


def _signal_and_wait(
    trainer: subprocess.Popen[bytes], log: pathlib.Path, step: int, mode: str, outcome: Outcome
) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while len(_lines(log)) < step:
        if trainer.poll() is not None or time.monotonic() > deadline:
            outcome.problems.append(
                f"the trainer did not reach step {step} (exit {trainer.poll()})"
            )
            return
        time.sleep(_POLL_S)
    workers = _children(trainer.pid)
    if len(workers) != 2:
        outcome.problems.append(f"the trainer has {len(workers)} child processes, not 2")
    signalled = time.monotonic()
    if mode == "slurm":
        os.killpg(trainer.pid, signal.SIGTERM)  # every process of the job at once
    else:
        os.kill(trainer.pid, signal.SIGTERM)  # the container's PID 1 only
    try:
        code = trainer.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(trainer.pid, signal.SIGKILL)  # what the cluster does at the grace's end
        outcome.problems.append(f"the trainer outlived the {GRACE_S:g} s grace period")
        return
    if code != -signal.SIGTERM:
        outcome.problems.append(f"the trainer exited {code}, not by SIGTERM (-15)")
    while any(_alive(pid) for pid in workers) and time.monotonic() - signalled < GRACE_S:
        time.sleep(_POLL_S)
    outcome.gone_s = time.monotonic() - signalled
    if any(_alive(pid) for pid in workers):
        outcome.problems.append(f"workers alive {GRACE_S:g} s after the signal")


def _check_backup(backup: pathlib.Path, lines: list[dict[str, Any]], outcome: Outcome) -> None:
    """The position saved is the step after the last one the signalled run trained."""
    from h5feed.consumer.position.resume import read_position

    position = read_position(str(backup))
    if position is None or not lines:
        outcome.problems.append("no backup written")
        return
    last = lines[-1]
    expected = (last["epoch"], last["batch"] + 1)
    if expected[1] == LENGTH:
        expected = (expected[0] + 1, 0)
    saved = (position["epoch"], position["batch"])
    outcome.backup_written = saved == expected and os.path.exists(backup / position["weights"])
    if not outcome.backup_written:
        outcome.problems.append(f"the backup is at {saved}, the step in hand was {expected}")


def _check_exactly_once(lines: list[dict[str, Any]], outcome: Outcome) -> None:
    first = [line for line in lines if line["run"] == 0]
    second = [line for line in lines if line["run"] == 1]
    if not second:
        outcome.problems.append("the restarted run trained nothing")
        return
    start = (second[0]["epoch"], second[0]["batch"])
    before = [line for line in first if (line["epoch"], line["batch"]) < start]
    kept = before + second
    positions = [(line["epoch"], line["batch"]) for line in kept]
    plan = [(e, b) for e in range(EPOCHS) for b in range(LENGTH)]
    samples = {
        e: sorted(s for line in kept if line["epoch"] == e for s in line["samples"])
        for e in range(EPOCHS)
    }
    again = {(line["epoch"], line["batch"]): line["samples"] for line in second}
    shared = [line for line in first if (line["epoch"], line["batch"]) in again]
    if positions != plan:
        outcome.problems.append(f"trained positions {positions} are not the plan's, once each")
    elif any(samples[e] != list(range(SAMPLES)) for e in range(EPOCHS)):
        outcome.problems.append("an epoch's samples are not each once")
    elif any(again[(line["epoch"], line["batch"])] != line["samples"] for line in shared):
        outcome.problems.append("a batch retrained after the restart holds other samples")
    else:
        outcome.exactly_once = True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0, help="picks the signal steps")
    parser.add_argument("--mode", choices=("slurm", "k8s", "both"), default="both")
    args = parser.parse_args(argv)
    if str(ROOT) not in sys.path:  # run as a script: this checkout's h5feed
        sys.path.insert(0, str(ROOT))
    rng = random.Random(args.seed)
    modes = ["slurm", "k8s"] if args.mode == "both" else [args.mode]
    print(f"{'run':>3}  {'mode':5}  {'signal step':>11}  {'backup written':14}  "
          f"{'gone in s':>9}  exactly once")  # fmt: skip
    failed = 0
    with tempfile.TemporaryDirectory(prefix="h5feed-drill-") as tmp:
        files = prepare(pathlib.Path(tmp) / "data")
        for run in range(args.runs):
            mode = modes[run % len(modes)]
            step = rng.randrange(1, EPOCHS * LENGTH - 1)
            outcome = drill(pathlib.Path(tmp) / f"run-{run}", files, run, mode, step)
            gone = "-" if outcome.gone_s is None else f"{outcome.gone_s:.2f}"
            print(
                f"{run:>3}  {mode:5}  {step:>11}  {'yes' if outcome.backup_written else 'no':14}  "
                f"{gone:>9}  {'yes' if outcome.exactly_once else 'no'}",
                flush=True,
            )
            for problem in outcome.problems:
                print(f"     ! {problem}", flush=True)
            failed += not outcome.passed
    print(f"{args.runs - failed} of {args.runs} runs passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
