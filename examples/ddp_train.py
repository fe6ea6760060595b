#!/usr/bin/env python
"""Data-parallel training on a Plexus gang that checkpoints as it goes and resumes after a failure.

The model and data are those of the anchor (../shared/anchors/ddp_train.py): an MLP of 512 inputs,
3 hidden layers of equal width sized by --params-m (millions of float32 parameters) and 16
outputs, trained with SGD under torch DistributedDataParallel on a synthetic regression task drawn
from a fixed random "teacher" network. Everything is seeded: rank r of step s always sees the same
batch, so a run that resumes from step s trains on exactly the data an uninterrupted one would.

Run it as the members of a `communicator = true` task with `checkpoint = "ckpt"`
(examples/ddp_train.toml): DDP's gradient allreduce goes over the `plexus` torch.distributed
backend (the worker's collective endpoint and the data plane's rails).

Checkpoints. Every --checkpoint-every steps each rank writes its step, model and optimiser to
$PLEXUS_CHECKPOINT (the task's `checkpoint` output), atomically: a temporary file renamed over
it, so a rank killed while writing leaves the previous one whole. When an attempt fails or is
stopped (a member killed, a timeout, the gang restarted), each worker keeps the file its rank left
and the restarted gang's ranks find theirs at $PLEXUS_RESUME_FROM, fetched over the data plane
from wherever it was kept. The ranks then agree on the newest step any of them holds (a rank whose
worker was lost holds none) and the lowest rank holding it broadcasts that state: at most one
checkpoint interval of steps is lost. The final state is written to $PLEXUS_CHECKPOINT at the end;
that output is what `--evaluate` reads.

Each rank prints `step S loss L ms T` per step (L: its shard's loss before the step, T: the
step's time: forward, backward with the gradient allreduce, optimiser step), `checkpoint step S`
when one is written, and at the end `done steps A..B loss_first X loss_last Y param_sum Z`.

  --evaluate CKPT...   loads the final checkpoints of the ranks (every rank's, e.g.
                       $PLEXUS_IN/train/*/ckpt), checks that they hold the same parameters (DDP
                       keeps the replicas identical) and the same config, and reports the model's
                       loss on held-out batches against the untrained model's; fails unless it is
                       lower.
"""
import argparse, glob, os, sys, time, warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore", message=".*NumPy.*")  # torch without numpy warns; nothing here uses it
import torch
import torch.distributed as dist
import torch.nn as nn

D_IN, D_OUT, LAYERS = 512, 16, 3


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="plexus")
    p.add_argument("--import", dest="imports", action="append", default=[],
                   help="a module to import before init_process_group (default: plexus.distributed)")
    p.add_argument("--params-m", type=float, default=1.0)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=64, help="global batch; each rank takes batch / world")
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints")
    p.add_argument("--checkpoint", help="where to write checkpoints (default: $PLEXUS_CHECKPOINT)")
    p.add_argument("--resume-from", help="a checkpoint to resume from (default: $PLEXUS_RESUME_FROM)")
    p.add_argument("--evaluate", nargs="+", metavar="CKPT", help="evaluate final checkpoints (globs allowed)")
    p.add_argument("--eval-batches", type=int, default=8)
    a = p.parse_args()
    if a.checkpoint_every < 1 or a.steps < 1:
        p.error("--steps and --checkpoint-every must be at least 1")
    return a


def width_for(params):
    # D_IN*h + (LAYERS-1)*h*h + h*D_OUT (+ biases) ~= params: solve the quadratic for h.
    a, b = LAYERS - 1, D_IN + D_OUT + LAYERS
    return max(8, int((-b + (b * b + 4 * a * params) ** 0.5) / (2 * a)))


def mlp(h):
    layers, d = [], D_IN
    for _ in range(LAYERS):
        layers += [nn.Linear(d, h), nn.ReLU()]
        d = h
    layers.append(nn.Linear(d, D_OUT))
    return nn.Sequential(*layers)


def batch(teacher, seed, step, rank, n):
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + rank)
    x = torch.randn(n, D_IN, generator=g)
    with torch.no_grad():
        y = teacher(x)
    return x, y


def models(a):
    """The teacher and the student, as the anchor seeds them."""
    torch.manual_seed(a.seed + 1)
    teacher = mlp(64)
    torch.manual_seed(a.seed)
    return teacher, mlp(width_for(a.params_m * 1e6))


def config(a, world):
    return {"params_m": a.params_m, "seed": a.seed, "world": world, "batch": a.batch, "lr": a.lr}


def save(path, step, model, opt, cfg):
    tmp = f"{path}.tmp"
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict(), "config": cfg}, tmp)
    os.replace(tmp, path)


def load(path, cfg):
    """(step, state) of a checkpoint written with the same config."""
    ck = torch.load(path, weights_only=True)
    if ck.get("config") != cfg:
        sys.exit(f"ddp_train: checkpoint {path} was written with {ck.get('config')}, this run is {cfg}")
    return ck["step"], ck


def resume(path, model, opt, cfg, rank, world):
    """The step every rank starts at: the newest any rank holds, broadcast by the lowest holding it."""
    step, ck = (0, None)
    if path:
        step, ck = load(path, cfg)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
    newest = torch.tensor([step], dtype=torch.int64)
    dist.all_reduce(newest, op=dist.ReduceOp.MAX)
    newest = int(newest.item())
    src = torch.tensor([rank if step == newest else world], dtype=torch.int64)
    dist.all_reduce(src, op=dist.ReduceOp.MIN)
    src = int(src.item())
    if newest > 0:
        # SGD without momentum keeps no optimiser state beyond the parameters.
        for t in model.state_dict().values():
            dist.broadcast(t, src)
    if path:
        print(f"resumed from step {newest} (this rank held step {step}; rank {src} broadcast it)", flush=True)
    elif newest > 0:
        print(f"resumed from step {newest} (this rank held none; rank {src} broadcast it)", flush=True)
    else:
        print("no checkpoint to resume from: starting at step 0", flush=True)
    return newest


def train(a):
    torch.set_num_threads(a.threads)
    for m in a.imports or ["plexus.distributed"]:
        __import__(m)
    dist.init_process_group(backend=a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.batch % world:
        sys.exit(f"ddp_train: --batch {a.batch} does not split over {world} ranks")
    path = a.checkpoint or os.environ.get("PLEXUS_CHECKPOINT")
    if not path:
        sys.exit("ddp_train: no checkpoint path: run it as a task with `checkpoint = ...`, or pass --checkpoint")
    cfg = config(a, world)
    teacher, model = models(a)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    start = resume(a.resume_from or os.environ.get("PLEXUS_RESUME_FROM"), model, opt, cfg, rank, world)
    params = sum(p.numel() for p in model.parameters())
    print(f"# ddp_train: rank {rank} of {world}, backend {a.backend}, {params / 1e6:.2f} M parameters "
          f"({params * 4 / 2**20:.1f} MiB of gradient per step), global batch {a.batch}, steps {start}..{a.steps}, "
          f"checkpoint every {a.checkpoint_every}, torch {torch.__version__}", flush=True)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb)
    loss_fn = nn.MSELoss()
    losses = []
    for step in range(start, a.steps):
        x, y = batch(teacher, a.seed, step, rank, a.batch // world)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        ms = 1e3 * (time.perf_counter() - t0)
        losses.append(loss.item())
        print(f"step {step + 1} loss {losses[-1]:.6f} ms {ms:.1f}", flush=True)
        if (step + 1) % a.checkpoint_every == 0 and step + 1 < a.steps:
            save(path, step + 1, model, opt, cfg)
            print(f"checkpoint step {step + 1}", flush=True)
    save(path, a.steps, model, opt, cfg)
    psum = sum(p.detach().double().sum().item() for p in model.parameters())
    first, last = (losses[0], losses[-1]) if losses else (float("nan"), float("nan"))
    print(f"done steps {start}..{a.steps} loss_first {first:.6f} loss_last {last:.6f} param_sum {psum:.9g}", flush=True)
    dist.destroy_process_group()


def evaluate(a):
    paths = sorted(p for pat in a.evaluate for p in (glob.glob(pat) or [pat]))
    if not paths:
        sys.exit("ddp_train --evaluate: no checkpoint given")
    cks = []
    for p in paths:
        if not os.path.isfile(p):
            sys.exit(f"ddp_train --evaluate: {p}: no such checkpoint")
        cks.append(torch.load(p, weights_only=True))
    ref = cks[0]
    for p, ck in zip(paths[1:], cks[1:]):
        if ck["config"] != ref["config"] or ck["step"] != ref["step"]:
            sys.exit(f"ddp_train --evaluate: {p} is step {ck['step']} of {ck['config']}, {paths[0]} step {ref['step']} of {ref['config']}")
        for k, t in ref["model"].items():
            if not torch.equal(t, ck["model"][k]):
                sys.exit(f"ddp_train --evaluate: {p} and {paths[0]} differ in {k}: the replicas diverged")
    cfg = ref["config"]
    a.params_m, a.seed = cfg["params_m"], cfg["seed"]
    teacher, untrained = models(a)
    trained = mlp(width_for(a.params_m * 1e6))
    trained.load_state_dict(ref["model"])
    loss_fn = nn.MSELoss()
    n = max(1, cfg["batch"])

    def held_out(model):
        # Batches no training step draws: steps beyond any run's, a rank beyond the world.
        with torch.no_grad():
            return sum(loss_fn(model(x), y).item() for x, y in
                       (batch(teacher, a.seed, 10**6 + i, cfg["world"], n) for i in range(a.eval_batches))) / a.eval_batches

    before, after = held_out(untrained), held_out(trained)
    print(f"evaluated {len(paths)} checkpoint(s) of step {ref['step']}: identical parameters on every rank")
    print(f"held-out loss {after:.6f} (untrained model {before:.6f}) over {a.eval_batches} batches of {n}")
    if not after < before:
        sys.exit("ddp_train --evaluate: training did not lower the held-out loss")


def main():
    a = parse()
    evaluate(a) if a.evaluate else train(a)


if __name__ == "__main__":
    main()
