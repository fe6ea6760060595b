//! Python environments on this worker (`python = { pip = [..] }` in a job file): one virtual
//! environment per distinct list of requirements and interpreter, built the first time an
//! attempt needs it (with `uv` when the worker finds it on its `PATH`, else `python -m venv` and
//! `pip`), kept in `DIR/envs/<key>/` across attempts and worker restarts, and evicted least
//! recently used once they pass the worker's bound (`--python-envs`). An attempt runs with its
//! environment's `bin/` first on `PATH` and `VIRTUAL_ENV` set.
//!
//! * **Once per node.** Attempts needing the same environment wait for one build (a lock per
//!   key); an environment in use by an attempt is never evicted.
//! * **Failures are the build's.** A requirement that cannot be installed fails the attempt
//!   before its command runs, with the installer's own last lines, not as the task's exit 1.
//! * **Readable by task uids, written by none.** The tree is the worker's, made `o+rX`, never
//!   writable by others; `DIR/envs/` is search-only (0711), so a task reaches an environment by
//!   its path alone. When tasks run under uids of their own, the interpreter itself must be
//!   reachable by them; a build refuses one that is not (say, under a `/root` that others cannot
//!   search) and names `--python`.
//! * **Crash-safe.** An environment is used only once its `.plexus-ready` marker is written, the
//!   last step of its build; a directory without one is removed at start and before a build.
//!   (Environments are built in place: a venv's scripts name its absolute path.)

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tracing::{info, warn};

use crate::error::{Error, Result};

/// The marker a finished build writes last: its contents are the requirements, one per line.
const READY: &str = ".plexus-ready";
/// How much of an installer's output a failure reports (its last bytes).
const OUTPUT_TAIL: usize = 3000;
/// The longest a build may take (creating the venv and installing), then it is killed.
pub const BUILD_TIMEOUT: Duration = Duration::from_secs(20 * 60);
/// Default bound of all environments together (`--python-envs`).
pub const DEFAULT_MAX_BYTES: u64 = 8 << 30;

/// The worker's Python environments.
#[derive(Debug)]
pub struct PythonEnvs {
    root: PathBuf,
    /// The interpreter environments are built with (`--python`).
    python: String,
    max_bytes: u64,
    /// Whether tasks run under uids of their own (then the interpreter must be reachable by them).
    task_uids: bool,
    /// The interpreter's identity (its path and version), found once: part of every key.
    identity: tokio::sync::OnceCell<std::result::Result<String, String>>,
    /// Whether `uv` answers on the worker's `PATH`, found once.
    uv: tokio::sync::OnceCell<bool>,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    envs: HashMap<String, Entry>,
    /// Bumped at each use: the order of last use.
    clock: u64,
}

#[derive(Debug, Default)]
struct Entry {
    /// Held while the environment is built; `true` once it is ready.
    slot: Arc<tokio::sync::Mutex<bool>>,
    bytes: u64,
    last_used: u64,
    /// Attempts holding it now (a [`Held`] each).
    in_use: usize,
}

/// An environment an attempt holds: not evicted until dropped.
#[derive(Debug)]
pub struct Held {
    state: Arc<Mutex<State>>,
    key: String,
    pub dir: PathBuf,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(e) = lock(&self.state).envs.get_mut(&self.key) {
            e.in_use = e.in_use.saturating_sub(1);
        }
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl PythonEnvs {
    /// The environments under `root` (made when first needed), built with `python`, all
    /// together kept within `max_bytes`; `task_uids`: tasks run under uids of their own.
    pub fn new(root: PathBuf, python: String, max_bytes: u64, task_uids: bool) -> PythonEnvs {
        PythonEnvs {
            root,
            python,
            max_bytes,
            task_uids,
            identity: tokio::sync::OnceCell::new(),
            uv: tokio::sync::OnceCell::new(),
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    /// Takes over what an earlier run left under the root (created 0711 if missing): finished
    /// environments are kept (oldest marker first in the LRU order), anything else is removed.
    pub fn recover(&self) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let root = &self.root;
        std::fs::create_dir_all(root).map_err(Error::io("create", root))?;
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711))
            .map_err(Error::io("set the mode of", root))?;
        let mut found = Vec::new();
        for e in std::fs::read_dir(root).map_err(Error::io("read", root))?.flatten() {
            let path = e.path();
            let ready = std::fs::metadata(path.join(READY)).and_then(|m| m.modified()).ok();
            match (ready, e.file_name().to_str().filter(|n| is_key(n))) {
                (Some(at), Some(key)) => found.push((at, key.to_string(), tree_bytes(&path))),
                _ => remove(&path),
            }
        }
        found.sort();
        let mut state = lock(&self.state);
        for (_, key, bytes) in found {
            state.clock += 1;
            let last_used = state.clock;
            let entry = Entry { slot: Arc::new(tokio::sync::Mutex::new(true)), bytes, last_used, in_use: 0 };
            state.envs.insert(key, entry);
        }
        if !state.envs.is_empty() {
            info!(envs = state.envs.len(), dir = %root.display(), "python environments kept from an earlier run");
        }
        Ok(())
    }

    /// The environment with `requirements`, built the first time (attempts that need one being
    /// built wait for that build). Held until the returned value is dropped.
    pub async fn get(&self, requirements: &[String]) -> Result<Held> {
        let failed = |reason: String| Error::PythonEnv { reason };
        let identity = self.identity().await.map_err(failed)?;
        let key = env_key(&identity, requirements);
        let slot = {
            let mut st = lock(&self.state);
            let e = st.envs.entry(key.clone()).or_default();
            e.in_use += 1;
            Arc::clone(&e.slot)
        };
        let held = Held { state: Arc::clone(&self.state), key: key.clone(), dir: self.root.join(&key) };
        let mut ready = slot.lock().await;
        if !*ready {
            let started = std::time::Instant::now();
            self.build(&held.dir, requirements).await?;
            let dir = held.dir.clone();
            let bytes = tokio::task::spawn_blocking(move || tree_bytes(&dir)).await.unwrap_or(0);
            info!(env = %key, bytes, secs = started.elapsed().as_secs_f64(), "python environment built");
            if let Some(e) = lock(&self.state).envs.get_mut(&key) {
                e.bytes = bytes;
            }
            *ready = true;
        }
        drop(ready);
        {
            let mut st = lock(&self.state);
            st.clock += 1;
            let now = st.clock;
            if let Some(e) = st.envs.get_mut(&key) {
                e.last_used = now;
            }
        }
        self.evict().await;
        Ok(held)
    }

    /// The interpreter's path and version, once; refused when tasks under uids of their own
    /// could not run it.
    async fn identity(&self) -> std::result::Result<String, String> {
        let python = self.python.clone();
        let task_uids = self.task_uids;
        self.identity
            .get_or_init(|| async move {
                let probe = "import sys; print(sys.executable); print(sys.version.replace(chr(10), ' '))";
                let out = tokio::process::Command::new(&python)
                    .args(["-c", probe])
                    .stdin(Stdio::null())
                    .output()
                    .await
                    .map_err(|e| format!("cannot run the worker's interpreter {python:?} (--python): {e}"))?;
                if !out.status.success() {
                    return Err(format!(
                        "the worker's interpreter {python:?} (--python) failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                let exe = text.lines().next().unwrap_or_default().to_string();
                if task_uids && let Some(closed) = closed_to_others(Path::new(&exe)) {
                    return Err(format!(
                        "the interpreter {exe} is under {closed}, which task uids cannot search: start the worker with --python naming one they can run (e.g. /usr/bin/python3), or with --task-user worker"
                    ));
                }
                Ok(text.trim().to_string())
            })
            .await
            .clone()
    }

    /// Builds the environment in `dir`: the venv, the requirements, the modes, the marker.
    async fn build(&self, dir: &Path, requirements: &[String]) -> Result<()> {
        let failed = |reason: String| Error::PythonEnv { reason };
        let (d, root) = (dir.to_path_buf(), self.root.clone());
        let made = tokio::task::spawn_blocking(move || {
            use std::os::unix::fs::PermissionsExt;
            remove(&d);
            std::fs::create_dir_all(&root)?;
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711))
        })
        .await;
        if let Ok(Err(e)) = made {
            return Err(failed(format!("creating {}: {e}", self.root.display())));
        }
        let uv = *self.uv.get_or_init(|| async { answers("uv", &["--version"]).await }).await;
        let venv_python = dir.join("bin").join("python");
        let dir_arg = dir.display().to_string();
        let (create, install): (Vec<String>, Vec<String>) = if uv {
            (
                vec!["uv".into(), "venv".into(), "--quiet".into(), "--python".into(), self.python.clone(), dir_arg],
                ["uv", "pip", "install", "--python"]
                    .iter()
                    .map(|s| s.to_string())
                    .chain([venv_python.display().to_string()])
                    .collect(),
            )
        } else {
            (
                vec![self.python.clone(), "-m".into(), "venv".into(), dir_arg],
                [venv_python.display().to_string()]
                    .into_iter()
                    .chain(
                        ["-m", "pip", "install", "--no-input", "--disable-pip-version-check"]
                            .iter()
                            .map(|s| s.to_string()),
                    )
                    .collect(),
            )
        };
        let mut install = install;
        install.extend(requirements.iter().cloned());
        let result = async {
            run_step("creating the virtual environment", &create).await?;
            run_step("installing the requirements", &install).await?;
            let (d, reqs) = (dir.to_path_buf(), requirements.join("\n"));
            tokio::task::spawn_blocking(move || finish(&d, &reqs))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("finishing {}: {e}", dir.display()))
        }
        .await;
        if let Err(reason) = result {
            let d = dir.to_path_buf();
            let _ = tokio::task::spawn_blocking(move || remove(&d)).await;
            return Err(failed(reason));
        }
        Ok(())
    }

    /// Removes least recently used environments that no attempt holds until all together are
    /// within the bound.
    async fn evict(&self) {
        loop {
            let victim = {
                let mut st = lock(&self.state);
                let total: u64 = st.envs.values().map(|e| e.bytes).sum();
                if total <= self.max_bytes {
                    return;
                }
                let key = st
                    .envs
                    .iter()
                    .filter(|(_, e)| e.in_use == 0 && e.slot.try_lock().is_ok_and(|r| *r))
                    .min_by_key(|(_, e)| e.last_used)
                    .map(|(k, _)| k.clone());
                match key {
                    Some(k) => {
                        let e = st.envs.remove(&k).expect("found above");
                        (k, e.bytes, total)
                    }
                    None => {
                        warn!(total, bound = self.max_bytes, "python environments pass their bound, all in use");
                        return;
                    }
                }
            };
            let (key, bytes, total) = victim;
            info!(env = %key, bytes, total, bound = self.max_bytes, "evicting the least recently used python environment");
            let dir = self.root.join(&key);
            let _ = tokio::task::spawn_blocking(move || remove(&dir)).await;
        }
    }
}

/// The variables an attempt runs with for its environment `dir`: its `bin/` first on `path`
/// (the task's `PATH`), and `VIRTUAL_ENV`.
pub fn env_vars(dir: &Path, path: &str) -> [(String, String); 2] {
    let bin = dir.join("bin").display().to_string();
    let path = if path.is_empty() { bin } else { format!("{bin}:{path}") };
    [("PATH".into(), path), ("VIRTUAL_ENV".into(), dir.display().to_string())]
}

/// The key of an environment: BLAKE3 of the interpreter's identity and the requirements, in
/// hex (32 digits).
pub fn env_key(identity: &str, requirements: &[String]) -> String {
    // Requirements hold no control characters (checked), so the lines cannot run together.
    let text = std::iter::once(identity).chain(requirements.iter().map(String::as_str)).collect::<Vec<_>>().join("\n");
    plexus_proto::Digest::of(text.as_bytes()).to_string()[..32].to_string()
}

fn is_key(name: &str) -> bool {
    name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Runs one step of a build, its output kept (the last [`OUTPUT_TAIL`] bytes) for the error,
/// killed after [`BUILD_TIMEOUT`].
async fn run_step(what: &str, argv: &[String]) -> std::result::Result<(), String> {
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("PIP_NO_INPUT", "1")
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| format!("{what}: cannot run {}: {e}", argv[0]))?;
    let (mut out, mut err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let read = async {
        let (mut o, mut e) = (Tail::default(), Tail::default());
        tokio::join!(o.read(&mut out), e.read(&mut err));
        (o, e)
    };
    let waited = tokio::time::timeout(BUILD_TIMEOUT, async {
        let ((o, e), status) = tokio::join!(read, child.wait());
        (o, e, status)
    })
    .await;
    let (o, e, status) = match waited {
        Ok(r) => r,
        Err(_) => return Err(format!("{what}: still running after {} s; killed", BUILD_TIMEOUT.as_secs())),
    };
    let status = status.map_err(|e| format!("{what}: {e}"))?;
    if status.success() {
        return Ok(());
    }
    // pip says what went wrong on stderr; its stdout has the progress before it.
    let said = if e.0.trim_ascii().is_empty() { o.text() } else { e.text() };
    Err(format!("{what} failed ({status}):\n{}", said.trim_end()))
}

/// The last [`OUTPUT_TAIL`] bytes of a stream.
#[derive(Default)]
struct Tail(Vec<u8>);

impl Tail {
    async fn read(&mut self, r: &mut (impl tokio::io::AsyncRead + Unpin)) {
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf).await {
            if n == 0 {
                break;
            }
            self.0.extend_from_slice(&buf[..n]);
            if self.0.len() > 2 * OUTPUT_TAIL {
                self.0.drain(..self.0.len() - OUTPUT_TAIL);
            }
        }
    }

    fn text(&self) -> String {
        let start = self.0.len().saturating_sub(OUTPUT_TAIL);
        String::from_utf8_lossy(&self.0[start..]).into_owned()
    }
}

/// Whether `program args` runs and exits 0.
async fn answers(program: &str, args: &[&str]) -> bool {
    tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok_and(|s| s.success())
}

/// The last step of a build: every file and directory readable by others (and executable where
/// the owner may execute), none writable by them; then the marker.
fn finish(dir: &Path, requirements: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_symlink() {
                continue;
            }
            let mode = e.metadata()?.permissions().mode();
            let exec = if t.is_dir() || mode & 0o100 != 0 { 0o055 } else { 0o044 };
            std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode((mode | exec) & !0o022 & 0o7777))?;
            if t.is_dir() {
                stack.push(e.path());
            }
        }
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    let marker = dir.join(READY);
    std::fs::write(&marker, requirements)?;
    std::fs::set_permissions(&marker, std::fs::Permissions::from_mode(0o644))
}

/// The bytes of the files under `dir` (symlinks not followed).
fn tree_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => total += e.metadata().map(|m| m.len()).unwrap_or(0),
                _ => {}
            }
        }
    }
    total
}

/// The first ancestor of `exe` that others cannot search, if any.
fn closed_to_others(exe: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let dirs: Vec<&Path> = exe.ancestors().skip(1).collect();
    dirs.into_iter()
        .rev()
        .find(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 == 0))
        .map(|d| d.display().to_string())
}

/// Removes a directory tree or file; a failure is logged.
fn remove(path: &Path) {
    let r = if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
    if let Err(e) = r
        && e.kind() != std::io::ErrorKind::NotFound
    {
        warn!(path = %path.display(), error = %e, "could not remove a python environment");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_interpreter_and_the_requirements_in_order() {
        let a = env_key("py3.11", &["six".into(), "tomli".into()]);
        assert!(is_key(&a), "{a}");
        assert_eq!(a, env_key("py3.11", &["six".into(), "tomli".into()]));
        assert_ne!(a, env_key("py3.12", &["six".into(), "tomli".into()]));
        assert_ne!(a, env_key("py3.11", &["tomli".into(), "six".into()]));
        assert_ne!(env_key("x", &["ab".into()]), env_key("x", &["a".into(), "b".into()]));
    }

    #[test]
    fn the_env_goes_first_on_path() {
        let [(p, path), (v, venv)] = env_vars(Path::new("/d/envs/k"), "/usr/bin:/bin");
        assert_eq!((p.as_str(), path.as_str()), ("PATH", "/d/envs/k/bin:/usr/bin:/bin"));
        assert_eq!((v.as_str(), venv.as_str()), ("VIRTUAL_ENV", "/d/envs/k"));
        assert_eq!(env_vars(Path::new("/e"), "")[0].1, "/e/bin");
    }

    #[test]
    fn an_unsearchable_ancestor_is_found() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let closed = t.path().join("closed");
        std::fs::create_dir_all(closed.join("bin")).unwrap();
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(closed_to_others(&closed.join("bin/python")), Some(closed.display().to_string()));
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o711)).unwrap();
        assert_eq!(
            closed_to_others(&closed.join("bin/python")),
            None,
            "{} and its ancestors are searchable",
            t.path().display()
        );
    }

    /// Past the bound, the least recently used environment that no attempt holds goes; one
    /// that is held stays, even when it is the oldest.
    #[tokio::test]
    async fn eviction_takes_the_least_recently_used_that_no_attempt_holds() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("envs");
        let keys = [
            "00000000000000000000000000000001",
            "00000000000000000000000000000002",
            "00000000000000000000000000000003",
        ];
        for (i, k) in keys.iter().enumerate() {
            std::fs::create_dir_all(root.join(k)).unwrap();
            std::fs::write(root.join(k).join("blob"), vec![0u8; 1000]).unwrap();
            std::fs::write(root.join(k).join(READY), "x").unwrap();
            // Markers in order: the first is the least recently used.
            let at = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + i as u64);
            std::fs::File::options().write(true).open(root.join(k).join(READY)).unwrap().set_modified(at).unwrap();
        }
        let envs = PythonEnvs::new(root.clone(), "python3".into(), 2100, false);
        envs.recover().unwrap();
        // The oldest is held by an attempt.
        lock(&envs.state).envs.get_mut(keys[0]).unwrap().in_use = 1;
        envs.evict().await;
        let left: Vec<bool> = keys.iter().map(|k| root.join(k).exists()).collect();
        assert_eq!(left, [true, false, true], "the oldest unheld went, and the sum is within the bound");
        assert_eq!(lock(&envs.state).envs.len(), 2);
    }

    /// What an earlier run left: a finished environment is kept, a partial one and stray
    /// files are removed.
    #[test]
    fn open_keeps_finished_environments_only() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("envs");
        let done = root.join("0123456789abcdef0123456789abcdef");
        let partial = root.join("fedcba9876543210fedcba9876543210");
        std::fs::create_dir_all(done.join("lib")).unwrap();
        std::fs::write(done.join("lib/x.py"), vec![0u8; 1000]).unwrap();
        std::fs::write(done.join(READY), "six").unwrap();
        std::fs::create_dir_all(&partial).unwrap();
        std::fs::write(root.join("stray"), "x").unwrap();
        let envs = PythonEnvs::new(root.clone(), "python3".into(), 1 << 30, false);
        envs.recover().unwrap();
        assert!(done.exists() && !partial.exists() && !root.join("stray").exists());
        let st = lock(&envs.state);
        assert_eq!(st.envs.len(), 1);
        assert_eq!(st.envs["0123456789abcdef0123456789abcdef"].bytes, 1003);
    }
}
