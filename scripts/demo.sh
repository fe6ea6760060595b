#!/usr/bin/env bash
# `make demo`: the main job, data-parallel training (examples/ddp_train.toml: examples/ddp_train.py,
# the anchor's DDP MLP on seeded synthetic data, as a 4-member `communicator = true` gang over the
# `plexus` torch.distributed backend, checkpointing every 10 steps, then an evaluation of the final
# checkpoints), on an embedded cluster of 4 workers with two data-plane rails each (the loopback
# addresses 127.0.0.2 and 127.0.0.3, so every gradient allreduce is striped over two sockets).
# Prints live progress, rank 0's per-step time and loss, the evaluation, and each worker's
# traffic per rail; then stops the cluster. Needs the torch venv `make torch` installs.
#
#   scripts/demo.sh [train|allreduce|fanout|sweep]
#     allreduce: the allreduce pipeline (examples/train.toml: shard -> 4 training replicas, a
#                gang -> the built-in allreduce of their gradients -> evaluate and check), placed
#                by the learned placer (--placer rl), with `plexus explain` of a training subtask
#     fanout:    the smaller fan-out/fan-in example on 3 workers
#     sweep:     examples/sweep/ (a learning-rate sweep whose code ships with the job:
#                working_dir, one replica per combination of `sweep`, a report) on 3 workers
#   PLEXUS_BIN         where the binaries are (default target/release)
#   PLEXUS_PYTHON      the python with torch for `train` (default: the venv of `make torch`)
#   PLEXUS_DEMO_KEEP=1 keep the cluster (and its dashboard) running after the job, until Ctrl-C
# Everything lives in a fresh directory under .plexus/.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${PLEXUS_BIN:-target/release}
WHICH=${1:-train}
DIR=.plexus/demo-$WHICH-$(date +%Y%m%d-%H%M%S)
mkdir -p "$DIR"
step() { printf '\n== %s\n' "$*"; }

case "$WHICH" in
  train) UP_ARGS=(--workers 4 --rails 127.0.0.2,127.0.0.3) ;;
  allreduce) UP_ARGS=(--workers 4 --rails 127.0.0.2,127.0.0.3 --placer rl) ;;
  fanout|sweep) UP_ARGS=(--workers 3) ;;
  *) echo "demo.sh: unknown demo '$WHICH' (train, allreduce, fanout or sweep)" >&2; exit 2 ;;
esac

if [ "$WHICH" = train ]; then
  # The venv `make torch` made: .plexus/libtorch links to its lib/python3.X/site-packages/torch.
  PY=${PLEXUS_PYTHON:-}
  if [ -z "$PY" ] && TORCH=$(readlink -f .plexus/libtorch 2>/dev/null); then
    PY=$(dirname "$(dirname "$(dirname "$(dirname "$TORCH")")")")/bin/python
  fi
  [ -n "$PY" ] && [ -x "$PY" ] || { echo "demo.sh: no python with torch (run 'make torch', or set PLEXUS_PYTHON)" >&2; exit 1; }
  sed -e "s|@PYTHON@|$PY|g" -e "s|@REPO@|$PWD|g" examples/ddp_train.toml > "$DIR/ddp_train.toml"
  # As root, tasks run as a uid of their own, which cannot reach a venv below a directory only
  # root may search (/root): then they run as the workers' user, saying so.
  if [ "$(id -u)" = 0 ]; then
    d=$(dirname "$PY")
    while [ "$d" != / ]; do
      if [ "$(( 0$(stat -c %a "$d") & 1 ))" = 0 ]; then
        echo "demo: $d is not searchable by other users: tasks run as the workers' user (--task-user worker)"
        UP_ARGS+=(--task-user worker)
        break
      fi
      d=$(dirname "$d")
    done
  fi
fi

step "starting a cluster: plexus up ${UP_ARGS[*]}"
"$BIN/plexus" up "${UP_ARGS[@]}" --dir "$DIR" --port 0 > "$DIR/up.out" 2>&1 &
UP=$!
stop() { kill -TERM "$UP" 2>/dev/null || true; wait "$UP" 2>/dev/null || true; }
trap stop EXIT

URL=
for _ in $(seq 1 600); do
  # The URL is printed once every worker is alive.
  URL=$(sed -n 's/^coordinator: \(https\{0,1\}:[^ ]*\).*/\1/p' "$DIR/up.out" | head -n1)
  [ -n "$URL" ] && break
  kill -0 "$UP" 2>/dev/null || { cat "$DIR/up.out"; echo "plexus up exited early" >&2; exit 1; }
  sleep 0.1
done
[ -n "$URL" ] || { cat "$DIR/up.out"; echo "plexus up did not report the cluster up in 60 s" >&2; exit 1; }
# The coordinator, its CA and the admin token's file, as `plexus up` printed them.
eval "$(grep '^export PLEXUS_' "$DIR/up.out")"
# "dashboard: http://127.0.0.1:PORT/login?token=$(cat FILE) (metrics at /metrics)"
DASHBOARD=$(sed -n 's/.*dashboard: \(http.*\) (metrics.*/\1/p' "$DIR/up.out" | head -n1)
echo "cluster up at $URL (state and logs in $DIR)"
"$BIN/plexus" workers

if [ "$WHICH" = fanout ]; then
  step "plexus submit examples/fanout.toml"
  JOB=$("$BIN/plexus" submit examples/fanout.toml)
  "$BIN/plexus" watch "$JOB"
  step "result (sum of 1..8000, from the 'sum' task's output)"
  "$BIN/plexus" logs "$JOB" sum
  exit 0
fi

if [ "$WHICH" = sweep ]; then
  step "plexus submit examples/sweep/sweep.toml (the code in examples/sweep/ ships with the job)"
  JOB=$("$BIN/plexus" submit examples/sweep/sweep.toml)
  echo "job $JOB"
  "$BIN/plexus" watch "$JOB"
  step "each replica's parameters (plexus status $JOB --subtasks)"
  "$BIN/plexus" status "$JOB" --subtasks
  step "the report (plexus logs $JOB report)"
  "$BIN/plexus" logs "$JOB" report
  grep -q '^best: ' <("$BIN/plexus" logs "$JOB" report) || { echo "demo: the report has no best result" >&2; exit 1; }
  step "the same code again: nothing to upload (plexus submit says what it uploaded)"
  AGAIN=$("$BIN/plexus" submit examples/sweep/sweep.toml --set task.train.sweep.lr=[0.05,0.5])
  "$BIN/plexus" watch "$AGAIN"
  "$BIN/plexus" logs "$AGAIN" report
  exit 0
fi

if [ "$WHICH" = train ]; then
  step "plexus submit examples/ddp_train.toml (4 ranks x DDP over the plexus backend, python: $PY)"
  JOB=$("$BIN/plexus" submit "$DIR/ddp_train.toml")
  echo "job $JOB"
  "$BIN/plexus" watch "$JOB"
  "$BIN/plexus" status "$JOB"

  step "rank 0's training: time and loss per step (plexus logs $JOB train --rank 0)"
  "$BIN/plexus" logs "$JOB" train --rank 0 > "$DIR/rank0.log"
  grep -v '^step ' "$DIR/rank0.log" || true
  printf '%6s  %10s  %9s\n' STEP LOSS STEP-MS
  awk '/^step / { printf "%6d  %10.6f  %9.1f\n", $2, $4, $6 }' "$DIR/rank0.log"
  awk '/^step / && $2 > 1 { print $6 }' "$DIR/rank0.log" | sort -n |
    awk '{ ms[NR] = $1 } END { if (NR) printf "median step time %.1f ms over %d steps (the first left out)\n", ms[int((NR + 1) / 2)], NR }'

  step "the evaluation (plexus logs $JOB evaluate)"
  "$BIN/plexus" logs "$JOB" evaluate
  grep -q '^held-out loss' <("$BIN/plexus" logs "$JOB" evaluate) || { echo "demo: the evaluation did not pass" >&2; exit 1; }
else
  step "plexus submit examples/train.toml"
  JOB=$("$BIN/plexus" submit examples/train.toml)
  echo "job $JOB"
  # Live progress; exits non-zero unless the job succeeded.
  "$BIN/plexus" watch "$JOB"
  "$BIN/plexus" status "$JOB"

  step "the check (plexus logs $JOB evaluate)"
  "$BIN/plexus" logs "$JOB" evaluate
  grep -q '^check ok' <("$BIN/plexus" logs "$JOB" evaluate) || { echo "demo: the check did not pass" >&2; exit 1; }

  step "why training replica 0 runs where it does (plexus explain $JOB train --rank 0)"
  "$BIN/plexus" explain "$JOB" train --rank 0

fi

step "traffic per worker and rail (plexus workers --rails)"
# The counters arrive with the workers' heartbeats (every second): wait for the next one.
sleep 2
"$BIN/plexus" workers --rails | sed -n '/^WORKER  *RAIL/,$p'

if [ -n "$DASHBOARD" ]; then
  step "dashboard (placements with every candidate's Q-value, jobs, workers, rails)"
  # The token is read from its file, not printed into the terminal's scroll-back.
  echo "$DASHBOARD"
fi
if [ "${PLEXUS_DEMO_KEEP:-0}" = 1 ]; then
  echo "the cluster keeps running (PLEXUS_DEMO_KEEP=1): export the lines below to use it, Ctrl-C to stop"
  grep '^export PLEXUS_' "$DIR/up.out"
  wait "$UP"
else
  echo "(the cluster stops now; PLEXUS_DEMO_KEEP=1 make demo keeps it and its dashboard up)"
fi
