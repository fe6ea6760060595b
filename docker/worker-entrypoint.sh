#!/bin/sh
# Entrypoint of the plexus-worker image in the compose cluster (docker-compose.yml).
#
# Every worker container is on the control network and on each rail network. Workers are started
# by `docker compose up --scale worker=N`, so nothing here is fixed per container: at each start
# this script asks Docker's DNS for the reverse name of each of the container's addresses, which is
# `<container-name>.<network-name>` (e.g. `plexus_worker_3.plexus_rail-a`), and so learns
#   * which address is on which network: the control address is advertised for PeerService, the
#     rail addresses become `--rail` (in rail order);
#   * the container's name, which keys its data directory under the shared volume
#     (DATA_ROOT/<container-name>), so the worker keeps its id and cache across
#     `docker compose restart` / `stop` + `start`, and a replacement of replica N takes over
#     replica N's identity.
#
# Environment (all optional):
#   PLEXUS_COORDINATOR      coordinator URL (default https://coordinator:50051)
#   PLEXUS_JOIN_DIR         where the coordinator shares ca.pem and join.token (default
#                           /var/lib/plexus-join): the worker joins with them on its first start
#   PLEXUS_DATA_ROOT        the shared volume (default /var/lib/plexus-worker)
#   PLEXUS_PEER_PORT        PeerService port (default 7001)
#   PLEXUS_CONTROL_NETWORK  network whose address is advertised (default control)
#   PLEXUS_RAIL_NETWORKS    rail networks, in rail order (default "rail-a rail-b")
#   PLEXUS_RAILS            rail addresses, overriding the look-up ("10.1.0.5 10.2.0.5")
#   PLEXUS_ADVERTISE        PeerService URL, overriding the look-up
#   PLEXUS_WORKER_CPUS, PLEXUS_WORKER_MEMORY, PLEXUS_WORKER_CACHE   --cpus, --memory, --cache
#   PLEXUS_RAIL_PORT        --rail-port: the data plane's port on every rail (default: any)
# Arguments are passed on to plexus-worker.
set -eu

COORDINATOR=${PLEXUS_COORDINATOR:-https://coordinator:50051}
JOIN_DIR=${PLEXUS_JOIN_DIR:-/var/lib/plexus-join}
DATA_ROOT=${PLEXUS_DATA_ROOT:-/var/lib/plexus-worker}
PORT=${PLEXUS_PEER_PORT:-7001}
CONTROL_NET=${PLEXUS_CONTROL_NETWORK:-control}
RAIL_NETS=${PLEXUS_RAIL_NETWORKS:-rail-a rail-b}

log() { echo "worker-entrypoint: $*" >&2; }

# The address of this container on network $1 (compose prefixes network names with the project:
# `plexus_rail-a`), from the reverse look-ups in $LOOKUPS ("ip name.network" lines).
addr_on() {
  echo "$LOOKUPS" | awk -v net="$1" '{
      n = $2; sub(/^[^.]*\./, "", n)
      if (n == net || substr(n, length(n) - length(net)) == "_" net || substr(n, length(n) - length(net)) == "-" net) { print $1; exit }
    }'
}

NAME='' CONTROL_IP='' RAILS=${PLEXUS_RAILS:-}
i=0
while :; do
  LOOKUPS=
  for ip in $(hostname -I); do
    # -s dns: skip /etc/hosts, which maps every address to the bare hostname.
    ptr=$(getent -s dns hosts "$ip" 2>/dev/null | awk '{ print $2; exit }') || true
    case "$ptr" in *.*) LOOKUPS="$LOOKUPS$ip $ptr
" ;; esac
  done
  NAME=$(echo "$LOOKUPS" | awk 'NF == 2 { n = $2; sub(/\..*$/, "", n); print n; exit }')
  CONTROL_IP=$(addr_on "$CONTROL_NET")
  missing=
  [ -n "$CONTROL_IP" ] || missing="$CONTROL_NET"
  if [ -z "${PLEXUS_RAILS:-}" ]; then
    RAILS=
    for net in $RAIL_NETS; do
      a=$(addr_on "$net")
      if [ -n "$a" ]; then RAILS="$RAILS $a"; else missing="$missing $net"; fi
    done
  fi
  [ -z "$missing" ] && break
  i=$((i + 1))
  if [ "$i" -ge 50 ]; then
    log "cannot find this container's address on network(s):$missing (addresses: $(hostname -I); reverse names: $(echo "$LOOKUPS" | tr '\n' ' '))"
    log "attach the container to those networks, or set PLEXUS_RAILS and PLEXUS_ADVERTISE"
    [ -n "${PLEXUS_ADVERTISE:-}" ] && [ -n "$RAILS" ] || exit 1
    break
  fi
  sleep 0.2
done

NAME=${NAME:-$(hostname)}
DIR=$DATA_ROOT/$NAME
mkdir -p "$DIR"
echo "$DIR" > /run/plexus-worker-dir
ADVERTISE=${PLEXUS_ADVERTISE:-https://$CONTROL_IP:$PORT}

set -- --coordinator "$COORDINATOR" --data-dir "$DIR" --listen "0.0.0.0:$PORT" --advertise "$ADVERTISE" \
  --ca "$JOIN_DIR/ca.pem" --join-token-file "$JOIN_DIR/join.token" "$@"
for r in $RAILS; do set -- "$@" --rail "$r"; done
[ -n "${PLEXUS_WORKER_CPUS:-}" ] && set -- "$@" --cpus "$PLEXUS_WORKER_CPUS"
[ -n "${PLEXUS_WORKER_MEMORY:-}" ] && set -- "$@" --memory "$PLEXUS_WORKER_MEMORY"
[ -n "${PLEXUS_WORKER_CACHE:-}" ] && set -- "$@" --cache "$PLEXUS_WORKER_CACHE"
[ -n "${PLEXUS_RAIL_PORT:-}" ] && set -- "$@" --rail-port "$PLEXUS_RAIL_PORT"
log "$NAME: data $DIR, control $CONTROL_IP, rails$(for r in $RAILS; do printf ' %s' "$r"; done)"
log "exec plexus-worker $*"
exec plexus-worker "$@"
