#!/bin/sh
# Entrypoint of the plexus-coordinator image in the compose cluster (docker-compose.yml).
#
# Environment (all optional):
#   PLEXUS_LISTEN     gRPC bind address (default 0.0.0.0:50051)
#   PLEXUS_DATA_DIR   durable state, a named volume in compose (default /var/lib/plexus)
#   PLEXUS_PLACER     least-loaded (default), round-robin, random, locality or rl
# Arguments are passed on to plexus-coordinator (e.g. --heartbeat-timeout-ms 5000).
set -eu
# Flags before the caller's arguments, which may name a subcommand (`migrate --dry-run`).
[ -n "${PLEXUS_PLACER:-}" ] && set -- --placer "$PLEXUS_PLACER" "$@"
set -- --listen "${PLEXUS_LISTEN:-0.0.0.0:50051}" --data-dir "${PLEXUS_DATA_DIR:-/var/lib/plexus}" "$@"
echo "coordinator-entrypoint: exec plexus-coordinator $*" >&2
exec plexus-coordinator "$@"
