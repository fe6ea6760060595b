//! The gang stage: a member of a `communicator = true` gang runs its command with its
//! collective endpoint ([`crate::gang_endpoint`]) open beside it, and the endpoint tells the other
//! members' workers how the command ended.

use crate::gang_endpoint::{GangEndpoint, SOCKET_NAME, Spec};

use super::command::ProcessEnd;
use super::context::{Ctx, NO_EXIT_CODE, Outcome, WorkDirs};
use super::validation::Work;

impl Ctx {
    /// Runs the command; for a gang member, with its collective endpoint open around it.
    pub(super) async fn run_member(
        &self,
        work: &Work,
        dirs: &WorkDirs,
        logs: (std::fs::File, std::fs::File),
        cancel: &tokio_util::sync::CancellationToken,
        started_at: u64,
    ) -> ProcessEnd {
        let Some(g) = &work.gang else {
            return self.run_process(work, dirs, logs, cancel, started_at).await;
        };
        let spec = Spec {
            rails: std::sync::Arc::clone(&self.rails),
            members: g.members.clone(),
            rank: work.attempt.rank as usize,
            tag: g.tag,
            socket: dirs.root.join(SOCKET_NAME),
            uid: dirs.uid,
            secret: g.secret.clone(),
            meter: std::sync::Arc::clone(&self.meter),
        };
        let endpoint = match GangEndpoint::open(spec) {
            Ok(e) => e,
            Err(e) => return ProcessEnd::Ended(Outcome::failed(e, started_at, NO_EXIT_CODE)),
        };
        let end = self.run_process(work, dirs, logs, cancel, started_at).await;
        let failure = match &end {
            ProcessEnd::Succeeded { .. } => None,
            ProcessEnd::Ended(o) if o.error.is_empty() => Some(format!("its task ended ({:?})", o.state)),
            ProcessEnd::Ended(o) => Some(o.error.clone()),
        };
        endpoint.close(failure).await;
        end
    }
}
