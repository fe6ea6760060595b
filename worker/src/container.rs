//! Container images (`image = "name:tag"` in a job file): the runtime this worker found (Docker
//! or Podman, `--container-runtime`), images pulled once per node, and the command line that runs
//! an attempt's command in a container of its image.
//!
//! What a containerised attempt gets is what a process attempt gets:
//! * **Its limits.** Under cgroup v1 the container is created inside the attempt's own cgroups
//!   (`--cgroup-parent`), so the attempt's cpu, memory and pids limits hold it, its freezer
//!   freezes it (fencing), and killing the attempt kills it; an OOM is seen as the attempt's.
//!   Otherwise (cgroup v2, process groups) the runtime is given the same limits (`--cpus`,
//!   `--memory`) and the container is removed by name when the attempt ends.
//! * **Its files at the same paths.** The work dir (`$HOME`, `$TMPDIR`, `$PLEXUS_OUT` and the
//!   collective endpoint's socket) writable, `$PLEXUS_IN` and the working dir read-only; the
//!   command runs in the working dir, or the work dir.
//! * **Its identity.** The task uid (`--user uid:uid`) when tasks run under uids of their own,
//!   with `no-new-privileges`; the host's network (peers, the coordinator).
//! * **Its GPUs.** `--gpus "device=..."` with the assigned indices; inside, CUDA numbers them
//!   from 0 (`CUDA_VISIBLE_DEVICES` is rewritten), `PLEXUS_GPUS` keeps the node's numbers.
//! * **Its variables**, passed by name (`-e KEY`) from the runtime client's environment, so that
//!   no value (the collective secret) shows in a process list.
//!
//! The command replaces the image's entrypoint (`--entrypoint argv[0]`), as a Kubernetes
//! `command` does. Containers carry the label `org.plexus.worker=<id>`; a worker removes its own
//! leftovers when it starts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{info, warn};

use crate::error::{Error, Result};

/// The label a worker with a runtime carries (`container-runtime=docker`): tasks with an
/// `image` are placed only on workers that have it.
pub const RUNTIME_LABEL: &str = plexus_proto::runtime_env::RUNTIME_LABEL;
/// How long one pull may take before it is given up.
pub const PULL_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How long a quick runtime call (inspect, remove, info) may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// `--container-runtime`: which runtime runs `image` tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeChoice {
    /// Docker if its daemon answers, else Podman if it answers, else none.
    Auto,
    Docker,
    Podman,
    /// No container runtime: `image` tasks are not placed here.
    None,
}

/// The worker's container runtime.
#[derive(Debug)]
pub struct Containers {
    /// `docker` or `podman`: the client program, and the label's value.
    program: String,
    worker: String,
    /// One lock per image: held while it is pulled; `true` once it is known present.
    pulls: Mutex<HashMap<String, Arc<tokio::sync::Mutex<bool>>>>,
}

/// What a container runs with, beside the attempt's command.
pub struct RunSpec<'a> {
    pub name: &'a str,
    pub image: &'a str,
    pub argv: &'a [String],
    /// The work dir (writable) and `in/` (read-only) inside it; the working dir (read-only).
    pub root: &'a Path,
    pub input: &'a Path,
    pub working_dir: Option<&'a Path>,
    pub uid: Option<u32>,
    /// The attempt's cgroup path below each v1 hierarchy's root (`/plexus/<worker>/<attempt>`).
    pub cgroup_parent: Option<String>,
    /// Limits given to the runtime itself when there is no cgroup parent.
    pub cpu: f64,
    pub memory: u64,
    pub gpus: &'a [u32],
    /// The names of the variables to pass in (their values are in the client's environment).
    pub env_keys: Vec<String>,
}

impl Containers {
    /// The runtime `choice` names, if it answers (`auto`: the first that does); `None` for
    /// `none`, or `auto` with nothing answering. A named runtime that does not answer is an error.
    pub async fn detect(choice: RuntimeChoice, worker: &str) -> Result<Option<Containers>> {
        let candidates: &[&str] = match choice {
            RuntimeChoice::None => return Ok(None),
            RuntimeChoice::Auto => &["docker", "podman"],
            RuntimeChoice::Docker => &["docker"],
            RuntimeChoice::Podman => &["podman"],
        };
        for program in candidates {
            match call(program, &["version", "--format", "{{.Server.Version}}"]).await {
                Ok(v) => {
                    info!(runtime = program, version = v.trim(), "container runtime found");
                    return Ok(Some(Containers {
                        program: program.to_string(),
                        worker: worker.to_string(),
                        pulls: Mutex::new(HashMap::new()),
                    }));
                }
                Err(why) if choice != RuntimeChoice::Auto => {
                    return Err(Error::Config(format!("--container-runtime {program}: it does not answer: {why}")));
                }
                Err(why) => tracing::debug!(runtime = program, why, "no container runtime"),
            }
        }
        Ok(None)
    }

    /// `docker` or `podman`.
    pub fn program(&self) -> &str {
        &self.program
    }

    /// Removes the containers an earlier process of this worker left (it was killed before it
    /// could): their attempts are the coordinator's to place again.
    pub async fn remove_leftovers(&self) {
        let filter = format!("label=org.plexus.worker={}", self.worker);
        let ids = match call(&self.program, &["ps", "-aq", "--filter", &filter]).await {
            Ok(out) => out.split_whitespace().map(str::to_string).collect::<Vec<_>>(),
            Err(why) => return warn!(why, "could not list leftover containers"),
        };
        if ids.is_empty() {
            return;
        }
        let mut args = vec!["rm", "-f"];
        args.extend(ids.iter().map(String::as_str));
        match call(&self.program, &args).await {
            Ok(_) => info!(containers = ids.len(), "removed containers left by an earlier run"),
            Err(why) => warn!(why, "could not remove leftover containers"),
        }
    }

    /// Makes sure `image` is on this node: present, or pulled now (once per node: attempts
    /// that need it meanwhile wait for that pull). `pulling` is called before a pull starts.
    pub async fn ensure(&self, image: &str, pulling: impl FnOnce()) -> Result<()> {
        let slot = self.pulls.lock().unwrap_or_else(|p| p.into_inner()).entry(image.to_string()).or_default().clone();
        let mut present = slot.lock().await;
        if *present {
            return Ok(());
        }
        if call(&self.program, &["image", "inspect", "--format", "{{.Id}}", image]).await.is_ok() {
            *present = true;
            return Ok(());
        }
        pulling();
        let started = std::time::Instant::now();
        let pulled = tokio::time::timeout(PULL_TIMEOUT, call(&self.program, &["pull", "--quiet", image])).await;
        let why = match pulled {
            Ok(Ok(_)) => {
                info!(image, secs = started.elapsed().as_secs_f64(), "image pulled");
                *present = true;
                return Ok(());
            }
            Ok(Err(why)) => why,
            Err(_) => format!("the pull took longer than {} s", PULL_TIMEOUT.as_secs()),
        };
        Err(Error::Image {
            image: image.to_string(),
            reason: format!("not on this worker, and {} could not pull it: {why}", self.program),
        })
    }

    /// The command line (the runtime client's argv) that runs `spec`'s command in a container.
    pub fn run_argv(&self, spec: &RunSpec<'_>) -> Vec<String> {
        let mut a: Vec<String> = vec![self.program.clone(), "run".into(), "--rm".into(), "--init".into()];
        let mut push = |xs: &[&str]| a.extend(xs.iter().map(|s| s.to_string()));
        push(&["--name", spec.name, "--pull", "never", "--network", "host"]);
        push(&["--log-driver", "none", "--security-opt", "no-new-privileges"]);
        let worker_label = format!("org.plexus.worker={}", self.worker);
        push(&["--label", &worker_label]);
        let root = spec.root.display().to_string();
        let input = spec.input.display().to_string();
        push(&["-v", &format!("{root}:{root}"), "-v", &format!("{input}:{input}:ro")]);
        let cwd = match spec.working_dir {
            Some(w) => {
                let w = w.display().to_string();
                push(&["-v", &format!("{w}:{w}:ro")]);
                w
            }
            None => root,
        };
        push(&["-w", &cwd]);
        if let Some(uid) = spec.uid {
            push(&["--user", &format!("{uid}:{uid}")]);
        }
        match &spec.cgroup_parent {
            Some(parent) => push(&["--cgroup-parent", parent]),
            None => {
                if spec.cpu > 0.0 {
                    push(&["--cpus", &format!("{:.3}", spec.cpu)]);
                }
                if spec.memory > 0 {
                    push(&["--memory", &spec.memory.to_string()]);
                }
            }
        }
        if !spec.gpus.is_empty() {
            let ids = spec.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            push(&["--gpus", &format!("\"device={ids}\"")]);
        }
        for k in &spec.env_keys {
            push(&["-e", k]);
        }
        push(&["--entrypoint", &spec.argv[0], spec.image]);
        a.extend(spec.argv[1..].iter().cloned());
        a
    }

    /// Removes the container `name` if it is still there (an attempt killed, timed out or
    /// cancelled: its client is gone, the container may not be).
    pub async fn remove(&self, name: &str) {
        if let Err(why) = call(&self.program, &["rm", "-f", name]).await
            && !why.contains("No such container")
            && !why.contains("no such container")
        {
            warn!(container = name, why, "could not remove a container");
        }
    }
}

/// The variables of a container's command: `env` as the attempt has them, with
/// `CUDA_VISIBLE_DEVICES` renumbered from 0 when it has GPUs (inside, the runtime shows only
/// those, numbered from 0).
pub fn container_env(mut env: Vec<(String, String)>, gpus: &[u32]) -> Vec<(String, String)> {
    if !gpus.is_empty() {
        let inside = (0..gpus.len()).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
        for (k, v) in &mut env {
            if k == "CUDA_VISIBLE_DEVICES" {
                *v = inside.clone();
            }
        }
    }
    env
}

/// Removes what the runtime made of an attempt's cgroup path (`/plexus/<worker>/<attempt>`) in
/// the v1 hierarchies the worker does not confine with (`devices`, `blkio`, `cpuset`, ...): the
/// attempt's directory and, when empty, the parents the runtime made above it. Empty
/// directories only (`rmdir`); the worker's own hierarchies are its confinement's to clean.
pub fn remove_cgroup_leftovers(path: &str) {
    let Ok(mounts) = std::fs::read_dir("/sys/fs/cgroup") else { return };
    let path = Path::new(path.trim_start_matches('/'));
    for m in mounts.flatten() {
        let name = m.file_name();
        let name = name.to_string_lossy();
        if name.split(',').any(|c| crate::isolation::V1_CONTROLLERS.contains(&c)) || name == "unified" {
            continue;
        }
        let mut dir: PathBuf = m.path().join(path);
        // The attempt's directory, then `<worker>`, then `plexus`, each only if empty.
        for _ in 0..path.components().count() {
            if std::fs::remove_dir(&dir).is_err() {
                break;
            }
            dir.pop();
        }
    }
}

/// Runs `program args` to its end (within [`CALL_TIMEOUT`] unless it is a pull, which its caller
/// bounds): its stdout, or its stderr's last lines as the reason it failed.
async fn call(program: &str, args: &[&str]) -> std::result::Result<String, String> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let limit = if args.first() == Some(&"pull") { PULL_TIMEOUT } else { CALL_TIMEOUT };
    let out = match tokio::time::timeout(limit, cmd.output()).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => return Err(format!("cannot run {program}: {e}")),
        Err(_) => return Err(format!("{program} {} did not answer within {} s", args[0], limit.as_secs())),
    };
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let tail: String = err.trim().chars().rev().take(1500).collect::<Vec<_>>().into_iter().rev().collect();
    Err(if tail.is_empty() { format!("{program} {} failed ({})", args[0], out.status) } else { tail })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn containers() -> Containers {
        Containers { program: "docker".into(), worker: "wkr-1".into(), pulls: Mutex::new(HashMap::new()) }
    }

    #[test]
    fn a_container_gets_the_attempts_files_limits_identity_and_command() {
        let argv = vec!["python".to_string(), "train.py".into(), "--lr=0.1".into()];
        let spec = RunSpec {
            name: "plexus-a",
            image: "python:3.11-slim",
            argv: &argv,
            root: Path::new("/d/work/a"),
            input: Path::new("/d/work/a/in"),
            working_dir: Some(Path::new("/d/code/abc")),
            uid: Some(200_001),
            cgroup_parent: Some("/plexus/w/a".into()),
            cpu: 1.5,
            memory: 1 << 30,
            gpus: &[2, 3],
            env_keys: vec!["PLEXUS_OUT".into(), "PLEXUS_COLLECTIVE_SECRET".into()],
        };
        let got = containers().run_argv(&spec).join(" ");
        for part in [
            "docker run --rm --init --name plexus-a --pull never --network host",
            "--label org.plexus.worker=wkr-1",
            "-v /d/work/a:/d/work/a -v /d/work/a/in:/d/work/a/in:ro -v /d/code/abc:/d/code/abc:ro -w /d/code/abc",
            "--user 200001:200001 --cgroup-parent /plexus/w/a --gpus \"device=2,3\"",
            "-e PLEXUS_OUT -e PLEXUS_COLLECTIVE_SECRET --entrypoint python python:3.11-slim train.py --lr=0.1",
        ] {
            assert!(got.contains(part), "{part}\nin: {got}");
        }
        assert!(!got.contains("--cpus") && !got.contains("--memory"), "the cgroup parent holds the limits: {got}");
        let plain = RunSpec { cgroup_parent: None, uid: None, working_dir: None, gpus: &[], ..spec };
        let got = containers().run_argv(&plain).join(" ");
        assert!(got.contains("-w /d/work/a --cpus 1.500 --memory 1073741824 -e"), "{got}");
        assert!(!got.contains("--user") && !got.contains("--gpus"), "{got}");
    }

    #[test]
    fn gpus_are_numbered_from_zero_inside() {
        let env = vec![("CUDA_VISIBLE_DEVICES".to_string(), "2,3".to_string()), ("PLEXUS_GPUS".into(), "2,3".into())];
        let inside = container_env(env.clone(), &[2, 3]);
        assert_eq!(inside[0].1, "0,1");
        assert_eq!(inside[1].1, "2,3", "the node's numbers stay in PLEXUS_GPUS");
        assert_eq!(container_env(env.clone(), &[]), env);
    }
}
