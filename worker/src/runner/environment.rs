//! The environment stage: which GPUs an attempt may use, and the variables its command runs with.

use std::path::Path;

use crate::error::{Error, Result};

use super::validation::Work;

impl Work {
    /// Checks the GPUs given against those this worker offers: the coordinator assigns only
    /// those, so another index is a confused coordinator, not a device to hand out.
    pub fn check_gpus(&self, node: &NodeGpus) -> Result<()> {
        match self.gpus.iter().find(|g| !node.offered.contains(g)) {
            None => Ok(()),
            Some(g) => {
                Err(Error::InvalidAssignment(format!("GPU {g} is not one this worker offers ({:?})", node.offered)))
            }
        }
    }
}

/// The node's GPUs as subtasks' environments need them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeGpus {
    /// The device indices this worker offers (`--gpus`), as nvidia-smi numbers them.
    pub offered: Vec<u32>,
    /// Whether the node has any GPU at all, offered or not: then every subtask is told which it
    /// may use, an empty list included, so one without GPUs cannot touch them.
    pub present: bool,
}

/// The variables a command runs with on top of the worker's own environment, in the order they
/// are applied (a later one wins), each key once:
///
/// 1. the job's `env`;
/// 2. `OMP_NUM_THREADS` and `MKL_NUM_THREADS` as the cpu request rounded up (at least 1), unless
///    the job's env sets them: thread pools sized for the whole machine would fight the cgroup's
///    cpu limit;
/// 3. when the attempt has GPUs or the node has any: `CUDA_VISIBLE_DEVICES` as its device indices
///    (empty without GPUs), `CUDA_DEVICE_ORDER=PCI_BUS_ID` so CUDA numbers devices as
///    nvidia-smi does; these override the job's env, as the device assignment is the
///    coordinator's, not the job's;
/// 4. `PLEXUS_GPUS` (the same indices, also without GPUs on the node) and the other `PLEXUS_*`,
///    with `PLEXUS_PARAM_<KEY>` for each of a sweep replica's parameters;
///    for a `communicator = true` gang member, `PLEXUS_COLLECTIVE_SOCKET` and
///    `PLEXUS_COLLECTIVE_SECRET` (its collective endpoint); for a task with a `checkpoint`
///    output, `PLEXUS_CHECKPOINT` (that output's path) and, when an earlier attempt's is kept and
///    was fetched, `PLEXUS_RESUME_FROM` (read-only).
pub fn task_env(work: &Work, gpus: &NodeGpus, in_dir: &Path, out_dir: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = work.env.clone();
    let set = |env: &mut Vec<(String, String)>, k: &str, v: String| {
        env.retain(|(key, _)| key != k);
        env.push((k.to_string(), v));
    };
    let threads = (work.cpu.ceil() as u64).max(1).to_string();
    for k in ["OMP_NUM_THREADS", "MKL_NUM_THREADS"] {
        if !work.env.iter().any(|(key, _)| key == k) {
            set(&mut env, k, threads.clone());
        }
    }
    let devices = work.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    if !work.gpus.is_empty() || gpus.present {
        set(&mut env, "CUDA_VISIBLE_DEVICES", devices.clone());
        set(&mut env, "CUDA_DEVICE_ORDER", "PCI_BUS_ID".into());
    }
    let a = &work.attempt;
    set(&mut env, "PLEXUS_GPUS", devices);
    set(&mut env, "PLEXUS_JOB", a.job.to_string());
    set(&mut env, "PLEXUS_TASK", a.task.clone());
    set(&mut env, "PLEXUS_RANK", a.rank.to_string());
    set(&mut env, "PLEXUS_REPLICAS", work.replicas.to_string());
    set(&mut env, "PLEXUS_ATTEMPT", a.attempt.to_string());
    set(&mut env, "PLEXUS_OUT", out_dir.display().to_string());
    set(&mut env, "PLEXUS_IN", in_dir.display().to_string());
    for (k, v) in &work.params {
        set(&mut env, &plexus_proto::rules::param_env_name(k), v.clone());
    }
    if let Some(c) = &work.checkpoint {
        set(&mut env, "PLEXUS_CHECKPOINT", out_dir.join(c).display().to_string());
    }
    if let Some(r) = &work.resume {
        // Set only when the kept checkpoint could be fetched (`Ctx::execute` runs without it).
        let path = in_dir.join(&r.task).join(r.rank.to_string()).join(&r.name);
        if path.is_file() {
            set(&mut env, "PLEXUS_RESUME_FROM", path.display().to_string());
        }
    }
    if let Some(g) = &work.gang {
        // The collective endpoint of a `communicator = true` gang member (`crate::gang_endpoint`).
        let socket = in_dir.parent().unwrap_or(in_dir).join(crate::gang_endpoint::SOCKET_NAME);
        set(&mut env, "PLEXUS_COLLECTIVE_SOCKET", socket.display().to_string());
        set(&mut env, "PLEXUS_COLLECTIVE_SECRET", g.secret.clone());
    }
    env
}

/// The variables of the job's code: `PLEXUS_WORKING_DIR` (its unpacked working dir, `cwd`) and,
/// with a Python environment `python`, its `bin/` first on `PATH` (the job's `PATH` when its
/// `env` sets one, else the worker's) and `VIRTUAL_ENV`.
pub fn code_env(work: &Work, cwd: Option<&Path>, python: Option<&Path>) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> =
        cwd.map(|d| ("PLEXUS_WORKING_DIR".to_string(), d.display().to_string())).into_iter().collect();
    if let Some(dir) = python {
        let path = match work.env.iter().find(|(k, _)| k == "PATH") {
            Some((_, p)) => p.clone(),
            None => std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
        };
        env.extend(crate::python_env::env_vars(dir, &path));
    }
    env
}

/// Variables of the worker's own environment that its tasks do not inherit: the join token
/// buys a worker certificate.
pub const WORKER_ONLY_ENV: [&str; 2] = ["PLEXUS_JOIN_TOKEN", "PLEXUS_JOIN_TOKEN_FILE"];

/// The account variables of a task, each unless the job's `env` sets it: `TMPDIR` is the
/// attempt's own `tmp/`; under a uid of its own (`uid`), `HOME` is the work dir (the worker's
/// home is not the task's to write) and `USER`/`LOGNAME` are `plexus-<uid>` (the uid names no
/// account, and programs that ask for the user's name read these first).
pub fn account_env(work: &Work, root: &Path, tmp: &Path, uid: Option<u32>) -> Vec<(String, String)> {
    let mut env = vec![("TMPDIR".to_string(), tmp.display().to_string())];
    if let Some(uid) = uid {
        env.push(("HOME".into(), root.display().to_string()));
        env.push(("USER".into(), format!("plexus-{uid}")));
        env.push(("LOGNAME".into(), format!("plexus-{uid}")));
    }
    env.retain(|(k, _)| !work.env.iter().any(|(key, _)| key == k));
    env
}
