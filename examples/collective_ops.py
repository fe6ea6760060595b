"""A complete example of the collective endpoint from Python: every torch.distributed operation the
`plexus` backend supports, then plexus.collective directly on a plain buffer, each result checked.
Run as a `communicator = true` gang of 2 (see the README), e.g. with examples/ddp.toml`s layout and
command = [PYTHON, "examples/collective_ops.py"]."""
import torch, torch.distributed as dist, array
import plexus.distributed
from plexus.collective import Communicator
dist.init_process_group("plexus")
r, n = dist.get_rank(), dist.get_world_size()
def check(name, got, want):
    assert torch.equal(got, want), f"{name}: {got} != {want}"
    print("ok", name, flush=True)
for dt in (torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16, torch.float16):
    t = torch.full((1000,), r + 1, dtype=dt); dist.all_reduce(t); check(f"all_reduce {dt}", t, torch.full((1000,), 3, dtype=dt))
t = torch.tensor([float(r)]); dist.all_reduce(t, op=dist.ReduceOp.AVG); check("avg", t, torch.tensor([0.5]))
t = torch.tensor([r * 5]); dist.all_reduce(t, op=dist.ReduceOp.MIN); check("min", t, torch.tensor([0]))
b = torch.full((7,), float(r)); dist.broadcast(b, src=1); check("broadcast", b, torch.full((7,), 1.0))
outs = [torch.empty(3) for _ in range(n)]; dist.all_gather(outs, torch.full((3,), float(r))); check("all_gather", torch.stack(outs), torch.tensor([[0.0]*3, [1.0]*3]))
o = torch.empty(2 * n); dist.all_gather_into_tensor(o, torch.full((2,), float(r))); check("all_gather_into_tensor", o, torch.tensor([0., 0., 1., 1.]))
rs = torch.empty(2); dist.reduce_scatter_tensor(rs, torch.arange(4, dtype=torch.float32)); check("reduce_scatter_tensor", rs, torch.arange(4, dtype=torch.float32)[2*r:2*r+2] * 2)
a = torch.empty(4); dist.all_to_all_single(a, torch.arange(4, dtype=torch.float32) + 10 * r); check("all_to_all_single", a, torch.tensor([0., 1., 10., 11.]) + 2 * r)
red = torch.tensor([r + 2]); dist.reduce(red, dst=0, op=dist.ReduceOp.PRODUCT); check("reduce", red, torch.tensor([6]) if r == 0 else torch.tensor([3]))
dist.barrier(); print("ok barrier", flush=True)
c = Communicator(); x = array.array("d", [r + 0.5] * 3); c.allreduce(x); assert list(x) == [2.0] * 3; print("ok buffer allreduce", flush=True)
hs = [c.barrier(async_op=True) for _ in range(20)]  # many outstanding, answered in order
[h.wait() for h in hs]; print("ok 20 outstanding", flush=True)
