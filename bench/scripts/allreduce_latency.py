#!/usr/bin/env python
"""Per-call latency of torch.distributed.all_reduce from Python, for `bench --bin call-latency`.

The same loop on any backend: for each size in --sizes (bytes of float32), --warmup untimed and
--iters timed calls, each preceded by a barrier; a call's time is the slowest rank's (from the
call until its result is in the tensor); rank 0 writes, per size, the median and p90 over the
timed calls to --json. Results are checked (every rank's tensor must hold the sum 0+1+...).

  spawn mode (Gloo on loopback):  python allreduce_latency.py --spawn 4 --json OUT
  rank mode (e.g. the replicas of a Plexus job, backend plexus):
      python allreduce_latency.py --rank env:PLEXUS_RANK --world env:PLEXUS_REPLICAS \
          --backend plexus --import plexus.distributed --json OUT
"""
import argparse, json, os, socket, statistics, sys, time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import warnings

warnings.filterwarnings("ignore", message=".*NumPy.*")
import torch
import torch.distributed as dist


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--spawn", type=int)
    p.add_argument("--rank"); p.add_argument("--world")
    p.add_argument("--backend", default="gloo")
    p.add_argument("--import", dest="imports", action="append", default=[])
    p.add_argument("--sizes", default="4096,65536,1048576")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--master")
    p.add_argument("--json")
    return p.parse_args()


def value(v):
    if v.startswith("env:"):
        v = os.environ[v[4:]]
    return int(v)


def run(rank, world, a):
    torch.set_num_threads(1)
    for m in a.imports:
        __import__(m)
    init = f"tcp://{a.master}" if a.master else "env://"
    dist.init_process_group(backend=a.backend, init_method=init, rank=rank, world_size=world)
    want = world * (world - 1) / 2
    out = {"backend": a.backend, "world": world, "sizes": []}
    for size in [int(s) for s in a.sizes.split(",")]:
        t = torch.empty(size // 4, dtype=torch.float32)
        times = []
        for i in range(a.warmup + a.iters):
            t.fill_(float(rank))
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            dt = time.perf_counter() - t0
            if i >= a.warmup:
                times.append(dt)
        if t.numel() and (t[0].item() != want or t[-1].item() != want):
            sys.exit(f"allreduce_latency: rank {rank}: got {t[0].item()}, want {want}")
        tt = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        s = sorted(tt.tolist())
        out["sizes"].append({
            "bytes": size,
            "us_median": 1e6 * statistics.median(s),
            "us_p90": 1e6 * s[min(len(s) - 1, int(0.9 * len(s)))],
        })
    if rank == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


def spawned(rank, world, a):
    run(rank, world, a)


def main():
    a = parse()
    if a.spawn:
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        a.master = f"127.0.0.1:{port}"
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        import torch.multiprocessing as mp
        mp.spawn(spawned, args=(a.spawn, a), nprocs=a.spawn, join=True)
    else:
        run(value(a.rank), value(a.world), a)


if __name__ == "__main__":
    main()
