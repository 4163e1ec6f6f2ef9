#!/bin/bash
# before and after, N=10 and N=60, one at a time (2 cores shared)
set -e
H=/work/wt/house-worker/docs/bench/worker-ab/worker_clips.py
for rep in 1 2; do
  for v in before after; do
    src=/tmp/hw-base; [ $v = after ] && src=/tmp/hw-after
    for n in 10 60; do
      PYTHONPATH=$src /work/main/.venv/bin/python $H /tmp/cg/data $n /tmp/cg/$v-$n-$rep.out > /dev/null
      echo "$rep $v $n $(grep -E '^summary:' /tmp/cg/$v-$n-$rep.out | awk '{print $2}')" >> /tmp/cg/results.txt
    done
  done
done
