#!/usr/bin/env bash
# The GPU check of the `plexus` torch.distributed backend (issue 31): CUDA tensors staged through
# host memory. Runs scripts/gpu_check.py as a gang of MEMBERS (default 4) under
# `plexus-local-gang` (the worker's collective endpoints on loopback, no coordinator, no
# libtorch 2.13: so it runs on a GPU machine that only has its own torch), twice: over the
# `plexus` backend (every op on every dtype checked, DDP checked against one-process training)
# and over torch's Gloo (the same DDP steps), then prints the side-by-side table.
#
#   scripts/gpu-check.sh [BIN_DIR [gpu_check.py flags...]]   BIN_DIR: default target/release
#   PYTHON   a python with torch (default: python3)
#   DEVICE   cuda (default) or cpu (the same checks on CPU tensors, e.g. without a GPU)
#   OUT      where the JSON summaries go (default: a temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release}
[ $# -gt 0 ] && shift
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
MEMBERS=${MEMBERS:-4}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
"$PY" -c "import torch, sys; sys.exit(0 if '$DEVICE' == 'cpu' or torch.cuda.is_available() else 2)" \
  || { echo "gpu-check: $PY's torch sees no CUDA device (DEVICE=cpu runs the checks on CPU tensors)" >&2; exit 2; }
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONWARNINGS=${PYTHONWARNINGS:-ignore}
for backend in plexus gloo; do
  extra=()
  [ "$backend" = gloo ] && extra=(--skip-ops)
  echo "== $backend: $MEMBERS members, $DEVICE tensors"
  "$BIN/plexus-local-gang" --members "$MEMBERS" -- \
    "$PY" scripts/gpu_check.py --backend "$backend" --device "$DEVICE" --json "$OUT/$backend.json" "${extra[@]}" "$@"
done
"$PY" - "$OUT" <<'PYEOF'
import json, sys
p, g = (json.load(open(f"{sys.argv[1]}/{b}.json")) for b in ("plexus", "gloo"))
print(f"\n{p['world']} members on {p['gpu'] or 'cpu'} ({p['device']} tensors), torch {p['torch']}")
print(f"| backend | op checks | DDP step (ms, median) | 4 KiB all_reduce (µs, median) | max rel. diff vs one process | param_sum |")
print("|---|---|---|---|---|---|")
for s in (p, g):
    print(f"| {s['backend']} | {s['op_checks']} | {s['step_ms_median']:.2f} | {s['allreduce_4k_us_median']:.0f} | "
          f"{s['max_rel_diff_vs_one_process']:.1e} | {s['param_sum']:.6f} |")
print(f"| plexus ÷ gloo | | {p['step_ms_median'] / g['step_ms_median']:.2f} | "
      f"{p['allreduce_4k_us_median'] / g['allreduce_4k_us_median']:.2f} | | "
      f"{abs(p['param_sum'] - g['param_sum']) / abs(g['param_sum']):.1e} rel. |")
PYEOF
echo "gpu-check: ok"
