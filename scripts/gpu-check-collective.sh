#!/usr/bin/env bash
# Checks the collective endpoint's CUDA staging path on a machine with a GPU: a local cluster of
# 2 workers (`plexus up`, release binaries), a `communicator = true` gang of 2 whose members run
# torch.distributed with the `plexus` backend on CUDA tensors (each member on the node's GPU 0:
# both share it, as two ranks on one GPU do; the data plane only sees host memory), and compare
# every result with what it must be. Prints one line per operation and `gpu-check: ok`, or fails.
#
#   scripts/gpu-check-collective.sh [BIN_DIR]      BIN_DIR: default target/release
#   PYTHON   a python with torch built for CUDA (default: the venv `make torch` installs)
#
# Needs only the release binaries, the python package in python/ (put on PYTHONPATH, no
# install) and torch with CUDA. The cluster lives in a fresh directory under
# $PLEXUS_GPU_CHECK_DIR (default ~/.cache/plexus) and is stopped on exit; as root, with a home
# other users cannot search, `plexus up` then runs tasks as the worker's user, who can use a
# python under /root (a uid per job could not).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release}
PY=${PYTHON:-$(readlink -f .plexus/libtorch)/../../../../bin/python}
PY=$(readlink -f "$PY")
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || { echo "gpu-check: $PY has no CUDA device (torch.cuda.is_available() is False)" >&2; exit 2; }
DIR=${PLEXUS_GPU_CHECK_DIR:-$HOME/.cache/plexus}/gpu-check-$(date +%Y%m%d-%H%M%S)
mkdir -p "$DIR"
"$BIN/plexus" up --workers 2 --dir "$DIR" --port 0 > "$DIR/up.out" 2>&1 &
UP=$!
trap 'kill -TERM $UP 2>/dev/null || true; wait $UP 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  grep -q '^coordinator: ' "$DIR/up.out" && break
  kill -0 "$UP" 2>/dev/null || { cat "$DIR/up.out"; echo "gpu-check: plexus up exited early" >&2; exit 1; }
  sleep 0.1
done
eval "$(grep '^export PLEXUS_' "$DIR/up.out")"

cat > "$DIR/check.py" <<'PYEOF'
import os, sys, torch, torch.distributed as dist
import plexus.distributed  # registers "plexus"
dist.init_process_group(backend="plexus")
r, n = dist.get_rank(), dist.get_world_size()
dev = torch.device("cuda", 0)
def check(name, got, want):
    ok = torch.equal(got.cpu(), want.cpu())
    print(f"rank {r}: {name} on {got.device}: {'ok' if ok else 'WRONG'}", flush=True)
    if not ok:
        print(f"  got {got.cpu()[:8]}\n  want {want.cpu()[:8]}", flush=True); sys.exit(1)
for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int64):
    t = torch.full((1 << 20,), r + 1, dtype=dt, device=dev)
    dist.all_reduce(t)
    check(f"all_reduce {dt}", t, torch.full((1 << 20,), n * (n + 1) // 2, dtype=dt))
t = torch.arange(1000, device=dev, dtype=torch.float32) * (r + 1)
dist.all_reduce(t, op=dist.ReduceOp.MAX)
check("all_reduce max", t, torch.arange(1000, dtype=torch.float32) * n)
b = torch.full((4096,), float(r), device=dev)
dist.broadcast(b, src=n - 1)
check("broadcast", b, torch.full((4096,), float(n - 1)))
out = torch.empty(n * 3, device=dev)
dist.all_gather_into_tensor(out, torch.full((3,), float(r), device=dev))
check("all_gather_into_tensor", out, torch.arange(n, dtype=torch.float32).repeat_interleave(3))
rs = torch.empty(5, device=dev)
dist.reduce_scatter_tensor(rs, torch.ones(5 * n, device=dev))
check("reduce_scatter_tensor", rs, torch.full((5,), float(n)))
model = torch.nn.Linear(64, 8).to(dev)
ddp = torch.nn.parallel.DistributedDataParallel(model)
g = torch.Generator().manual_seed(r)
ddp(torch.randn(16, 64, generator=g).to(dev)).sum().backward()
w = model.weight.grad.detach().clone()
dist.all_reduce(w, op=dist.ReduceOp.MAX); m = w.clone()
w2 = model.weight.grad.detach().clone(); dist.all_reduce(w2, op=dist.ReduceOp.MIN)
check("DDP gradients equal on every rank", m, w2)
dist.barrier()
print(f"rank {r}: all ok", flush=True)
PYEOF

cat > "$DIR/check.toml" <<TOMLEOF
name = "gpu-check"
[[task]]
name = "check"
replicas = 2
communicator = true
timeout = "300s"
command = ["$PY", "$DIR/check.py"]
env = { PYTHONPATH = "$PWD/python" }
TOMLEOF
JOB=$("$BIN/plexus" submit "$DIR/check.toml")
STATUS=0
"$BIN/plexus" watch "$JOB" || STATUS=$?
"$BIN/plexus" logs "$JOB" check --all-ranks || true
[ "$STATUS" = 0 ] || { echo "gpu-check: FAILED (job $JOB; cluster state in $DIR)" >&2; exit 1; }
echo "gpu-check: ok"
