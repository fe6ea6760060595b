#!/bin/sh
# Entrypoint of the plexus-coordinator image in the compose cluster (docker-compose.yml).
#
# Environment (all optional):
#   PLEXUS_LISTEN     gRPC bind address (default 0.0.0.0:50051)
#   PLEXUS_HTTP       dashboard and /metrics bind address (default 0.0.0.0:8265; none: off)
#   PLEXUS_DATA_DIR   durable state, a named volume in compose (default /var/lib/plexus)
#   PLEXUS_PLACER     least-loaded (default), round-robin, random, locality or rl
#   PLEXUS_JOIN_DIR   shared with the workers: ca.pem and join.token are copied there at every
#                     start (default /var/lib/plexus-join)
#   PLEXUS_TLS_SANS   extra names for the coordinator's certificate (default "coordinator")
#   PLEXUS_STORE      empty (default): the state is in sled in PLEXUS_DATA_DIR. etcd://h:p,…/prefix:
#                     the state is in etcd, this coordinator one of an HA control plane (the `ha`
#                     profile); it then waits up to 60 s for etcd to answer before it starts
#   PLEXUS_ADVERTISE  with etcd: the URL workers and clients reach this coordinator at (default
#                     https://<first of PLEXUS_TLS_SANS>:<port of PLEXUS_LISTEN>)
#   PLEXUS_LEASE_TTL  with etcd: the leader's lease (default 5s)
#   PLEXUS_REQUIRE_STORE=1  refuse to start unless PLEXUS_STORE is etcd://… (the `ha` profile's
#                     other coordinators, which would otherwise each run a cluster of their own)
# Arguments are passed on to plexus-coordinator (e.g. --heartbeat-timeout-ms 5000).
set -eu
log() { echo "coordinator-entrypoint: $*" >&2; }
SANS=${PLEXUS_TLS_SANS:-coordinator}
LISTEN=${PLEXUS_LISTEN:-0.0.0.0:50051}
STORE=${PLEXUS_STORE:-}
# plexus-coordinator reads PLEXUS_STORE itself: an empty one must not reach it.
unset PLEXUS_STORE

# Waits until one of the etcd endpoints of $1 answers /health with true: the cluster then has a
# leader. A coordinator that cannot reach etcd exits, and compose would restart it again and again.
wait_etcd() {
  hosts=${1#etcd://}; hosts=${hosts%%/*}
  i=0
  while [ "$i" -lt 120 ]; do
    for hp in $(echo "$hosts" | tr ',' ' '); do
      h=${hp%:*} p=${hp##*:}
      if timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf "GET /health HTTP/1.0\r\n\r\n" >&3 && cat <&3' "$h" "$p" 2>/dev/null \
         | grep -q '"health":"true"'; then
        return 0
      fi
    done
    i=$((i + 1)); sleep 0.5
  done
  log "no etcd endpoint of $1 answered /health within 60 s; starting anyway"
}

case "$STORE" in
  etcd://*)
    wait_etcd "$STORE"
    first_san=${SANS%% *}
    set -- --store "$STORE" --advertise "${PLEXUS_ADVERTISE:-https://$first_san:${LISTEN##*:}}" \
      --lease-ttl "${PLEXUS_LEASE_TTL:-5s}" "$@" ;;
  *)
    if [ "${PLEXUS_REQUIRE_STORE:-0}" = 1 ]; then
      log "PLEXUS_STORE is '$STORE', not etcd://…, and this coordinator is one of an HA control plane: start the ha profile with its settings (docker compose --env-file docker/ha.env up, or PLEXUS_HA=1 make compose-up)"
      exit 1
    fi
    [ -z "$STORE" ] || set -- --store "$STORE" "$@" ;;
esac
# Flags before the caller's arguments, which may name a subcommand (`migrate --dry-run`).
[ -n "${PLEXUS_PLACER:-}" ] && set -- --placer "$PLEXUS_PLACER" "$@"
for san in $SANS; do set -- --tls-san "$san" "$@"; done
set -- --listen "$LISTEN" --http "${PLEXUS_HTTP:-0.0.0.0:8265}" --data-dir "${PLEXUS_DATA_DIR:-/var/lib/plexus}" \
  --join-dir "${PLEXUS_JOIN_DIR:-/var/lib/plexus-join}" "$@"
log "exec plexus-coordinator $*"
exec plexus-coordinator "$@"
