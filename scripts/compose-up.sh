#!/usr/bin/env bash
# `make compose-up`: builds what is missing (base image, binaries, images), starts the compose
# cluster (coordinator + PLEXUS_WORKERS workers; with PLEXUS_HA=1 the `ha` profile, also 3 etcd
# members and 2 more coordinators) in the background, waits until every worker has registered,
# and prints how to use it. Settings: scripts/compose-lib.sh.
set -euo pipefail
source "$(dirname "$0")/compose-lib.sh"
bash scripts/docker-images.sh
[ -x "$PLEXUS_CLI" ] || PLEXUS_CLI=target/release/plexus
compose up -d --scale "worker=$PLEXUS_WORKERS"
wait_workers 90 "$PLEXUS_WORKERS"
"$PLEXUS_CLI" --coordinator "$PLEXUS_URL" workers
# A context for this cluster (made current): the CLI and the Python client reach it with no
# exported variable (`plexus context list`).
"$PLEXUS_CLI" context set "compose-$COMPOSE_PROJECT_NAME" --to "$PLEXUS_URL" --ca-file "$PLEXUS_CA" \
  --token "$PLEXUS_TOKEN_FILE" --dashboard "http://127.0.0.1:$PLEXUS_HTTP_PORT" \
  || echo "compose-up: could not write a context for the cluster; use the exports below" >&2
DOWN="make compose-down"
[ "$COMPOSE_PROJECT_NAME" = plexus ] || DOWN="COMPOSE_PROJECT_NAME=$COMPOSE_PROJECT_NAME $DOWN"
WHAT="coordinator at $PLEXUS_URL"
# The ha profile: plain compose commands need its settings too.
if [ "${PLEXUS_HA:-0}" = 1 ]; then
  COMPOSE+=(--env-file docker/ha.env)
  WHAT="3 etcd members, 3 coordinators ($(echo "$PLEXUS_COORDINATORS" | sed 's|https://||g; s|:50051||g')) at $PLEXUS_URL (the CLI finds the leader among them)"
fi
cat <<MSG

Plexus is running in containers (project $COMPOSE_PROJECT_NAME): $WHAT, $PLEXUS_WORKERS workers.
  dashboard: http://127.0.0.1:$PLEXUS_HTTP_PORT/login?token=\$(cat $PLEXUS_TOKEN_FILE)   (metrics at /metrics)
  export PLEXUS_COORDINATOR=$PLEXUS_URL PLEXUS_CA=$PLEXUS_CA PLEXUS_TOKEN_FILE=$PLEXUS_TOKEN_FILE
  (or: eval "\$(bash scripts/compose-credentials.sh)")
  $PLEXUS_CLI submit examples/fanout.toml --watch
  $PLEXUS_CLI status; $PLEXUS_CLI workers
  ${COMPOSE[*]} -p $COMPOSE_PROJECT_NAME up -d --scale worker=6     # more (or fewer) workers
  ${COMPOSE[*]} -p $COMPOSE_PROJECT_NAME logs -f coordinator
  $DOWN      # stop; removes containers, networks, volumes
MSG
[ "${PLEXUS_HA:-0}" = 1 ] && echo "  $PLEXUS_CLI coordinators     # who leads; ${COMPOSE[*]} -p $COMPOSE_PROJECT_NAME kill coordinator shows a standby take over"
true
