//! Where everything lives under the data dir. This is the one place that builds those paths:
//!
//! ```text
//! DIR/worker-id                                    the stable worker id (`wkr-…`), created once
//! DIR/tls/worker.key, worker.pem, ca.pem            this worker's key (0600) and certificate, the
//!                                                  cluster CA (secure clusters; see `credentials`)
//! DIR/registered                                  exists while the worker is registered (health checks)
//! DIR/lock                                         flock'ed by the worker process that uses DIR
//! DIR/procs/<job>.<task>.<rank>.<attempt>          pid record of an attempt run as a bare process
//!                                                  group (no cgroups): `<pgid> <start time>`
//! DIR/cache/<job>/<task>/<rank>/<name>             cached data objects (read-only files)
//! DIR/tmp/                                         partial downloads; emptied at start
//! DIR/work/<job>/<task>/<rank>.<attempt>/          an attempt's working directory, removed after it
//! DIR/work/<job>/<task>/<rank>.<attempt>/in/<task>/<rank>/<name>    its inputs ($PLEXUS_IN)
//! DIR/work/<job>/<task>/<rank>.<attempt>/out/<name>                 its outputs ($PLEXUS_OUT)
//! DIR/work/<job>/<task>/<rank>.<attempt>/tmp/                       its $TMPDIR
//! DIR/logs/<job>/<task>/<rank>.<attempt>.out|.err  stdout / stderr of an attempt; kept
//! ```
//!
//! Modes (set at start): DIR and `work/` 0711 (tasks under uids of their own reach their work
//! dirs through them, and list nothing), `tls/`, `cache/`, `logs/`, `tmp/`, `procs/` 0700 and
//! `lock` 0600; an attempt's work dir, `out/` and `tmp/` 0700, its task uid's.
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

    /// The worker's key, certificate and the cluster CA.
    pub fn tls_dir(&self) -> PathBuf {
        self.root.join("tls")
    }

    /// The rail Q-learning parameters an operator sets while the worker runs (`tuning`).
    pub fn rail_tuning_file(&self) -> PathBuf {
        self.root.join("rail-tuning")
    }

    /// Exists while the worker is registered with the coordinator.
    pub fn registered_file(&self) -> PathBuf {
        self.root.join("registered")
    }

    /// The lock file one worker process holds for as long as it runs.
    pub fn lock_file(&self) -> PathBuf {
        self.root.join("lock")
    }

    /// Pid records of attempts confined only by their process group (see `isolation`).
    pub fn pid_records_dir(&self) -> PathBuf {
        self.root.join("procs")
    }

    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("cache")
    }

    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// Jobs' working dirs, unpacked read-only, one per archive digest (`crate::working_dir`).
    pub fn code_dir(&self) -> PathBuf {
        self.root.join("code")
    }

    /// Python environments, one per requirements list and interpreter (`crate::python_env`).
    pub fn envs_dir(&self) -> PathBuf {
        self.root.join("envs")
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

    /// One attempt's name as a single path component, `<job>.<task>.<rank>.<attempt>`: its
    /// cgroup's and its pid record's name. Task names have no dots, so it is unambiguous.
    pub fn attempt_name(a: &AttemptRef) -> String {
        format!("{}.{}.{}.{}", a.job, a.task, a.rank, a.attempt)
    }

    /// The stdout and stderr files of one attempt.
    pub fn log_files(&self, a: &AttemptRef) -> (PathBuf, PathBuf) {
        let dir = self.logs_root().join(a.job.to_string()).join(&a.task);
        (dir.join(format!("{}.{}.out", a.rank, a.attempt)), dir.join(format!("{}.{}.err", a.rank, a.attempt)))
    }
}
