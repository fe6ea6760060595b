//! Where everything lives under the data dir. This is the one place that builds those paths:
//!
//! ```text
//! DIR/worker-id                                    the stable worker id (`wkr-…`), created once
//! DIR/cache/<job>/<task>/<rank>/<name>             cached data objects (read-only files)
//! DIR/tmp/                                         partial downloads; emptied at start
//! DIR/work/<job>/<task>/<rank>.<attempt>/          an attempt's working directory, removed after it
//! DIR/work/<job>/<task>/<rank>.<attempt>/in/<task>/<rank>/<name>    its inputs ($PLEXUS_IN)
//! DIR/work/<job>/<task>/<rank>.<attempt>/out/<name>                 its outputs ($PLEXUS_OUT)
//! DIR/logs/<job>/<task>/<rank>.<attempt>.out|.err  stdout / stderr of an attempt; kept
//! ```
//!
//! Every path component comes from a validated [`AttemptRef`] or [`ObjectId`] (job ids are
//! `job-<hex>`, task and output names exclude `/` and leading dots), so nothing that arrives from
//! the network can name a path outside the data dir.

use std::path::{Path, PathBuf};

use plexus_proto::AttemptRef;

/// The paths under one data dir.
#[derive(Debug, Clone)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn worker_id_file(&self) -> PathBuf {
        self.root.join("worker-id")
    }

    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("cache")
    }

    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    pub fn work_root(&self) -> PathBuf {
        self.root.join("work")
    }

    pub fn logs_root(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// The working directory of one attempt.
    pub fn work_dir(&self, a: &AttemptRef) -> PathBuf {
        self.work_root().join(a.job.to_string()).join(&a.task).join(format!("{}.{}", a.rank, a.attempt))
    }

    /// The stdout and stderr files of one attempt.
    pub fn log_files(&self, a: &AttemptRef) -> (PathBuf, PathBuf) {
        let dir = self.logs_root().join(a.job.to_string()).join(&a.task);
        (dir.join(format!("{}.{}.out", a.rank, a.attempt)), dir.join(format!("{}.{}.err", a.rank, a.attempt)))
    }
}
