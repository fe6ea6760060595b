//! The relay behind `GetObject` (`plexus get`, the Python client's `Job.get`): a holder's
//! `FetchObject` stream forwarded chunk by chunk to the client, and checked against the object's
//! digest on the way.
//!
//! The first chunk tells the client the digest and the worker serving it. Each chunk is hashed
//! off the runtime's threads as it passes. When the holder's stream ends, a copy whose digest is
//! not the one its producer reported ends the client's stream with DATA_LOSS, naming the object,
//! the holder and both digests, instead of its normal end (so a client keeps nothing of it) —
//! and only after the engine has been told the holder is treated as having lost the object, so
//! the client's next try is served by another holder or told none is left.

use std::time::Duration;

use plexus_proto::{Digest, ObjectId, Verifier, WorkerId, pb};
use tokio::sync::mpsc::Sender;
use tonic::Status;

use crate::engine::{Cmd, EngineHandle};
use crate::error::Error;
use crate::status::status;

/// How long a relayed object download may go without a chunk from the worker serving it.
pub const RELAY_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The copy being relayed: the object, the holder serving it and the digest it must have.
pub struct Copy {
    pub object: ObjectId,
    pub holder: WorkerId,
    pub peer: String,
    pub digest: Option<Digest>,
}

impl Copy {
    /// How an error names where the copy came from.
    fn holder_name(&self) -> String {
        format!("worker {} ({})", self.holder, self.peer)
    }
}

/// Forwards `inner` to `tx` until it ends, the client goes away or the holder stalls for
/// [`RELAY_IDLE_TIMEOUT`]; a holder's own error reaches the client as it is.
pub async fn forward(
    mut inner: tonic::Streaming<pb::ObjectChunk>,
    tx: Sender<Result<pb::ObjectChunk, Status>>,
    engine: EngineHandle,
    copy: Copy,
) {
    let mut verifier = Verifier::new(copy.digest);
    let mut first = true;
    loop {
        let next = match tokio::time::timeout(RELAY_IDLE_TIMEOUT, inner.message()).await {
            Ok(Ok(Some(chunk))) => chunk,
            Ok(Ok(None)) => break,
            Ok(Err(s)) => {
                let _ = tx.send(Err(s)).await;
                return;
            }
            Err(_) => {
                let e = Error::Unavailable(format!(
                    "the worker serving {} sent nothing for {RELAY_IDLE_TIMEOUT:?}",
                    copy.object
                ));
                let _ = tx.send(Err(status(e))).await;
                return;
            }
        };
        // Hashed on a blocking thread: a chunk is up to 1 MiB.
        let (v, mut chunk) = match tokio::task::spawn_blocking(move || {
            verifier.update(&next.data);
            (verifier, next)
        })
        .await
        {
            Ok(hashed) => hashed,
            Err(e) => {
                let _ = tx.send(Err(status(Error::Engine(format!("hashing a relayed chunk: {e}"))))).await;
                return;
            }
        };
        verifier = v;
        if std::mem::take(&mut first) {
            chunk.digest = copy.digest.map(|d| d.to_vec()).unwrap_or_default();
            chunk.holder = copy.holder.to_string();
        }
        if tx.send(Ok(chunk)).await.is_err() {
            return;
        }
    }
    if let Err(e) = verifier.finish(&copy.object.to_string(), &copy.holder_name()) {
        tracing::warn!(object = %copy.object, holder = %copy.holder, error = %e, "a relayed copy did not match its digest");
        let (holder, object) = (copy.holder, copy.object.clone());
        // Told before the client hears of it, so that its next try does not meet this holder.
        let _ = engine.call(|reply| Cmd::BadCopy { holder, object, reply }).await;
        let _ = tx.send(Err(status(Error::DigestMismatch(e)))).await;
    }
}
