#!/usr/bin/env bash
# The producers of a Swarm stack sized to the trainer's demand (docs/deploy/sizing.md). Swarm
# has no autoscaler: this loop reads the trainer's gauge h5feed_fleet_replicas_needed from its
# /metrics and calls `docker service scale`. Up at once; down only after the gauge has asked
# for fewer at DOWN_AFTER readings in a row (then to the most of those readings), one replica
# per step; never outside [MIN, MAX]. An absent gauge (no batch taken yet, or a version-5
# producer) changes nothing.
#   METRICS_URL=http://gpu-host:9090/metrics deploy/swarm-autoscale.sh
# Settings (environment): METRICS_URL (required), SERVICE (h5feed_producer), MIN (1), MAX (16),
# EVERY_S (30), DOWN_AFTER (10 readings: 5 minutes), ROUNDS (0: run until stopped).
set -euo pipefail
: "${METRICS_URL:?set METRICS_URL to the metrics URL of the trainer}"
SERVICE=${SERVICE:-h5feed_producer} MIN=${MIN:-1} MAX=${MAX:-16}
EVERY_S=${EVERY_S:-30} DOWN_AFTER=${DOWN_AFTER:-10} ROUNDS=${ROUNDS:-0}

needed() {  # the gauge, a whole number, or nothing
  curl -fsS --max-time 5 "$METRICS_URL" 2>/dev/null |
    awk '$1 == "h5feed_fleet_replicas_needed" { printf "%d\n", $2 + 0.5 }'
}

current() {
  docker service inspect --format '{{.Spec.Mode.Replicated.Replicas}}' "$SERVICE"
}

lower=0 most_lower=0 round=0
while [ "$ROUNDS" -eq 0 ] || [ "$round" -lt "$ROUNDS" ]; do
  round=$((round + 1))
  want=$(needed || true)
  if [ -n "$want" ]; then
    want=$((want < MIN ? MIN : want > MAX ? MAX : want))
    have=$(current)
    if [ "$want" -gt "$have" ]; then
      lower=0 most_lower=0
      echo "$(date -u +%FT%TZ) $SERVICE: $have -> $want (the trainer waits)"
      docker service scale --detach "$SERVICE=$want" >/dev/null
    elif [ "$want" -lt "$have" ]; then
      lower=$((lower + 1))
      most_lower=$((want > most_lower ? want : most_lower))
      if [ "$lower" -ge "$DOWN_AFTER" ]; then
        step=$((have - 1 > most_lower ? have - 1 : most_lower))
        echo "$(date -u +%FT%TZ) $SERVICE: $have -> $step (fewer asked for $lower readings)"
        docker service scale --detach "$SERVICE=$step" >/dev/null
        lower=0 most_lower=0
      fi
    else
      lower=0 most_lower=0
    fi
  fi
  if [ "$ROUNDS" -eq 0 ] || [ "$round" -lt "$ROUNDS" ]; then sleep "$EVERY_S"; fi
done
