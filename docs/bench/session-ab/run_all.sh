#!/bin/bash
# before (main at d02450d, exported to $BEFORE) and after (this branch, exported to $AFTER),
# N=50 and N=450, alternately, reps 1 and 2 (or $REPS), one run at a time (2 cores shared).
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${DATA:-/tmp/bench_data}; OUT=${OUT:-/tmp/sess-cg}; PY=${PY:-/work/main/.venv/bin/python}
BEFORE=${BEFORE:-$OUT/before}; AFTER=${AFTER:-$OUT/after}
mkdir -p "$OUT/cache"
for rep in ${REPS:-1 2}; do
  for v in before after; do
    src=$BEFORE; [ $v = after ] && src=$AFTER
    for n in 50 450; do
      f=$OUT/$v-$n-$rep.out
      N=$n PYTHONPATH=$src valgrind --tool=callgrind --callgrind-out-file=$f \
        $PY "$HERE/trainer_loop.py" "$DATA" "$OUT/cache" > /dev/null 2>"$OUT/$v-$n-$rep.err"
      echo "$rep $v $n $(grep -E '^summary:' $f | awk '{print $2}')" >> "$OUT/results.txt"
    done
  done
done
