#!/usr/bin/env bash
# Runs a real_sglang.sh series longer than one device call (10 min) on a machine kept warm by calls
# back to back: the first call starts the series in its own process session (it outlives the call),
# every call waits for it up to WAIT_S seconds and copies what it measured so far into $OUT.
#   bash benchmarks/gpu/detached.sh trust-pair --gates 10     (same command for every call)
# A call that finds the series finished only copies; the series' own exit code is in $OUT/series.rc.
set -uo pipefail
OUT=${OUT:-/tmp/out}
WAIT_S=${WAIT_S:-570}
SERIES_OUT=/tmp/rs-series-out
cd "$(dirname "$0")/../.." || exit 1
mkdir -p "$SERIES_OUT" "$OUT"
if [ ! -e "$SERIES_OUT/started" ]; then
  date -u +%FT%TZ > "$SERIES_OUT/started"
  OUT=$SERIES_OUT setsid bash -c 'bash benchmarks/gpu/real_sglang.sh "$@"; echo $? > '"$SERIES_OUT"'/series.rc' \
    _ "$@" > "$SERIES_OUT/series.out" 2>&1 < /dev/null &
  echo "series started: $*"
fi
t0=$(date +%s)
while [ ! -e "$SERIES_OUT/series.rc" ] && [ $(( $(date +%s) - t0 )) -lt "$WAIT_S" ]; do
  sleep 10
  cp -f "$SERIES_OUT"/* "$OUT"/ 2>/dev/null
done
cp -f "$SERIES_OUT"/* "$OUT"/ 2>/dev/null
grep -E "gate |verdicts|ready|healthy:|slow:" "$SERIES_OUT/series.out" | tail -40
if [ -e "$SERIES_OUT/series.rc" ]; then echo "series finished rc=$(cat "$SERIES_OUT/series.rc")"; else echo "series still running"; fi
