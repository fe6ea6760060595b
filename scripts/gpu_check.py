#!/usr/bin/env python
"""The GPU check of the `plexus` torch.distributed backend (issue 31): run by every member of a
gang (`scripts/gpu-check.sh` starts it under the worker's `local_gang`), on CUDA tensors when the
node has a GPU (`--device cuda`, every member on GPU 0: the data plane only sees host memory),
or on CPU tensors (`--device cpu`, as the test suite runs it on machines without one).

1. Every collective the backend offers, on every dtype it takes, compared with what it must be
   (the result must also stay on the caller's device).
2. DistributedDataParallel: an MLP trained for `--steps` steps, each member on its shard of the
   same seeded global batch; rank 0 then trains the same model on the whole batch in one process
   and the parameters must agree within 1e-4 relative (DDP's mean of the members' gradients is
   the whole batch's gradient, up to the order of additions).
3. Timings: the median DDP step and the median 4 KiB all_reduce, for the side-by-side table
   (`--backend gloo` runs the same steps over torch's Gloo, with a tcp:// rendezvous).

Rank 0 prints one line per check and a JSON summary (`--json PATH` also writes it). Any wrong
result exits 1 on the member that saw it.
"""
import argparse, json, os, statistics, sys, time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch
import torch.distributed as dist
import torch.nn as nn


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="plexus", choices=["plexus", "gloo"])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--master-port", type=int, default=29531, help="gloo's tcp:// rendezvous on loopback")
    p.add_argument("--params-m", type=float, default=4.0, help="millions of MLP parameters")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--latency-iters", type=int, default=100)
    p.add_argument("--skip-ops", action="store_true", help="only DDP and the timings")
    p.add_argument("--json")
    return p.parse_args()


RANK = int(os.environ.get("PLEXUS_RANK", "0"))


def say(*a):
    if RANK == 0:
        print(*a, flush=True)


def check(name, got, want, dev):
    if got.device.type != dev.type:
        print(f"rank {RANK}: {name}: the result is on {got.device}, not {dev}", flush=True)
        sys.exit(1)
    if not torch.equal(got.cpu(), want.cpu()):
        print(f"rank {RANK}: {name}: WRONG\n  got  {got.cpu().flatten()[:8]}\n  want {want.cpu().flatten()[:8]}",
              flush=True)
        sys.exit(1)
    say(f"ok  {name}")


def ops(dev, n, r):
    """Every collective on every dtype; the number of checks that passed."""
    count = 0
    for dt in (torch.float32, torch.float64, torch.int32, torch.int64, torch.float16, torch.bfloat16):
        t = torch.full((1 << 16,), r + 1, dtype=dt, device=dev)
        dist.all_reduce(t)
        check(f"all_reduce sum {dt}", t, torch.full((1 << 16,), n * (n + 1) // 2, dtype=dt), dev)
        count += 1
    for op, want in ((dist.ReduceOp.MIN, 1.0), (dist.ReduceOp.MAX, float(n)), (dist.ReduceOp.AVG, (n + 1) / 2)):
        t = torch.full((1000,), float(r + 1), device=dev)
        dist.all_reduce(t, op=op)
        check(f"all_reduce {op}", t, torch.full((1000,), want), dev)
        count += 1
    t = torch.full((4096,), float(r), device=dev)
    dist.broadcast(t, src=n - 1)
    check("broadcast", t, torch.full((4096,), float(n - 1)), dev)
    t = torch.full((300,), float(r + 1), device=dev)
    dist.reduce(t, dst=0)
    if r == 0:
        check("reduce", t, torch.full((300,), float(n * (n + 1) // 2)), dev)
    out = torch.empty(n * 3, device=dev)
    dist.all_gather_into_tensor(out, torch.full((3,), float(r), device=dev))
    check("all_gather_into_tensor", out, torch.arange(n, dtype=torch.float32).repeat_interleave(3), dev)
    outs = [torch.empty(2, 2, dtype=torch.int64, device=dev) for _ in range(n)]
    dist.all_gather(outs, torch.full((2, 2), r, dtype=torch.int64, device=dev))
    check("all_gather", torch.stack(outs), torch.arange(n).repeat_interleave(4).view(n, 2, 2), dev)
    rs = torch.empty(5, device=dev)
    dist.reduce_scatter_tensor(rs, torch.arange(5 * n, dtype=torch.float32, device=dev))
    check("reduce_scatter_tensor", rs, torch.arange(5 * r, 5 * r + 5, dtype=torch.float32) * n, dev)
    inp = torch.tensor([r * 10 + j for j in range(n)], dtype=torch.float32, device=dev)
    got = torch.empty(n, device=dev)
    dist.all_to_all_single(got, inp)
    check("all_to_all_single", got, torch.tensor([j * 10 + r for j in range(n)], dtype=torch.float32), dev)
    dist.barrier()
    say("ok  barrier")
    return count + 8


def mlp(params_m):
    # 512 -> h -> h -> 16 with h chosen so the parameter count is about params_m million.
    h = int((-(512 + 16 + 2) + ((512 + 16 + 2) ** 2 + 4 * params_m * 1e6) ** 0.5) / 2)
    return nn.Sequential(nn.Linear(512, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 16))


def batches(a):
    g = torch.Generator().manual_seed(1)
    teacher = torch.randn(512, 16, generator=g) / 512 ** 0.5
    for _ in range(a.steps):
        x = torch.randn(a.batch, 512, generator=g)
        yield x, x @ teacher


def train(a, dev, n, r):
    """DDP steps on this member's shard; the step times (ms) and the final parameters."""
    torch.manual_seed(0)
    model = mlp(a.params_m).to(dev)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    per = a.batch // n
    times = []
    for x, y in batches(a):
        x, y = x[r * per:(r + 1) * per].to(dev), y[r * per:(r + 1) * per].to(dev)
        t0 = time.perf_counter()
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return times[a.warmup:], [p.detach().cpu().double() for p in model.parameters()]


def reference(a, dev, n):
    """The same training in one process on the whole batch (each step's batch cut as the members
    cut it, so the mean loss is the same)."""
    torch.manual_seed(0)
    model = mlp(a.params_m).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    per = a.batch // n
    for x, y in batches(a):
        x, y = x[: per * n].to(dev), y[: per * n].to(dev)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().cpu().double() for p in model.parameters()]


def latency(a, dev):
    t = torch.zeros(1024, device=dev)  # 4 KiB of float32
    for _ in range(10):
        dist.all_reduce(t)
    times = []
    for _ in range(a.latency_iters):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def main():
    a = parse()
    if a.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu_check: --device cuda but torch {torch.__version__} sees no CUDA device", file=sys.stderr)
        sys.exit(2)
    dev = torch.device(a.device, 0) if a.device == "cuda" else torch.device("cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if a.backend == "plexus":
        import plexus.distributed  # noqa: F401 (registers the backend)
        dist.init_process_group(backend="plexus")
    else:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.master_port}", rank=RANK,
                                world_size=int(os.environ["PLEXUS_REPLICAS"]))
    n, r = dist.get_world_size(), dist.get_rank()
    checks = 0 if a.skip_ops else ops(dev, n, r)
    times, params = train(a, dev, n, r)
    # Every member must end with the same parameters.
    total = torch.tensor([sum(float(p.sum()) for p in params)], dtype=torch.float64, device=dev)
    lo, hi = total.clone(), total.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    if float(lo) != float(hi):
        print(f"rank {r}: members' parameters differ after DDP: param_sum {float(lo)} .. {float(hi)}", flush=True)
        sys.exit(1)
    lat = latency(a, dev)
    summary = {"backend": a.backend, "device": str(dev), "world": n, "torch": torch.__version__,
               "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else None,
               "op_checks": checks, "step_ms_median": statistics.median(times),
               "allreduce_4k_us_median": lat, "param_sum": float(total)}
    if r == 0:
        ref = reference(a, dev, n)
        worst = max(float((p - q).abs().max() / (q.abs().max() + 1e-12)) for p, q in zip(params, ref))
        summary["max_rel_diff_vs_one_process"] = worst
        if worst > 1e-4:
            print(f"rank 0: DDP over {a.backend} differs from one-process training by {worst:.2e} relative", flush=True)
            sys.exit(1)
        say(f"ok  DDP over {a.backend} on {dev} matches one-process training (max relative diff {worst:.2e})")
        say("summary " + json.dumps(summary))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(summary, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
