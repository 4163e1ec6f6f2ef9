"""The demo's report of input wait: which wait is which, and one verdict on what to do.

Pure (no clock, no process): :func:`input_wait_lines` words what ``h5feed demo`` measured in its
training loop and what the feed's ``stats()`` said, and tests/system/test_demo_verdict.py pins it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from h5feed.consumer.telemetry.stats import INPUT_BOUND_WAIT_SHARE

__all__ = ["input_wait_lines"]


def input_wait_lines(wait_s: float, compute_s: float, feed: Mapping[str, Any]) -> list[str]:
    """The report's input-wait lines: two waits with names that say where each is measured,
    and one verdict on what to do (pure: tested in tests/system/test_demo_verdict.py).

    * ``step wait``: the share of the training loop's measured time spent in ``next(it)``,
      ``wait_s / (wait_s + compute_s)``: what the trainer feels, after tf.data's prefetch.
    * ``feed wait``: ``feed["wait_share_recent"]`` (``stats()``): the share of the last 10 s
      that tf.data's reader waited for h5feed's next batch, before the prefetch buffer: it is
      the higher of the two when the buffer hides part of the waits from the step.
    * ``verdict``: the step wait decides whether training waits for input at all
      (:data:`~h5feed.consumer.telemetry.stats.INPUT_BOUND_WAIT_SHARE`); if it does, the feed wait
      decides where: in h5feed's workers (the advice of ``feed["verdict"]``, capped by the
      cores the workers may use) or downstream of them, in tf.data, where workers do not help.
    """
    step = wait_s / (wait_s + compute_s) if wait_s + compute_s > 0 else 0.0
    lines = [
        f"step wait: {step:.1%} of the measured step time was spent in next(), waiting for a "
        f"batch (wait {wait_s:.2f}s, compute {compute_s:.2f}s)"
    ]
    share = feed.get("wait_share_recent")
    if share is None:  # no figures from h5feed: training did not finish
        return [*lines, f"verdict: {feed.get('verdict', 'no figures')}"]
    lines.append(
        f"feed wait: {share:.0%} of the last 10 s tf.data's reader waited for h5feed's next "
        "batch (before tf.data's prefetch buffer, which hides part of it from the step)"
    )
    if step <= INPUT_BOUND_WAIT_SHARE:
        verdict = (
            f"not input-bound: the step waited {step:.0%} of the time (at most "
            f"{INPUT_BOUND_WAIT_SHARE:.0%} counts as fed); more workers would not make it faster"
        )
    elif not feed.get("input_bound"):
        verdict = (
            f"input-bound, but not on h5feed's workers: they keep up (feed wait {share:.0%}), "
            "so the step waits on tf.data's own work after them; more workers would not help"
        )
    else:
        verdict = str(feed["verdict"])
    return [*lines, f"verdict: {verdict}"]
