"""The trainer loop of the session A/B (the edges A/B's, docs/bench/edges-ab/trainer_loop.py):
N batches (env N, default 400) of ``h5feed.batches`` after 60 of warm-up, 2 local workers, over
the bench dataset in argv[1] (``h5feed bench --data-dir DIR`` makes it), with the index cache in
argv[2]; prints trainer CPU ms per clip and clips/s. Under ``valgrind --tool=callgrind`` (the
trainer process only: callgrind does not follow the workers without --trace-children) with N=50
and N=450, the difference of the two instruction counts over 400 is the trainer's instructions
per batch (start-up, warm-up and shutdown cancel).

    N=50 valgrind --tool=callgrind --callgrind-out-file=OUT python trainer_loop.py DATA CACHE
"""

import glob
import os
import sys
import time

import h5feed

data, cache = sys.argv[1], sys.argv[2]
paths = sorted(glob.glob(f"{data}/32x12_320x240_q90_seed0/*.h5"))
feed = h5feed.batches(paths, clip_len=16, resize=(128, 171), crop=112, flip=True, batch_size=8,
                      shuffle=True, seed=0, epochs=None, workers=2, index_cache=cache)  # fmt: skip
it = iter(feed)
for _ in range(60):
    next(it)
n = int(os.environ.get("N", "400"))
c0, w0 = time.process_time(), time.monotonic()
for _ in range(n):
    next(it)
c1, w1 = time.process_time(), time.monotonic()
print(f"{(c1 - c0) / (n * 8) * 1e3:.4f} {n * 8 / (w1 - w0):.1f}")
