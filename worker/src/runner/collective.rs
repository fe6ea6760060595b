//! The collective stage: an `allreduce` or `reduce` member run inside the worker, over this
//! worker's data plane, its input read from and its result written to the work dir.

use std::sync::Arc;

use bytes::Bytes;
use plexus_dataplane::{CollectiveConfig, Communicator};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

use super::context::{Ctx, WorkDirs, sleep_until};
use super::fetch::read_input;
use super::validation::{CollectiveWork, Work};

impl Ctx {
    /// Runs a collective member: reads its input, joins the gang's communicator on this worker's
    /// data plane, and writes the result as its output. [`Error::Cancelled`] when cancelled.
    pub(super) async fn collective(
        &self,
        work: &Work,
        c: &CollectiveWork,
        dirs: &WorkDirs,
        mut log: std::fs::File,
        cancel: &CancellationToken,
    ) -> Result<()> {
        use std::io::Write as _;
        if let Some(x) = &c.exchange {
            return self.exchange(work, c, x, dirs, log, cancel).await;
        }
        let a = &work.attempt;
        let input = &work.inputs[0];
        let output = &work.outputs[0];
        let data = read_input(input, dirs).await?;
        if data.len() % c.dtype.size() != 0 {
            return Err(Error::InputShape { object: input.id.clone(), len: data.len(), dtype: c.dtype });
        }
        let cfg = CollectiveConfig { algorithm: c.algorithm, ..CollectiveConfig::default() };
        let comm = Communicator::new(Arc::clone(&self.rails), c.members.clone(), a.rank as usize, c.tag, cfg)
            .map_err(Error::Communicator)?
            .with_meter(Arc::clone(&self.meter));
        let kind = if c.root.is_some() { "reduce" } else { "allreduce" };
        let len = data.len();
        let started = std::time::Instant::now();
        let run = async {
            match c.root {
                None => comm.allreduce_bytes(Bytes::from(data), c.dtype, c.op).await.map(Some),
                Some(root) => comm.reduce_bytes(Bytes::from(data), root, c.dtype, c.op).await,
            }
        };
        let deadline = work.timeout.and_then(|t| Instant::now().checked_add(t));
        let result = tokio::select! {
            r = run => r.map_err(|source| Error::Collective { kind, source })?,
            () = sleep_until(deadline) => return Err(Error::TimedOut { after: work.timeout.unwrap_or_default() }),
            () = cancel.cancelled() => return Err(Error::Cancelled),
        };
        let took = started.elapsed();
        self.counters.collective(kind, len as u64, u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
        let dest = dirs.output.join(output);
        let written = result.as_ref().map_or(0, Bytes::len);
        tokio::fs::write(&dest, result.unwrap_or_default())
            .await
            .map_err(|source| Error::WriteOutput { name: output.clone(), source })?;
        let p = comm.last_profile();
        let members = c.members.len();
        let choice = comm.last_choice();
        let ran =
            choice.as_ref().map_or_else(|| c.algorithm.to_string(), |ch| format!("{} ×{}", ch.algorithm, ch.slices));
        // The member's log: what ran and where its time went, for `plexus logs`.
        let _ = writeln!(
            log,
            "{kind} {} {} over {members} members ({}), rank {}: {len} bytes in {:.3} ms, algBW {:.3} GB/s; \
             copy {:.3} ms, reduce {:.3} ms, wait {:.3} ms; sent {} B, received {} B; wrote {written} B",
            c.dtype,
            c.op,
            ran,
            a.rank,
            took.as_secs_f64() * 1e3,
            len as f64 / took.as_secs_f64().max(1e-9) / 1e9,
            p.copy.as_secs_f64() * 1e3,
            p.reduce.as_secs_f64() * 1e3,
            p.wait.as_secs_f64() * 1e3,
            p.bytes_sent,
            p.bytes_received,
        );
        if let Some(ch) = choice {
            let _ = writeln!(log, "{}{}", plexus_proto::rules::COLLECTIVE_LINE, ch.reason);
        }
        Ok(())
    }
}
