#!/usr/bin/env bash
# The Python client (python/, the package plexus-client, imported as `plexus`) in a venv of its
# own outside the clone, with pytest; and its tests. Idempotent: the package is (re)installed
# only when its sources or proto/proto/plexus.proto changed (a hash kept in the venv), so a
# second run only checks.
#
#   scripts/python-client.sh                       set up (or check) the venv; prints its python
#   scripts/python-client.sh test [BIN_DIR] [ARGS] also run pytest on python/tests (ARGS passed
#                                                  on) against the binaries in BIN_DIR (default
#                                                  $PLEXUS_BIN_DIR, else target/debug): the tests
#                                                  start a real cluster with `plexus up`
#
#   PLEXUS_PYCLIENT_VENV   where the venv lives (default ~/.cache/plexus/pyclient-venv)
#   PYTHON                 the python that makes it (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${PLEXUS_PYCLIENT_VENV:-$HOME/.cache/plexus/pyclient-venv}
PY=${PYTHON:-python3}
STAMP=$VENV/.plexus-client.stamp

# What the installed package is built from: the venv's python, the package's sources (not its
# tests, which run from the tree) and the proto. Generated stubs and build leftovers are not
# sources.
sources_hash() {
  {
    "$VENV/bin/python" --version
    find python proto/proto/plexus.proto -type f \
      ! -path 'python/tests/*' ! -path '*/__pycache__/*' ! -path 'python/build/*' ! -path 'python/dist/*' \
      ! -path 'python/proto/*' ! -path '*.egg-info/*' ! -name 'plexus_pb2*' -print0 \
      | LC_ALL=C sort -z | xargs -0 sha256sum
  } | sha256sum | cut -d' ' -f1
}

if ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
  echo "python-client: making the venv $VENV" >&2
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi
HASH=$(sources_hash)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$HASH" ] || ! "$VENV/bin/python" -c 'import plexus._pb, pytest' 2>/dev/null; then
  echo "python-client: installing ./python (stubs generated from proto/proto/plexus.proto) and pytest into $VENV" >&2
  # setuptools builds in python/build/ and never removes what the sources no longer have.
  rm -rf python/build
  rm -f "$STAMP"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check ./python pytest
  echo "$HASH" > "$STAMP"
fi

if [ "${1:-}" != test ]; then
  echo "$VENV/bin/python"
  exit 0
fi
shift
BIN=${PLEXUS_BIN_DIR:-target/debug}
if [ $# -gt 0 ] && [ -d "$1" ]; then
  BIN=$1
  shift
fi
BIN=$(cd "$BIN" && pwd)
# From the repository root, so that `import plexus` finds the installed package, not python/.
PLEXUS_BIN_DIR=$BIN exec "$VENV/bin/python" -m pytest -p no:cacheprovider python/tests "$@"
