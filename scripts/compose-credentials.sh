#!/usr/bin/env bash
# Prints the exports that point the host `plexus` CLI at the running compose cluster: its URL, the
# cluster CA, and the first admin token (copied out of the coordinator's container into
# .plexus/compose-<project>/, mode 0600). Use: eval "$(bash scripts/compose-credentials.sh)".
set -euo pipefail
source "$(dirname "$0")/compose-lib.sh"
fetch_credentials 30 >&2
echo "export PLEXUS_COORDINATOR=$PLEXUS_URL"
echo "export PLEXUS_CA=$PLEXUS_CA"
echo "export PLEXUS_TOKEN_FILE=$PLEXUS_TOKEN_FILE"
