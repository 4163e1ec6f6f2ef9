"""The trainer loop of the edges A/B: N batches of h5feed.batches (h5feed.dataset for the
tf.data rows) after 60, 2 workers, the bench dataset; prints trainer CPU ms per clip and clips/s."""
import glob, sys, time, resource
import h5feed
paths = sorted(glob.glob("/work/ab/data/32x12_320x240_q90_seed0/*.h5"))
ds = h5feed.batches(paths, clip_len=16, resize=(128, 171), crop=112, flip=True, batch_size=8,
                    shuffle=True, seed=0, epochs=None, workers=2, index_cache="/work/ab/data/index-cache")
it = iter(ds)
for _ in range(60):
    next(it)
c0, w0 = time.process_time(), time.monotonic()
import os; n = int(os.environ.get("N", "400"))
for _ in range(n):
    next(it)
c1, w1 = time.process_time(), time.monotonic()
print(f"{(c1 - c0) / (n * 8) * 1e3:.4f} {n * 8 / (w1 - w0):.1f}")
