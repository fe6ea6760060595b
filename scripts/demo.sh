#!/usr/bin/env bash
# `make demo`: start an embedded local cluster, run the fan-out/fan-in example, print its result,
# stop the cluster. Everything lives in a fresh directory under .plexus/.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${PLEXUS_BIN:-target/release}
DIR=.plexus/demo-$(date +%Y%m%d-%H%M%S)
mkdir -p "$DIR"

"$BIN/plexus" up --workers 3 --dir "$DIR" --port 0 > "$DIR/up.out" 2>&1 &
UP=$!
stop() { kill -TERM "$UP" 2>/dev/null || true; wait "$UP" 2>/dev/null || true; }
trap stop EXIT

URL=
for _ in $(seq 1 300); do
  URL=$(sed -n 's/^coordinator: \(https\{0,1\}:[^ ]*\).*/\1/p' "$DIR/up.out" | head -n1)
  [ -n "$URL" ] && break
  kill -0 "$UP" 2>/dev/null || { cat "$DIR/up.out"; echo "plexus up exited early" >&2; exit 1; }
  sleep 0.1
done
[ -n "$URL" ] || { cat "$DIR/up.out"; echo "plexus up did not print the coordinator URL in 30 s" >&2; exit 1; }
# The coordinator, its CA and the admin token's file, as `plexus up` printed them.
eval "$(grep '^export PLEXUS_' "$DIR/up.out")"
echo "cluster up at $URL (state and logs in $DIR)"
"$BIN/plexus" workers

JOB=$("$BIN/plexus" submit examples/fanout.toml)
echo "submitted examples/fanout.toml as $JOB"
"$BIN/plexus" watch "$JOB"
"$BIN/plexus" status "$JOB"
echo "result (sum of 1..8000, from the 'sum' task's output):"
"$BIN/plexus" logs "$JOB" sum
