"""The ``torch.distributed`` backend ``plexus``: importing this module registers it.

Inside a task of a ``communicator = true`` gang::

    import torch.distributed as dist
    import plexus.distributed  # registers the backend "plexus"
    dist.init_process_group(backend="plexus")   # no address, port, rank or world size
    model = torch.nn.parallel.DistributedDataParallel(model)

Rank and world size are the task's (``$PLEXUS_RANK``, ``$PLEXUS_REPLICAS``), checked against
the worker's collective endpoint. The default ``env://`` rendezvous needs no ``MASTER_ADDR``
inside such a task (the explicit ``plexus://`` works too): its store is process-local, because
the collectives do not use one (``TORCH_DIST_INIT_BARRIER=1`` and ``monitored_barrier``, which
need a shared store, are not supported). Collectives go to :class:`plexus.collective.Communicator`;
CUDA tensors are staged through host memory. Supported: all_reduce (SUM, AVG, MIN, MAX,
PRODUCT), reduce, broadcast, all_gather, all_gather_into_tensor, reduce_scatter,
reduce_scatter_tensor, all_to_all, all_to_all_single, barrier, so ``DistributedDataParallel``
works unchanged; point-to-point send/recv, gather and scatter are not.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from typing import Any, List, Optional
from urllib.parse import parse_qs, urlparse

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    ReduceOptions,
    ReduceScatterOptions,
)
from torch.futures import Future

from .collective import CollectiveError, Communicator, NotInGang

__all__ = ["ProcessGroupPlexus", "BACKEND"]

BACKEND = "plexus"

_OPS = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.AVG: "mean",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.PRODUCT: "prod",
}


def _op(reduce_op: Any) -> str:
    for k, v in _OPS.items():
        if reduce_op == k:
            return v
    raise CollectiveError(f"the plexus backend does not support ReduceOp {reduce_op}")


class ProcessGroupPlexus(dist.ProcessGroup):
    """A ``torch.distributed`` process group over the task's collective endpoint."""

    def __init__(self, rank: int, world_size: int, comm: Communicator):
        super().__init__(rank, world_size)
        self._comm = comm

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return BACKEND

    def size(self) -> int:
        return self._comm.size

    # -- collectives ------------------------------------------------------------------------

    def allreduce(self, tensors, opts=AllreduceOptions()):
        op = _op(opts.reduceOp)
        return self._work([self._comm.allreduce(t, op=op, async_op=True) for t in tensors], tensors)

    def allreduce_coalesced(self, tensors, opts=AllreduceCoalescedOptions()):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts=ReduceOptions()):
        op, root = _op(opts.reduceOp), opts.rootRank
        return self._work([self._comm.reduce(t, root=root, op=op, async_op=True) for t in tensors], tensors)

    def broadcast(self, tensors, opts=BroadcastOptions()):
        root = opts.rootRank
        return self._work([self._comm.broadcast(t, root=root, async_op=True) for t in tensors], tensors)

    def allgather(self, output_tensors, input_tensors, opts=AllgatherOptions()):
        handles = []
        stages = []
        for outs, inp in zip(output_tensors, input_tensors):
            flat = torch.empty((len(outs),) + tuple(inp.shape), dtype=inp.dtype, device=inp.device)
            handles.append(self._comm.allgather(flat, inp.contiguous(), async_op=True))
            stages.append((flat, outs))

        def scatter_back():
            for flat, outs in stages:
                for i, o in enumerate(outs):
                    o.copy_(flat[i])

        return self._work(handles, output_tensors, then=scatter_back)

    def _allgather_base(self, output, input, opts=AllgatherOptions()):
        return self._work([self._comm.allgather(output, input.contiguous(), async_op=True)], [output])

    all_gather_single = _allgather_base

    def reduce_scatter(self, output_tensors, input_tensors, opts=ReduceScatterOptions()):
        op = _op(opts.reduceOp)
        handles = [
            self._comm.reduce_scatter(out, torch.cat([t.reshape(-1) for t in ins]), op=op, async_op=True)
            for out, ins in zip(output_tensors, input_tensors)
        ]
        return self._work(handles, output_tensors)

    def _reduce_scatter_base(self, output, input, opts=ReduceScatterOptions()):
        op = _op(opts.reduceOp)
        return self._work([self._comm.reduce_scatter(output, input.contiguous(), op=op, async_op=True)], [output])

    reduce_scatter_single = _reduce_scatter_base

    def alltoall(self, output_tensors, input_tensors, opts=AllToAllOptions()):
        inp = torch.cat([t.reshape(-1) for t in input_tensors])
        counts = [t.numel() for t in input_tensors]
        out = torch.empty(sum(t.numel() for t in output_tensors), dtype=inp.dtype, device=inp.device)
        h = self._comm.alltoallv(out, inp, counts, async_op=True)

        def split_back():
            at = 0
            for o in output_tensors:
                o.copy_(out[at : at + o.numel()].view_as(o))
                at += o.numel()

        return self._work([h], output_tensors, then=split_back)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=AllToAllOptions()):
        n = self._comm.size
        row = input.numel() // max(1, input.shape[0]) if input.dim() > 0 else 1
        if input_split_sizes:
            counts = [c * row for c in input_split_sizes]
        else:
            counts = [input.numel() // n] * n
        return self._work([self._comm.alltoallv(output, input.contiguous(), counts, async_op=True)], [output])

    all_to_all_single = alltoall_base

    def barrier(self, opts=BarrierOptions()):
        return self._work([self._comm.barrier(async_op=True)], [])

    # -- futures ----------------------------------------------------------------------------

    def _work(self, handles, result: List[Any], then=None):
        """A torch Work completing when every handle has (its future's value: ``result``)."""
        fut: Future = Future()
        left = [len(handles)]
        errors: List[str] = []

        def done(h) -> None:
            if h.error() is not None:
                errors.append(h.error())
            left[0] -= 1
            if left[0] > 0:
                return
            if errors:
                fut.set_exception(CollectiveError(errors[0]))
                return
            try:
                if then is not None:
                    then()
            except Exception as e:  # a copy back that failed
                fut.set_exception(CollectiveError(f"copying the result back: {e}"))
                return
            fut.set_result(result)

        if not handles:
            fut.set_result(result)
        for h in handles:
            h.add_done_callback(done)
        return _PlexusWork(fut)


class _PlexusWork(dist._Work):
    """The ``Work`` of one call: ``wait`` raises the collective's error (a member that failed, a
    bad request), so ``dist.all_reduce`` and DDP fail instead of going on with the input left
    as it was. (torch's ``_create_work_from_future`` makes a ``Work`` whose ``wait`` returns
    even when its future failed.)"""

    def __init__(self, fut: Future):
        super().__init__()
        self._fut = fut

    def wait(self, timeout: Optional[timedelta] = None) -> bool:  # noqa: ARG002 (ops end by the stall timeout)
        self._fut.wait()  # raises the future's exception
        return True

    def get_future(self) -> Future:
        return self._fut

    def is_completed(self) -> bool:
        return self._fut.done()

    def is_success(self) -> bool:
        if not self._fut.done():
            return False
        try:
            self._fut.value()
        except Exception:
            return False
        return True


def _create(store, rank: int, world_size: int, timeout: timedelta) -> ProcessGroupPlexus:
    comm = Communicator()
    if (rank, world_size) != (comm.rank, comm.size):
        raise CollectiveError(
            f"init_process_group(backend='plexus') with rank {rank} of {world_size}, but this task is member "
            f"{comm.rank} of a gang of {comm.size}"
        )
    return ProcessGroupPlexus(rank, world_size, comm)


def _task_rank_and_world(url: str):
    """Rank and world size from the URL's query (as torch's ``rendezvous`` adds them) or the
    task's environment."""
    q = parse_qs(urlparse(url).query)
    rank = int(q["rank"][0]) if "rank" in q else int(os.environ.get("PLEXUS_RANK", "-1"))
    world = int(q["world_size"][0]) if "world_size" in q else int(os.environ.get("PLEXUS_REPLICAS", "-1"))
    if rank < 0 or world < 1:
        raise NotInGang(
            "the plexus rendezvous needs $PLEXUS_RANK and $PLEXUS_REPLICAS (set in a Plexus task) or rank "
            "and world_size"
        )
    return rank, world


def _plexus_rendezvous(url: str, timeout: timedelta = timedelta(minutes=30), **kwargs):
    rank, world = _task_rank_and_world(url)
    yield (dist.HashStore(), rank, world)
    raise RuntimeError("the plexus rendezvous cannot be re-used")


def _install() -> None:
    rdzv = sys.modules["torch.distributed.rendezvous"]
    handlers = rdzv._rendezvous_handlers
    if "plexus" not in handlers:
        rdzv.register_rendezvous_handler("plexus", _plexus_rendezvous)
    env = handlers.get("env")
    if env is not None and not getattr(env, "_plexus", False):

        def env_or_plexus(url: str, timeout: timedelta = timedelta(minutes=30), **kwargs):
            # Inside a gang task without MASTER_ADDR, env:// means the task's own gang.
            if "MASTER_ADDR" not in os.environ:
                if not os.environ.get("PLEXUS_COLLECTIVE_SOCKET"):
                    raise NotInGang(
                        "env:// rendezvous: MASTER_ADDR is not set, and this process is not a member of a "
                        "Plexus gang ($PLEXUS_COLLECTIVE_SOCKET is not set; give the task `replicas = N` and "
                        "`communicator = true`)"
                    )
                return _plexus_rendezvous(url, timeout, **kwargs)
            return env(url, timeout=timeout, **kwargs)

        env_or_plexus._plexus = True  # type: ignore[attr-defined]
        handlers["env"] = env_or_plexus
    if BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])


_install()
