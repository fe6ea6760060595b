#!/bin/sh
# Health check of a worker container: healthy once the coordinator lists this worker (by the id in
# its data directory) as alive.
set -eu
dir=$(cat /run/plexus-worker-dir)
id=$(cat "$dir/worker-id")
plexus workers -o json | tr -d ' \n' | grep -q "\"worker_id\":\"$id\",\"alive\":true"
