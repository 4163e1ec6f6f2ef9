#!/usr/bin/env bash
# The GPU machine's whole run, from a checkout's root (this file is not part of the wheel):
# scaling of h5feed workers against the parallel per-core limit (`h5feed bench`), then a 3D CNN
# trained on the GPU from a cached batch, h5feed and DataLoader, torch and Keras 3 on torch
# (`h5feed bench gpu-train`). No TensorFlow, no network: the wheels h5feed needs beyond that
# machine's image (pyzmq; keras, namex, optree) travel in .whl/ (docs/performance/gpu.md).
#   OUT=/tmp/out bash h5feed/bench/gpu/run.sh                            # on the GPU machine
#   GPU_RUN_REHEARSAL=1 OUT=/tmp/out bash h5feed/bench/gpu/run.sh        # here, on the CPU, tiny
# Writes $OUT/{scale.json,scale.md,scale.png,train.json,train.png,gpu.txt,log.txt}.
set -uo pipefail
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
WHEELS=${WHEELS:-.whl}; DATA=${DATA:-/tmp/h5feed_bench_data}; PY=${PY:-python3}
# 120 files, as the first GPU run used (then each worker owned whole files, and 120 gave 1, 2,
# 4, 8 and 15 workers equal shares; files are now shared by several workers, so any count works)
DATASET=${DATASET:-120x4}
exec > >(tee -a "$OUT/log.txt") 2>&1
say() { echo "gpu_run [${SECONDS}s]: $*"; }
if [ -d "$WHEELS" ] && compgen -G "$WHEELS/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/h5feed-site "$WHEELS"/*.whl \
    || { say "wheel install failed"; exit 1; }
  export PYTHONPATH=$PWD:/tmp/h5feed-site
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export KERAS_BACKEND=torch PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1 || true
{ nproc; $PY -c 'import sys,torch,numpy,cv2,h5py,zmq,msgpack; print(sys.version); print("torch",torch.__version__,"numpy",numpy.__version__,"cv2",cv2.__version__,"h5py",h5py.__version__,"zmq",zmq.__version__,"msgpack",msgpack.version)'; } >>"$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
if [ -n "${GPU_RUN_REHEARSAL:-}" ]; then
  SCALE=(--workers 1,2 --quick); TRAIN=(--device cpu --workers 2 --seconds 2 --warmup 2 --widths 4,8)
else
  SCALE=(--workers 1,2,4,8,15 --window-s 3 --repeats 2 --warmup-s 1.5 --dataset "$DATASET")
  TRAIN=(--workers 15 --seconds 10 --warmup 4 --dataset "$DATASET"
         --feeders cached,h5feed,h5feed-pinned,torch,keras-cached,keras-h5feed)
fi
say "scaling: h5feed.batches (NumPy) against the parallel per-core limit"
$PY -m h5feed bench --contenders per-core-parallel,h5feed-numpy --no-ceiling "${SCALE[@]}" \
  --data-dir "$DATA" --out "$OUT/scale" || say "the scaling run failed"
# The model must take at least the clips/s of 8 h5feed workers (or the most measured); without
# the scaling figures, calibration keeps the heaviest width.
NEED=(); [ -s "$OUT/scale.json" ] && NEED=(--need-from "$OUT/scale.json" --need-workers 8)
say "trainer: calibrate the width, then cached / h5feed / DataLoader / keras"
$PY -m h5feed bench gpu-train --calibrate "${NEED[@]}" "${TRAIN[@]}" \
  --data-dir "$DATA" --json "$OUT/train.json" --png "$OUT/train.png" || say "the trainer run failed"
say "done"
