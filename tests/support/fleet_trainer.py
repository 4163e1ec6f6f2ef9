"""A trainer process for the shared-fleet tests: one epoch of ``h5feed.batches`` (NumPy, no
TensorFlow: it starts in about a second), fed by a shared fleet (``--fleet``) or by a producer
of its own (``--own``: workers connect to its ``--port``), each batch's digest written to
``--out`` as it is taken.

``--out`` gets one JSON line per batch: the batch's rows as (file, video, start) and the
SHA-256 of its frames; a last line ``{"done": true, "stats": ...}`` when the epoch ended. A
trainer SIGKILLed mid-epoch leaves its lines so far (each flushed). ``--step-s``: sleep this
long per batch (a slow trainer). ``--epochs 0``: forever (the fairness test's hungry trainers).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

import h5feed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True, help="this trainer's listen port")
    parser.add_argument("--listen-host", default="127.0.0.1", help="0.0.0.0 in a container")
    parser.add_argument("--fleet", action="append", default=[], help="a fleet endpoint")
    parser.add_argument("--fleet-key", default=None)
    parser.add_argument("--curve-key", default=None)
    parser.add_argument("--curve-authorized", default=None)
    parser.add_argument("--data-root", required=True)
    parser.add_argument("--files", nargs="+", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clip-len", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--step-s", type=float, default=0.0)
    parser.add_argument("--start-timeout-s", type=float, default=60.0)
    parser.add_argument(
        "--max-inflight-batches", type=int, default=None, help="the credit budget (default: grown)"
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    feed = h5feed.batches(
        args.files,
        data_root=args.data_root,
        workers=0,
        listen=f"tcp://{args.listen_host}:{args.port}",
        fleet=args.fleet or None,
        fleet_key=args.fleet_key,
        curve_key=args.curve_key,
        curve_authorized=args.curve_authorized,
        seed=args.seed,
        clip_len=args.clip_len,
        batch_size=args.batch_size,
        epochs=args.epochs or None,
        start_timeout_s=args.start_timeout_s,
        peer_timeout_s=3.0,
        max_inflight_batches=args.max_inflight_batches,
    )
    with open(args.out, "w") as out:
        try:
            for batch in feed:
                rows = [
                    [f.decode(), v.decode(), int(s)]
                    for f, v, s in zip(batch["file"], batch["video"], batch["start"], strict=True)
                ]
                digest = hashlib.sha256(batch["frames"].tobytes()).hexdigest()
                out.write(json.dumps({"rows": rows, "frames": digest}) + "\n")
                out.flush()
                if args.step_s:
                    time.sleep(args.step_s)
        except h5feed.H5FeedError as exc:
            out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
            return 1
        out.write(json.dumps({"done": True, "stats": feed.stats()}, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
