#!/usr/bin/env bash
# Installs libtorch (from the PyPI torch==2.13.0 wheel, which tch 0.26 is built against) into a
# venv outside the clone, once, and points .plexus/libtorch at it so cargo (via
# .cargo/config.toml) finds it. Idempotent: a second run only checks.
#
#   PLEXUS_TORCH_VENV   where the venv lives (default ~/.cache/plexus/torch-2.13.0)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=2.13.0
VENV=${PLEXUS_TORCH_VENV:-$HOME/.cache/plexus/torch-$VERSION}
PY=${PYTHON:-python3}

site() { "$VENV/bin/python" -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>/dev/null; }

if ! TORCH_DIR=$(site) || [ ! -f "$TORCH_DIR/lib/libtorch_cpu.so" ]; then
  echo "setup-torch: installing torch==$VERSION into $VENV (once; ~4.7 GB)" >&2
  mkdir -p "$(dirname "$VENV")"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "torch==$VERSION"
  TORCH_DIR=$(site)
fi
[ -f "$TORCH_DIR/lib/libtorch_cpu.so" ] || { echo "setup-torch: no libtorch_cpu.so under $TORCH_DIR" >&2; exit 1; }
mkdir -p .plexus
ln -sfn "$TORCH_DIR" .plexus/libtorch
echo "$TORCH_DIR"
