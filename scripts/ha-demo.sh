#!/usr/bin/env bash
# `make ha-demo`: an HA control plane on loopback. A 3-member etcd, three coordinators on it
# (--store etcd://...), three workers that know all three, a job of 300 subtasks; the leader is
# killed with kill -9 mid-job, a standby takes over, the job finishes. Everything lives in a fresh
# directory under .plexus/ and is stopped at the end, even on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${PLEXUS_BIN:-target/debug}
TTL=${PLEXUS_LEASE_TTL:-2s}
command -v etcd >/dev/null || { echo "ha-demo: etcd is not installed (make deps installs Debian's etcd-server)" >&2; exit 1; }
DIR=$(realpath -m ".plexus/ha-demo-$(date +%Y%m%d-%H%M%S)")
mkdir -p "$DIR"
PIDS=()
stop() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# etcd: three members on loopback.
CLUSTER=""; CLIENTS=()
for i in 1 2 3; do
  c=$(free_port); p=$(free_port)
  CLIENTS+=("127.0.0.1:$c"); PEERS[$i]=$p; CPORT[$i]=$c
  CLUSTER+="${CLUSTER:+,}e$i=http://127.0.0.1:$p"
done
for i in 1 2 3; do
  etcd --name "e$i" --data-dir "$DIR/etcd-$i" \
    --listen-client-urls "http://127.0.0.1:${CPORT[$i]}" --advertise-client-urls "http://127.0.0.1:${CPORT[$i]}" \
    --listen-peer-urls "http://127.0.0.1:${PEERS[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${PEERS[$i]}" \
    --initial-cluster "$CLUSTER" --initial-cluster-state new --initial-cluster-token "plexus-ha-demo-$$" \
    --auto-compaction-mode revision --auto-compaction-retention 1000 > "$DIR/etcd-$i.log" 2>&1 &
  PIDS+=($!)
done
STORE="etcd://$(IFS=,; echo "${CLIENTS[*]}")/plexus"
echo "etcd: 3 members at ${CLIENTS[*]}"

# Three coordinators, one after the other (the first makes the CA and the first tokens).
URLS=(); CPIDS=()
for i in 1 2 3; do
  RUST_LOG=info "$BIN/plexus-coordinator" --store "$STORE" --listen 127.0.0.1:0 --http none \
    --data-dir "$DIR/coordinator-$i" --lease-ttl "$TTL" > "$DIR/coordinator-$i.out" 2> "$DIR/coordinator-$i.log" &
  CPIDS+=($!); PIDS+=($!)
  for _ in $(seq 1 300); do
    a=$(sed -n 's/^plexus-coordinator listening on //p' "$DIR/coordinator-$i.out")
    [ -n "$a" ] && break; sleep 0.1
  done
  [ -n "$a" ] || { tail -n 20 "$DIR/coordinator-$i.log"; echo "coordinator $i did not start" >&2; exit 1; }
  URLS+=("https://$a")
done
LIST=$(IFS=,; echo "${URLS[*]}")
export PLEXUS_COORDINATOR="$LIST" PLEXUS_CA="$DIR/coordinator-1/ca.pem" PLEXUS_TOKEN_FILE="$DIR/coordinator-1/admin.token"
echo "coordinators: $LIST (lease TTL $TTL)"

for i in 1 2 3; do
  RUST_LOG=info "$BIN/plexus-worker" --coordinator "$LIST" --data-dir "$DIR/worker-$i" --ca "$PLEXUS_CA" \
    --join-token-file "$DIR/coordinator-1/join.token" --cpus 2 --metrics none > "$DIR/worker-$i.log" 2>&1 &
  PIDS+=($!)
done
for _ in $(seq 1 300); do
  n=$("$BIN/plexus" workers 2>/dev/null | grep -c ' yes ' || true)
  [ "$n" -ge 3 ] && break; sleep 0.2
done
"$BIN/plexus" coordinators

cat > "$DIR/job.toml" <<'EOF'
name = "ha-demo"
[[task]]
name = "work"
replicas = 300
command = ["sh", "-c", "sleep 0.05; echo done $PLEXUS_RANK"]
EOF
JOB=$("$BIN/plexus" submit "$DIR/job.toml")
echo "submitted $JOB (300 subtasks)"
sleep 3
"$BIN/plexus" status "$JOB" | head -n 3
LEADER=$("$BIN/plexus" coordinators | awk '$1 == "leader" {print $2}')
for i in 0 1 2; do [ "${URLS[$i]}" = "$LEADER" ] && VICTIM=${CPIDS[$i]}; done
echo "kill -9 of the leader $LEADER (pid $VICTIM)"
kill -KILL "$VICTIM"
T0=$(date +%s.%N)
for _ in $(seq 1 200); do
  NEW=$("$BIN/plexus" coordinators 2>/dev/null | awk '$1 == "leader" {print $2}' || true)
  if [ -n "$NEW" ] && [ "$NEW" != "$LEADER" ] && "$BIN/plexus" status >/dev/null 2>&1; then break; fi
  sleep 0.1
done
echo "new leader $NEW after $(python3 -c "import time; print(round(time.time() - $T0, 2))") s"
"$BIN/plexus" coordinators
"$BIN/plexus" watch "$JOB"
"$BIN/plexus" status "$JOB"
echo "state and logs in $DIR"
