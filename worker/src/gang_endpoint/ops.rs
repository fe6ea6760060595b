//! One gang member's collectives over the worker's data plane: allreduce and reduce on a
//! [`Communicator`] (seed 003's algorithms striped over the rails, `auto`: the cost model's pick
//! until the calls are measured, then the fastest measured per size class, as a job's
//! `allreduce` task gets; the worker's link meter feeds it), the data-moving ops
//! (broadcast, allgather, reduce-scatter's exchange, all-to-all(v)) on an [`Exchanger`] (seed
//! 004's contention-free schedules). Both share the gang's tag base (their tag ranges are
//! disjoint by construction, `plexus_dataplane::collective::communicator::TAG_SPAN`).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use plexus_dataplane::{
    Algorithm, CollectiveConfig, ComTable, Communicator, DType, Endpoint, Exchanger, LinkMeter, MappedBytes,
    ScheduleKind,
};

use super::elems::{divide, narrow, reduce_parts, widen, wire_dtype, wire_op};
use plexus_collective::wire::{Elem, Op, Reduce, Request};

/// A gang member's communicator and exchanger.
pub struct Gang {
    comm: Communicator,
    exch: Exchanger,
    rank: usize,
    size: usize,
}

impl Gang {
    /// This member (`rank`) of the gang whose members' rails are `members`, tags from `tag`.
    pub fn new(
        rails: Arc<Endpoint>,
        members: Vec<Vec<SocketAddr>>,
        rank: usize,
        tag: u64,
        meter: Arc<LinkMeter>,
    ) -> Result<Gang, plexus_dataplane::Error> {
        let size = members.len();
        let cfg = CollectiveConfig { algorithm: Algorithm::Auto, ..CollectiveConfig::default() };
        let comm = Communicator::new(Arc::clone(&rails), members.clone(), rank, tag, cfg)?.with_meter(meter);
        let exch = Exchanger::new(rails, members, rank, tag)?;
        Ok(Gang { comm, exch, rank, size })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Runs one checked request on `data` (its payload) and returns the reply's payload.
    pub async fn run(&self, req: &Request, data: Vec<u8>) -> Result<Vec<u8>, String> {
        let what = req.op.name();
        let failed = |e: plexus_dataplane::Error| format!("{what} failed: {e}");
        match req.op {
            Op::Allreduce => self.allreduce(req.elem, req.reduce, data).await.map_err(failed),
            Op::Reduce => self.reduce(req, data).await.map_err(failed),
            Op::Broadcast => self.broadcast(req.root, data).await.map_err(failed),
            Op::Allgather => self.allgather(data).await.map_err(failed),
            Op::ReduceScatter => self.reduce_scatter(req.elem, req.reduce, data).await.map_err(failed),
            Op::Alltoall => {
                let got = self.exch.alltoall(Bytes::from(data), ScheduleKind::Css).await.map_err(failed)?;
                Ok(concat(&got))
            }
            Op::Alltoallv => self.alltoallv(&req.counts, data).await.map_err(failed),
            Op::Barrier => self.allreduce(Elem::I32, Reduce::Sum, vec![0; 4]).await.map(|_| Vec::new()).map_err(failed),
            Op::Poison => Err(String::from_utf8_lossy(&data).into_owned()),
            Op::Map => Err("map: not a collective".into()),
        }
    }

    /// An allreduce of `buf` (of a 4- or 8-byte `elem`) in place: a shared region's bytes,
    /// which the communicator works in directly (no copy).
    pub async fn allreduce_in_place(&self, elem: Elem, reduce: Reduce, mut buf: MappedBytes) -> Result<(), String> {
        let Some(dtype) = wire_dtype(elem).filter(|_| !matches!(elem, Elem::Bf16 | Elem::F16)) else {
            return Err(format!("allreduce: {elem} is not reduced in place"));
        };
        self.comm.allreduce_mapped(&buf, dtype, wire_op(reduce)).await.map_err(|e| format!("allreduce failed: {e}"))?;
        if reduce == Reduce::Mean {
            divide(dtype, buf.as_mut_slice(), self.size);
        }
        Ok(())
    }

    async fn allreduce(&self, elem: Elem, reduce: Reduce, data: Vec<u8>) -> Result<Vec<u8>, plexus_dataplane::Error> {
        let dtype = wire_dtype(elem).unwrap_or(DType::I32);
        let wide = widen(elem, data);
        let out = self.comm.allreduce_bytes(Bytes::from(wide), dtype, wire_op(reduce)).await?;
        Ok(self.finish(elem, reduce, dtype, Vec::from(out)))
    }

    async fn reduce(&self, req: &Request, data: Vec<u8>) -> Result<Vec<u8>, plexus_dataplane::Error> {
        let dtype = wire_dtype(req.elem).unwrap_or(DType::I32);
        let wide = widen(req.elem, data);
        let out = self.comm.reduce_bytes(Bytes::from(wide), req.root, dtype, wire_op(req.reduce)).await?;
        Ok(out.map(|o| self.finish(req.elem, req.reduce, dtype, Vec::from(o))).unwrap_or_default())
    }

    /// A reduction's result as the task's element type: divided for `mean`, narrowed back.
    fn finish(&self, elem: Elem, reduce: Reduce, dtype: DType, mut out: Vec<u8>) -> Vec<u8> {
        if reduce == Reduce::Mean {
            divide(dtype, &mut out, self.size);
        }
        narrow(elem, out)
    }

    /// The root sends its buffer to every other member; every member passes a buffer of the same
    /// size (a member with another size has another table, and the exchange fails on all).
    async fn broadcast(&self, root: usize, data: Vec<u8>) -> Result<Vec<u8>, plexus_dataplane::Error> {
        let n = self.size;
        let len = data.len() as u64;
        let rows: Vec<Vec<u64>> =
            (0..n).map(|i| (0..n).map(|j| if i == root && j != root { len } else { 0 }).collect()).collect();
        let table = ComTable::from_rows(&rows)?;
        let data = Bytes::from(data);
        let sends = (0..n).map(|j| if self.rank == root && j != root { data.clone() } else { Bytes::new() }).collect();
        let got = self.exch.alltoallv(&table, sends, ScheduleKind::Css).await?;
        Ok(if self.rank == root { Vec::from(data) } else { got[root].to_vec() })
    }

    /// Every member's buffer (all the same size), concatenated in rank order.
    async fn allgather(&self, data: Vec<u8>) -> Result<Vec<u8>, plexus_dataplane::Error> {
        let n = self.size;
        let table = ComTable::uniform(n, data.len() as u64)?;
        let data = Bytes::from(data);
        let got = self.exch.alltoallv(&table, vec![data; n], ScheduleKind::Css).await?;
        Ok(concat(&got))
    }

    /// Part j of every member's buffer goes to member j, which reduces the parts it receives.
    async fn reduce_scatter(
        &self,
        elem: Elem,
        reduce: Reduce,
        data: Vec<u8>,
    ) -> Result<Vec<u8>, plexus_dataplane::Error> {
        let dtype = wire_dtype(elem).unwrap_or(DType::I32);
        let got = self.exch.alltoall(Bytes::from(data), ScheduleKind::Css).await?;
        let parts = got.into_iter().map(|b| widen(elem, b.to_vec())).collect();
        let out = reduce_parts(dtype, wire_op(reduce), parts);
        Ok(self.finish(elem, reduce, dtype, out))
    }

    /// Sends `counts[j]` bytes to member j (the parts of `data` in rank order); returns the
    /// bytes each member sent this one (u64 each, rank order), then those parts concatenated.
    async fn alltoallv(&self, counts: &[u64], data: Vec<u8>) -> Result<Vec<u8>, plexus_dataplane::Error> {
        let table = self.exch.gather_table(counts).await?;
        let got = self.exch.alltoallv_packed(&table, Bytes::from(data), ScheduleKind::Css).await?;
        let mut out: Vec<u8> = got.iter().flat_map(|b| (b.len() as u64).to_le_bytes()).collect();
        out.extend_from_slice(&concat(&got));
        Ok(out)
    }
}

fn concat(parts: &[Bytes]) -> Vec<u8> {
    let mut out = Vec::with_capacity(parts.iter().map(Bytes::len).sum());
    for p in parts {
        out.extend_from_slice(p);
    }
    out
}
