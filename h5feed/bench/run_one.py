"""One contender in a process of its own: ``python -m h5feed.bench.run_one SPEC_JSON``.

Started by the runner (:mod:`h5feed.bench.runner`); it talks by lines. On stdout, each message
is one line ``@@h5feed-bench KIND JSON`` (anything else printed there is ignored):

1. with ``"check": true``: ``check`` — one epoch of a one-epoch instance of the contender, run
   to its end (clips, batches, frame shapes and dtypes);
2. ``ready`` — a second instance that runs forever has given its first batch (start-up is not
   timed): pid, start-up seconds, versions;
3. then, per request line on stdin ``window WARMUP SECONDS``: ``window`` — WARMUP seconds of
   untimed batches, then one timed window (:func:`h5feed.bench.measure.measure_window`);
   ``stop`` (or end of input) ends the process.

Meanwhile, ``progress`` after a batch, at most every :data:`PROGRESS_EVERY_S` (the spec's
``progress_every_s`` if it has one): it tells the runner a slow contender from a hung one (a
write of a few bytes a second, the same for every contender).

Any failure sends ``error`` (type, message, traceback) and exits with status 1; the runner
reports the contender as failed with that message, never with a number.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
from typing import Any

from h5feed.bench.contender import Contender, Setup, make_contender

TAG = "@@h5feed-bench "
#: The message kind that says a batch came.
PROGRESS = "progress"
PROGRESS_EVERY_S = 1.0


def send(kind: str, payload: dict[str, Any]) -> None:
    """One message to the runner."""
    sys.stdout.write(f"{TAG}{kind} {json.dumps(payload)}\n")
    sys.stdout.flush()


def versions() -> dict[str, str | None]:
    """Versions of the libraries a contender may have loaded (None: not loaded)."""
    names = ("tensorflow", "keras", "torch", "grain", "numpy", "cv2", "h5py", "zmq")
    return {name: getattr(sys.modules.get(name), "__version__", None) for name in names}


class Reporting(Contender):
    """A contender whose batches are reported as ``progress``, at most every
    ``every_s`` (the first one at once)."""

    def __init__(self, contender: Contender, every_s: float) -> None:
        super().__init__(contender.setup)
        self.contender = contender
        self.every_s = every_s
        self._next_at = 0.0

    def start(self) -> None:
        self.contender.start()

    def next_frames(self) -> Any:
        frames = self.contender.next_frames()
        now = time.monotonic()
        if now >= self._next_at:
            self._next_at = now + self.every_s
            send(PROGRESS, {})
        return frames

    def clips_elsewhere(self) -> int:
        return self.contender.clips_elsewhere()

    def close(self) -> None:
        self.contender.close()


def serve(spec: dict[str, Any]) -> int:
    """The contender process's life (see the module docstring)."""
    from h5feed.bench.measure import check_epoch, drive_for, measure_window
    from h5feed.bench.workload import VideoRef

    raw = spec["setup"]
    setup = Setup(
        paths=tuple(raw["paths"]),
        videos=tuple(VideoRef(*v) for v in raw["videos"]),
        workers=int(raw["workers"]),
        epochs=None,
        seed=int(raw["seed"]),
        cache_dir=str(raw["cache_dir"]),
    )
    every_s = float(spec.get("progress_every_s", PROGRESS_EVERY_S))
    if spec.get("check"):
        once = Reporting(
            make_contender(spec["target"], dataclasses.replace(setup, epochs=1)), every_s
        )
        try:
            result = check_epoch(once)
        finally:
            once.close()
        send("check", result)
    contender = Reporting(make_contender(spec["target"], setup), every_s)
    try:
        began = time.monotonic()
        contender.start()
        contender.next_frames()
        send(
            "ready",
            {"pid": os.getpid(), "startup_s": time.monotonic() - began, "versions": versions()},
        )
        for line in sys.stdin:
            words = line.split()
            if not words or words[0] == "stop":
                break
            drive_for(contender, float(words[1]))
            send("window", measure_window(contender, float(words[2])).as_dict())
    finally:
        contender.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m h5feed.bench.run_one SPEC_JSON", file=sys.stderr)
        return 2
    spec = json.loads(args[0])
    try:
        if spec.get("kind") == "ceiling":
            from h5feed.bench.ceiling import serve_ceiling

            return serve_ceiling(spec, send)
        if spec.get("kind") == "socket_ceiling":
            from h5feed.bench.socket_ceiling import serve_socket_ceiling

            return serve_socket_ceiling(spec, send)
        return serve(spec)
    except Exception as exc:  # reported to the runner, which marks the contender failed
        trace = traceback.format_exc()
        print(trace, file=sys.stderr)
        send("error", {"type": type(exc).__name__, "message": str(exc), "traceback": trace})
        return 1


if __name__ == "__main__":
    sys.exit(main())
