//! The group a collective runs over, and the messages of a call besides its plan's: the header
//! each rank sends its right neighbour (so ranks given different calls fail instead of waiting
//! forever), and the abort a failing rank sends every other rank.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::task::{JoinHandle, JoinSet};

use crate::elem::{Algorithm, DType, ReduceOp};
use crate::endpoint::{Endpoint, Landed};
use crate::error::{Error, Result};
use crate::peer_id::PeerId;

use super::config::Profile;
use super::plan::{Kind, PlanParams};

/// Step tags of the plan stay below these two (see `plan::MAX_PHASE`).
pub(super) const HELLO: u64 = 0xFFFF_FFFE;
pub(super) const ABORT: u64 = 0xFFFF_FFFF;
/// The tag of the round in which the members of an `auto` call exchange their link models
/// (`meter::agree`): above every step tag, below the header's.
pub(super) const AGREE: u64 = 0xFFFF_F010;
const HELLO_MAGIC: &[u8; 4] = b"PXC1";
const HELLO_LEN: usize = 4 + 8 + 4 + 4 + 4 + 4;
/// How long a failing rank tries to tell the others before returning its error: a live peer
/// acknowledges a tiny message in well under a millisecond; a dead one never will.
const ABORT_GRACE: Duration = Duration::from_secs(1);

/// The prefix of the error a rank reports when another rank aborted the collective.
pub(super) const ABORTED: &str = "collective aborted";

/// The ranks of a communicator as its collectives address them: this endpoint, every rank's
/// rail addresses and identity, and this rank.
pub(super) struct Group {
    pub(super) endpoint: Arc<Endpoint>,
    pub(super) ranks: Arc<Vec<Vec<SocketAddr>>>,
    pub(super) ids: Vec<PeerId>,
    pub(super) rank: usize,
    /// Where the plan's sends report their times (see `meter`), when the owner keeps one.
    pub(super) meter: Option<Arc<super::meter::LinkMeter>>,
}

impl Group {
    /// Receives the left neighbour's description of the call and compares it with ours.
    pub(super) async fn check_hello(
        &self,
        left: usize,
        base: u64,
        mine: &Bytes,
        sender: &mut JoinHandle<Result<()>>,
        prof: &mut Profile,
    ) -> Result<()> {
        let t = Instant::now();
        let got = self.recv_or_abort(left, base.wrapping_add(HELLO), base, sender).await?;
        prof.wait += t.elapsed();
        let Landed::Fresh(got) = got else {
            return Err(Error::Protocol("a collective header landed in place".into()));
        };
        if got[..] != mine[..] {
            return Err(Error::Protocol(format!(
                "rank {left} started a different collective: it has {}, this rank has {}",
                describe_hello(&got),
                describe_hello(mine)
            )));
        }
        Ok(())
    }

    /// The message `tag` from rank `from`, unless some rank aborts the collective or our sender
    /// fails first.
    pub(super) async fn recv_or_abort(
        &self,
        from: usize,
        tag: u64,
        base: u64,
        sender: &mut JoinHandle<Result<()>>,
    ) -> Result<Landed> {
        tokio::select! {
            m = self.endpoint.recv_landed(self.ids[from], tag) => m,
            a = self.endpoint.recv_any(base.wrapping_add(ABORT)) => {
                let (peer, why) = a?;
                let who = self.ids.iter().position(|id| *id == peer)
                    .map_or_else(|| peer.to_string(), |r| format!("rank {r}"));
                Err(Error::Peer(format!(
                    "{ABORTED} by {who}: {}",
                    String::from_utf8_lossy(&why)
                )))
            }
            s = &mut *sender => Err(match s {
                Ok(Err(e)) => e,
                Ok(Ok(())) => Error::Protocol("the collective's sender stopped early".into()),
                Err(e) => Error::Peer(format!("collective sender task: {e}")),
            }),
        }
    }

    /// Tells every other rank this collective failed, so none waits for us forever; gives up
    /// after `ABORT_GRACE` (a dead peer never acknowledges).
    pub(super) async fn broadcast_abort(&self, base: u64, e: &Error) {
        let why = Bytes::from(format!("rank {}: {e}", self.rank));
        let mut sends = JoinSet::new();
        for r in (0..self.ranks.len()).filter(|&r| r != self.rank) {
            let (ep, addrs, why) = (self.endpoint.clone(), self.ranks[r].clone(), why.clone());
            sends.spawn(async move { ep.send(&addrs, base.wrapping_add(ABORT), why).await });
        }
        let _ = tokio::time::timeout(ABORT_GRACE, async { while sends.join_next().await.is_some() {} }).await;
    }
}

/// The call's description that each rank sends its right neighbour.
pub(super) fn hello(p: &PlanParams, dtype: DType, op: ReduceOp) -> Bytes {
    let mut v = Vec::with_capacity(HELLO_LEN);
    v.extend_from_slice(HELLO_MAGIC);
    v.extend_from_slice(&(p.len as u64).to_le_bytes());
    v.extend_from_slice(&[dtype.code(), op.code(), p.algorithm.code(), 0]);
    let root = match p.kind {
        Kind::Allreduce => u32::MAX,
        Kind::Reduce { root } => root as u32,
    };
    v.extend_from_slice(&root.to_le_bytes());
    v.extend_from_slice(&(p.slices as u32).to_le_bytes());
    v.extend_from_slice(&(p.ranks as u32).to_le_bytes());
    Bytes::from(v)
}

fn describe_hello(b: &[u8]) -> String {
    if b.len() != HELLO_LEN || &b[..4] != HELLO_MAGIC {
        return format!("an unreadable header of {} bytes", b.len());
    }
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let mut len = [0u8; 8];
    len.copy_from_slice(&b[4..12]);
    let root = u32_at(16);
    format!(
        "{} {} elements of {} by {} ({}, {} slices, {} ranks)",
        if root == u32::MAX { "allreduce of".to_string() } else { format!("reduce to rank {root} of") },
        u64::from_le_bytes(len),
        DType::from_code(b[12]).map_or("?", DType::name),
        ReduceOp::from_code(b[13]).map_or("?", ReduceOp::name),
        Algorithm::from_code(b[14]).map_or("?", Algorithm::name),
        u32_at(20),
        u32_at(24),
    )
}
