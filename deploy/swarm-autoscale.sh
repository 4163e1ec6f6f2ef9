#!/usr/bin/env bash
# The producers of a Swarm stack sized to the trainer's demand (docs/deploy/sizing.md). Swarm
# has no autoscaler: this loop reads the trainer's gauge h5feed_producers_replicas_needed from its
# /metrics and calls `docker service scale`. Up at once; down by one replica only after the
# gauge has asked for fewer at DOWN_AFTER readings in a row; never outside [MIN, MAX]. An
# absent gauge (no batch taken yet, or a version-5 producer) changes nothing, and so does a
# manager that does not answer (tried again next round).
#   METRICS_URL=http://gpu-host:9090/metrics deploy/swarm-autoscale.sh
# Settings (environment): METRICS_URL (required), SERVICE (h5feed_producer), MIN (1), MAX (16),
# EVERY_S (30), DOWN_AFTER (10 readings: 5 minutes), ROUNDS (0: run until stopped).
set -euo pipefail
: "${METRICS_URL:?set METRICS_URL to the metrics URL of the trainer}"
SERVICE=${SERVICE:-h5feed_producer} MIN=${MIN:-1} MAX=${MAX:-16}
EVERY_S=${EVERY_S:-30} DOWN_AFTER=${DOWN_AFTER:-10} ROUNDS=${ROUNDS:-0}

needed() {  # the gauge, a whole number, or nothing
  curl -fsS --max-time 5 "$METRICS_URL" 2>/dev/null |
    awk '$1 == "h5feed_producers_replicas_needed" { printf "%d\n", $2 + 0.5 }'
}

current() {
  docker service inspect --format '{{.Spec.Mode.Replicated.Replicas}}' "$SERVICE"
}

lower=0 round=0
while [ "$ROUNDS" -eq 0 ] || [ "$round" -lt "$ROUNDS" ]; do
  [ "$round" -eq 0 ] || sleep "$EVERY_S"
  round=$((round + 1))
  want=$(needed || true)
  [ -n "$want" ] || continue  # no gauge (yet): hold
  if ! have=$(current); then  # a manager that does not answer now: try again next round
    echo "$(date -u +%FT%TZ) cannot read the replicas of $SERVICE" >&2
    continue
  fi
  want=$((want < MIN ? MIN : want > MAX ? MAX : want))
  if [ "$want" -gt "$have" ]; then
    lower=0
    echo "$(date -u +%FT%TZ) $SERVICE: $have -> $want (the trainer waits)"
    docker service scale --detach "$SERVICE=$want" >/dev/null
  elif [ "$want" -lt "$have" ]; then
    lower=$((lower + 1))
    if [ "$lower" -ge "$DOWN_AFTER" ]; then  # one replica at a time: each leaves its files
      echo "$(date -u +%FT%TZ) $SERVICE: $have -> $((have - 1)) (fewer asked $lower times)"
      docker service scale --detach "$SERVICE=$((have - 1))" >/dev/null
      lower=0
    fi
  else
    lower=0
  fi
done
