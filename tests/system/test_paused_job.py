"""A whole job paused and resumed (the trainer and its local workers stopped together, as
Ctrl-Z then ``fg``, ``docker pause`` or a paused VM do) for longer than the heartbeat timeout:
on resume each side's ZeroMQ closes the connections whose heartbeats timed out and dials
again, and what was on the way is lost. Every sample still arrives once per epoch, and the
feed goes on at once: a worker that sees its connection break starts over as a new session
(h5feed/producer/worker/connection.py), and one the trainer finds unreachable first is
replaced. Before the start-over, about one pause in four left a UNIT lost on a connection
that reconnected unseen, and the feed stalled until ``unit_timeout_s`` (set to an hour here,
so such a stall fails the test instead of healing).

Real processes: this test's process is the trainer; a helper process stops and continues it
with its workers (a process cannot resume itself).
"""

from __future__ import annotations

import collections
import os
import pathlib
import subprocess
import sys
import textwrap
import time

import pytest

import h5feed

_PEER_TIMEOUT_S = 2.5  # heartbeat timeout 1 s (h5feed/common/protocol/liveness.py)
_PAUSE_S = 3.0  # longer than that: connections time out on resume (about one pause in two)
_PAUSES = 6  # at least; then more, up to _MAX_PAUSES, until a connection has broken
_MAX_PAUSES = 20  # six pauses without a break: seen once, in a full run under CI's load
_MAX_GAP_S = 30.0  # between two batches, a pause and a replacement included


def _pauses(trainer: int, broke: pathlib.Path) -> subprocess.Popen[bytes]:
    """From another process: :data:`_PAUSES` times, and then until the file ``broke`` exists
    (the trainer saw a connection break) or :data:`_MAX_PAUSES` in all, after a second of
    work, stop the trainer and its descendants together for :data:`_PAUSE_S`, then continue
    them. The workers are busy when it comes (a job that is idle when paused keeps its
    connections: nothing is on the way). The job is listed again for each pause (a worker
    the trainer replaced is part of it), a process gone meanwhile is passed over, and
    whatever happens every process stopped is continued: a trainer left stopped would hang
    this test's pytest worker, where no timeout can fire."""
    script = textwrap.dedent(
        f"""
        import os, signal, time
        from h5feed.common.system.procstat import descendants

        def signal_to(pid, sig):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:  # a worker that ended (replaced) since the listing
                pass

        for done in range({_MAX_PAUSES}):
            if done >= {_PAUSES} and os.path.exists({str(broke)!r}):
                break
            time.sleep(1.0)
            job = [p for p in [{trainer}, *descendants({trainer})] if p != os.getpid()]
            try:
                for pid in job:
                    signal_to(pid, signal.SIGSTOP)
                time.sleep({_PAUSE_S!r})
            finally:
                for pid in job:
                    signal_to(pid, signal.SIGCONT)
        """
    )
    return subprocess.Popen([sys.executable, "-c", script])


@pytest.mark.timeout(240)  # about 25 s (up to 90 s with every pause); a stall hangs until this
def test_a_job_paused_past_the_heartbeat_timeout_goes_on_with_every_sample_once(
    small_dataset: list[pathlib.Path], tmp_path: pathlib.Path
) -> None:
    samples = 24
    feed = h5feed.batches(
        [str(p) for p in small_dataset], clip_len=16, resize=(96, 128), batch_size=4,
        epochs=None, workers=2, peer_timeout_s=_PEER_TIMEOUT_S, unit_timeout_s=3600,
        index_cache=str(tmp_path / "index"),
    )  # fmt: skip
    seen: collections.Counter[tuple[int, int]] = collections.Counter()
    gaps, last, pausing = [], time.monotonic(), None
    broke = tmp_path / "broke"  # tells the pauses that a connection broke: enough of them
    with feed.stream() as stream:
        for batch in stream:
            gaps.append(time.monotonic() - last)
            epoch = int(batch["epoch"][0])
            if pausing is None:  # the workers are up: pause the whole job from now on
                pausing = _pauses(os.getpid(), broke)
            elif pausing.poll() is not None and epoch > max(e for e, _ in seen):
                break  # the pauses are over and the epoch they ended in is complete
            seen.update(zip(batch["epoch"].tolist(), batch["sample"].tolist(), strict=True))
            if not broke.exists() and stream.stats()["peers_lost"] >= 1:
                broke.touch()
            last = time.monotonic()
        stats = stream.stats()
    assert pausing is not None and pausing.wait(timeout=30) == 0
    epochs = max(e for e, _ in seen) + 1
    assert seen == collections.Counter({(e, s): 1 for e in range(epochs) for s in range(samples)})
    assert max(gaps) < _MAX_GAP_S, max(gaps)
    assert stats["peers_lost"] >= 1, "no connection broke in any pause: nothing was tested"
