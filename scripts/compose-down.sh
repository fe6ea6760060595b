#!/usr/bin/env bash
# `make compose-down`: stops the compose cluster and removes its containers, networks and volumes
# (the images stay). Settings: scripts/compose-lib.sh.
set -euo pipefail
source "$(dirname "$0")/compose-lib.sh"
compose_down 5
# Its context (compose-up made one) goes with it.
[ -x "$PLEXUS_CLI" ] || PLEXUS_CLI=target/release/plexus
[ -x "$PLEXUS_CLI" ] && "$PLEXUS_CLI" context delete "compose-$COMPOSE_PROJECT_NAME" >/dev/null 2>&1 || true
