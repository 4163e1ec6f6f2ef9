"""The trainer loop of the edges A/B: N batches (env N, default 400) of ``h5feed.batches``
(``h5feed.dataset`` with argv[2] == "dataset") after 60, 2 workers, over the bench dataset in
argv[1] (``h5feed bench --data-dir DIR`` makes it); prints trainer CPU ms per clip and clips/s.
Under ``valgrind --tool=callgrind`` with N=50 and N=450, the difference of the instruction
counts over 400 is the trainer's instructions per batch."""

import glob
import os
import sys
import time

import h5feed

data = sys.argv[1]
make = h5feed.dataset if sys.argv[2:] == ["dataset"] else h5feed.batches
paths = sorted(glob.glob(f"{data}/32x12_320x240_q90_seed0/*.h5"))
feed = make(paths, clip_len=16, resize=(128, 171), crop=112, flip=True, batch_size=8,
            shuffle=True, seed=0, epochs=None, workers=2, index_cache=f"{data}/index-cache")
it = iter(feed)
for _ in range(60):
    next(it)
n = int(os.environ.get("N", "400"))
c0, w0 = time.process_time(), time.monotonic()
for _ in range(n):
    next(it)
c1, w1 = time.process_time(), time.monotonic()
print(f"{(c1 - c0) / (n * 8) * 1e3:.4f} {n * 8 / (w1 - w0):.1f}")
