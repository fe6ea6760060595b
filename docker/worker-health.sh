#!/bin/sh
# Health check of a worker container: healthy while the worker is registered with the coordinator
# (it keeps DIR/registered for as long as its registration lasts), which needs no credentials.
set -eu
dir=$(cat /run/plexus-worker-dir)
test -f "$dir/registered"
