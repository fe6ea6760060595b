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
# Arguments are passed on to plexus-coordinator (e.g. --heartbeat-timeout-ms 5000).
set -eu
# Flags before the caller's arguments, which may name a subcommand (`migrate --dry-run`).
[ -n "${PLEXUS_PLACER:-}" ] && set -- --placer "$PLEXUS_PLACER" "$@"
for san in ${PLEXUS_TLS_SANS:-coordinator}; do set -- --tls-san "$san" "$@"; done
set -- --listen "${PLEXUS_LISTEN:-0.0.0.0:50051}" --http "${PLEXUS_HTTP:-0.0.0.0:8265}" --data-dir "${PLEXUS_DATA_DIR:-/var/lib/plexus}" \
  --join-dir "${PLEXUS_JOIN_DIR:-/var/lib/plexus-join}" "$@"
echo "coordinator-entrypoint: exec plexus-coordinator $*" >&2
exec plexus-coordinator "$@"
