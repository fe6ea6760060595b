//! The exchange stage: an `alltoall` or `redistribute` member ([`crate::exchange`]) run inside
//! the worker, over this worker's data plane.

use std::sync::Arc;

use bytes::Bytes;
use plexus_dataplane::Exchanger;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::exchange::Exchange;

use super::context::{Ctx, WorkDirs, sleep_until};
use super::fetch::read_input;
use super::validation::{CollectiveWork, Work};

impl Ctx {
    /// Runs an `alltoall` or `redistribute` member ([`crate::exchange`]): reads its inputs,
    /// joins the gang's exchanger on this worker's data plane, writes what it received.
    pub(super) async fn exchange(
        &self,
        work: &Work,
        c: &CollectiveWork,
        x: &Exchange,
        dirs: &WorkDirs,
        mut log: std::fs::File,
        cancel: &CancellationToken,
    ) -> Result<()> {
        use std::io::Write as _;
        let a = &work.attempt;
        let output = &work.outputs[0];
        let data = match work.inputs.first() {
            Some(input) => read_input(input, dirs).await?,
            None => Vec::new(),
        };
        let split_file = match work.inputs.get(1) {
            Some(input) => Some(read_input(input, dirs).await?),
            None => None,
        };
        let kind = x.kind();
        let exchanger = Exchanger::new(Arc::clone(&self.rails), c.members.clone(), a.rank as usize, c.tag)
            .map_err(Error::Communicator)?
            .with_meter(Arc::clone(&self.meter));
        let len = data.len();
        let started = std::time::Instant::now();
        let run =
            x.run(&exchanger, c.dtype, Bytes::from(data), work.inputs.first().map(|i| &i.id), split_file.as_deref());
        let deadline = work.timeout.and_then(|t| Instant::now().checked_add(t));
        let (result, chosen) = tokio::select! {
            r = run => r?,
            () = sleep_until(deadline) => return Err(Error::TimedOut { after: work.timeout.unwrap_or_default() }),
            () = cancel.cancelled() => return Err(Error::Cancelled),
        };
        let took = started.elapsed();
        self.counters.collective(kind, len as u64, u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
        let written = result.len();
        tokio::fs::write(dirs.output.join(output), result)
            .await
            .map_err(|source| Error::WriteOutput { name: output.clone(), source })?;
        let _ = writeln!(
            log,
            "{kind} {} {}, schedule {}, rank {}: sent {len} bytes, wrote {written} bytes in {:.3} ms",
            c.dtype,
            x.describe(c.members.len()),
            chosen.algorithm,
            a.rank,
            took.as_secs_f64() * 1e3,
        );
        let _ = writeln!(log, "{}{}", plexus_proto::rules::COLLECTIVE_LINE, chosen.reason);
        Ok(())
    }
}
