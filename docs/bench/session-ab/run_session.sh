#!/bin/bash
# The session alone (session_messages.py): before and after, N=1000 and N=11000, reps 1 and 2
# (or $REPS); PYTHONHASHSEED as given (unset: random, as in the first two reps).
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/sess-cg}; PY=${PY:-/work/main/.venv/bin/python}
BEFORE=${BEFORE:-$OUT/before}; AFTER=${AFTER:-$OUT/after}
for rep in ${REPS:-1 2}; do
  for v in before after; do
    src=$BEFORE; [ $v = after ] && src=$AFTER
    for n in 1000 11000; do
      f=$OUT/session-$v-$n-$rep.out
      N=$n PYTHONPATH=$src valgrind --tool=callgrind --callgrind-out-file=$f \
        $PY "$HERE/session_messages.py" > /dev/null 2>"$OUT/session-$v-$n-$rep.err"
      echo "$rep $v $n $(grep -E '^summary:' $f | awk '{print $2}')" >> "$OUT/session-results.txt"
    done
  done
done
