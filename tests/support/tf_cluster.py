"""Run the processes of one TensorFlow cluster on localhost (MultiWorkerMirroredStrategy
workers, each its own process: ``TF_CONFIG`` must be set before TensorFlow starts) in
parallel, every one bounded.

Guarantees, so that a test fails fast and says why instead of hanging CI:

- All processes are watched at once. The first one to exit non-zero stops the others at
  once: its peers would otherwise wait for it in the cluster's first collective, forever.
- The whole run has one deadline (:data:`DEADLINE_S`); past it every process still running
  is killed and named.
- A failure's message carries every process's exit status and the tail of its log.
- A cluster port another process took between :func:`ports.free_port`'s check and
  TensorFlow's bind ("Could not start gRPC server", before any data moves) is the test
  machine's race, not the code under test: the cluster is started again on fresh ports, at
  most :data:`PORT_RETRIES` times, and every such retry is printed. Nothing else is retried.

Tests that use it mark themselves ``@pytest.mark.timeout(tf_cluster.TEST_TIMEOUT_S)``.
"""

from __future__ import annotations

import pathlib
import subprocess
import time
from collections.abc import Callable, Sequence

from ports import free_ports

#: What one run of the cluster may take, every process together (a loaded 2-core machine
#: starts two or three TensorFlow processes in well under a minute).
DEADLINE_S = 150.0
PORT_RETRIES = 2
#: pytest's bound on a test that runs a cluster: every attempt, plus the kills.
TEST_TIMEOUT_S = int(DEADLINE_S * (1 + PORT_RETRIES)) + 60
PORT_TAKEN = "Could not start gRPC server"
_KILL_WAIT_S = 30.0
_POLL_S = 0.2
_TAIL_CHARS = 3000

#: One process: its argv and its environment.
Command = tuple[list[str], dict[str, str]]


def run_cluster(
    commands: Callable[[list[int]], Sequence[Command]], ports: int, logs: Sequence[pathlib.Path]
) -> None:
    """Run ``commands(ports)`` (``ports`` fresh free ports; 0 for a single process that
    needs none) together, process ``i`` writing to ``logs[i]``; return once every one exited
    0, else fail with their statuses and log tails (see the module's guarantees)."""
    for attempt in range(1 + PORT_RETRIES):
        fates = _run_once(commands(free_ports(ports)), logs)
        if all(fate == "exited 0" for fate in fates):
            return
        texts = [log.read_text(errors="replace") for log in logs]
        if attempt < PORT_RETRIES and any(PORT_TAKEN in text for text in texts):
            print(f"attempt {attempt + 1}: a cluster port was taken ({PORT_TAKEN!r}); again")
            for log in logs:
                log.rename(log.with_suffix(f".attempt{attempt + 1}.log"))
            continue
        raise AssertionError(_failure(fates, texts))


def _run_once(commands: Sequence[Command], logs: Sequence[pathlib.Path]) -> list[str]:
    """Each process's fate: "exited N", or why this runner killed it."""
    procs: list[subprocess.Popen[bytes]] = []
    fates: dict[int, str] = {}
    try:
        for (args, env), path in zip(commands, logs, strict=True):
            with open(path, "wb") as log:  # the child keeps its own copy of the descriptor
                procs.append(subprocess.Popen(args, env=env, stdout=log, stderr=log))
        deadline = time.monotonic() + DEADLINE_S
        why = f"still running after {DEADLINE_S:.0f} s (killed)"
        while time.monotonic() < deadline:
            codes = [proc.poll() for proc in procs]
            if all(code is not None for code in codes):
                break
            if any(codes):
                why = "killed: a peer failed, and it would wait for that peer"
                break
            time.sleep(_POLL_S)
        fates = {i: why for i, proc in enumerate(procs) if proc.poll() is None}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=_KILL_WAIT_S)
    return [fates.get(i, f"exited {proc.returncode}") for i, proc in enumerate(procs)]


def _failure(fates: Sequence[str], texts: Sequence[str]) -> str:
    lines = [
        f"--- process {i}: {fate}; its log's tail:\n{text[-_TAIL_CHARS:]}"
        for i, (fate, text) in enumerate(zip(fates, texts, strict=True))
    ]
    return "a TensorFlow cluster process failed:\n" + "\n".join(lines)
