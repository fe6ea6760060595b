//! Shared helpers of the benchmark binaries: the statistics and units their tables use, worlds
//! of worker processes, Gloo anchors, and the pieces of the live benchmarks.

/// The p-th percentile (0..=100) of a sample, by nearest rank; 0 for an empty sample. The one
/// rule is the simulator's report's, so the benchmarks and the simulator count alike.
pub fn percentile(sample: &[u64], p: f64) -> u64 {
    plexus_sim::report::percentile(sample.to_vec(), p)
}

/// The median of a sample (the upper one of an even count), `None` for an empty sample.
pub fn median(sample: &[f64]) -> Option<f64> {
    let mut v = sample.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The machine's CPU time so far, from `/proc/stat`'s `cpu` line, in clock ticks: (busy,
/// total), busy being everything but idle and I/O wait (user, system, interrupts, softirq —
/// where the kernel's network stack and the rig's `tc` shaping run — steal). `None` where there
/// is no `/proc/stat`.
pub fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// The share of all the machine's cores busy between two [`cpu_ticks`] readings (0..=1):
/// near 1, a measurement was bound by this machine's CPU, not by the links.
pub fn busy_share(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Option<f64> {
    let ((b0, t0), (b1, t1)) = (before?, after?);
    (t1 > t0).then(|| (b1.saturating_sub(b0)) as f64 / (t1 - t0) as f64)
}

/// A byte count as the tables print it: `512 B`, `64.0 KiB`, `4.0 MiB` (IEC units; the one
/// byte formatter, the CLI's and the worker's).
pub use plexus_proto::human_bytes as size;

/// Worlds of worker processes: copies of the running benchmark binary started as `--worker R`,
/// one per rank (on the rail rig, rank r in host r's namespace with its first rails), which
/// each print `ADDRS <their rail addresses>` and then read every rank's on stdin.
pub mod world {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Child, ChildStdout, Command, Stdio};

    use plexus_dataplane::RailKey;
    use plexus_dataplane::rig::Rig;

    /// The flags a benchmark gives the rank processes it starts (`--worker R`, with `--rails`
    /// and `--rail-key`); hidden from a person's `--help`. Flattened into each benchmark's own.
    #[derive(Debug, clap::Args)]
    pub struct WorkerArgs {
        /// A worker rank's own rail addresses (given by the parent).
        #[arg(long, value_delimiter = ',', hide = true)]
        pub rails: Vec<std::net::IpAddr>,
        /// A worker rank's rail key, hex (given by the parent for `key`).
        #[arg(long = "rail-key", hide = true)]
        pub rail_key: Option<String>,
        /// Run as worker rank R (started by the benchmark itself).
        #[arg(long, value_name = "R", hide = true)]
        pub worker: Option<usize>,
    }

    /// A fresh rail key for one world, hex, or none for `open`.
    pub fn key(auth: &str) -> Option<String> {
        (auth == "key").then(|| hex::encode(RailKey::random().as_bytes()))
    }

    /// A worker's side: binds its endpoint on `rails` (loopback when none) with the weighted
    /// scheduler and the rail key given as hex (none: open rails), prints its addresses, and
    /// reads every rank's from stdin.
    pub async fn join(
        rails: &[std::net::IpAddr],
        seg_max: u64,
        send_buffer: Option<usize>,
        rail_key: Option<&str>,
    ) -> Result<(std::sync::Arc<plexus_dataplane::Endpoint>, Vec<Vec<std::net::SocketAddr>>), String> {
        use plexus_dataplane::{Endpoint, EndpointConfig, RailAuth, SchedulerKind};
        let cfg = EndpointConfig {
            rails: if rails.is_empty() { vec![std::net::IpAddr::from([127, 0, 0, 1])] } else { rails.to_vec() },
            scheduler: SchedulerKind::Weighted,
            seg_max,
            send_buffer,
            auth: match rail_key {
                Some(text) => {
                    let bytes = hex::decode(text).map_err(|e| format!("--rail-key: {e}"))?;
                    RailAuth::Key(RailKey::from_bytes(&bytes).map_err(|e| e.to_string())?)
                }
                None => RailAuth::Open,
            },
            ..Default::default()
        };
        let ep = std::sync::Arc::new(Endpoint::bind(cfg).await.map_err(|e| e.to_string())?);
        let mine: Vec<String> = ep.local_addrs().iter().map(|a| a.to_string()).collect();
        println!("ADDRS {}", mine.join(","));
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map_err(|e| e.to_string())?;
        let ranks = line
            .trim()
            .split(';')
            .map(|r| r.split(',').map(|a| a.parse().map_err(|e| format!("{a}: {e}"))).collect())
            .collect::<Result<_, String>>()?;
        Ok((ep, ranks))
    }

    /// Starts `n` workers with `args` (and `--rail-key`, and on the rig `--rails`), introduces
    /// them to each other, and returns them with their stdout.
    pub fn spawn(
        n: usize,
        args: &[String],
        key: Option<&str>,
        rig: Option<(&Rig, usize)>,
    ) -> (Vec<Child>, Vec<BufReader<ChildStdout>>) {
        let exe = std::env::current_exe().expect("own path");
        let mut children: Vec<Child> = (0..n)
            .map(|r| {
                let mut a = vec!["--worker".to_string(), r.to_string()];
                a.extend(args.iter().cloned());
                if let Some(k) = key {
                    a.extend(["--rail-key".to_string(), k.to_string()]);
                }
                match rig {
                    Some((rig, used)) => {
                        let ips: Vec<String> = rig.addrs(r)[..used].iter().map(|a| a.to_string()).collect();
                        a.extend(["--rails".to_string(), ips.join(",")]);
                        rig.spawn(r, &exe.to_string_lossy(), &a).expect("spawn worker in the rig")
                    }
                    None => Command::new(&exe)
                        .args(&a)
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::inherit())
                        .spawn()
                        .expect("spawn worker"),
                }
            })
            .collect();
        let mut readers: Vec<_> =
            children.iter_mut().map(|c| BufReader::new(c.stdout.take().expect("piped"))).collect();
        let mut addrs = Vec::new();
        for rd in &mut readers {
            let mut line = String::new();
            rd.read_line(&mut line).expect("worker stdout");
            let a = line
                .trim()
                .strip_prefix("ADDRS ")
                .unwrap_or_else(|| panic!("worker said {line:?} instead of its addresses"));
            addrs.push(a.to_string());
        }
        let all = addrs.join(";");
        for c in &mut children {
            let stdin = c.stdin.as_mut().expect("piped");
            writeln!(stdin, "{all}").expect("worker stdin");
        }
        (children, readers)
    }
}

/// Gloo's collectives as anchors, in the same run as ours: `../shared/anchors/gloo_collective.py`
/// run with the project's torch venv (`scripts/setup-torch.sh`), on loopback in its spawn mode
/// or on the rail rig one process per rank, rank r in host r's namespace on rail 0 only (Gloo
/// sends a collective over one device; it does not stripe).
pub mod gloo {
    use std::io::{BufRead, BufReader};
    use std::net::{IpAddr, TcpListener};
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use plexus_dataplane::rig::Rig;

    /// The anchor script, found from this crate's folder (benchmarks run from the repo).
    pub const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/anchors/gloo_collective.py");

    /// Python's warnings are off: torch warns at import that the venv has no NumPy (the
    /// script needs none), once per rank.
    const QUIET: &str = "ignore";

    /// The python of the torch venv `scripts/setup-torch.sh` makes (`PLEXUS_TORCH_VENV`, else
    /// `~/.cache/plexus/torch-2.13.0`), or `python3` where there is no home.
    pub fn python() -> String {
        if let Ok(v) = std::env::var("PLEXUS_TORCH_VENV") {
            return format!("{v}/bin/python");
        }
        std::env::var("HOME")
            .map_or_else(|_| "python3".to_string(), |h| format!("{h}/.cache/plexus/torch-2.13.0/bin/python"))
    }

    /// One run of the script: its arguments after the script's path (the collective first) and
    /// its environment (`WARMUP`, `ITERS`, `SIZES_MIB`, …).
    pub struct Job<'a> {
        pub args: Vec<String>,
        pub env: Vec<(&'a str, String)>,
        /// A run that fails in one rank leaves the others waiting for it (Gloo's store waits
        /// 30 minutes): past this the bench kills them all and reports the failure.
        pub timeout: Duration,
    }

    /// The script in spawn mode on loopback (it starts the ranks itself); what it wrote to
    /// `--json`.
    pub fn spawn_mode(job: &Job<'_>) -> Result<serde_json::Value, String> {
        let json = json_path();
        let mut c = Command::new(python());
        c.arg(SCRIPT)
            .args(&job.args)
            .arg("--json")
            .arg(&json)
            .envs(job.env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("PYTHONWARNINGS", QUIET)
            .env("TORCH_CPP_LOG_LEVEL", "ERROR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        // Its own process group, so a kill reaches the ranks it spawned too.
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        let child = c.spawn().map_err(|e| format!("cannot start {}: {e}", python()))?;
        finish(vec![child], job.timeout, &json)
    }

    /// The script in rank mode on the rig: rank r in host r's namespace, Gloo on rail 0
    /// (interface `plx<r>r0`), rank 0 (host 0, the root namespace) the master; what rank 0
    /// wrote to `--json`.
    pub fn on_rig(rig: &Rig, job: &Job<'_>) -> Result<serde_json::Value, String> {
        on_rig_with(rig, SCRIPT, job)
    }

    /// [`on_rig`] with another anchor script that takes the same rank-mode arguments (`--rank
    /// --world --master --ifname --json`), e.g. `ddp_train.py`.
    pub fn on_rig_with(rig: &Rig, script: &str, job: &Job<'_>) -> Result<serde_json::Value, String> {
        let master = rig.addr(0, 0);
        let port = free_port(master)?;
        let json = json_path();
        let n = rig.hosts();
        let mut children = Vec::new();
        for r in 0..n {
            // `env` carries the environment into the namespace (`Rig::spawn` takes none).
            let mut args: Vec<String> = job.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            args.push(format!("PYTHONWARNINGS={QUIET}"));
            // c10d warns, in a namespace, that it cannot name the client socket's host.
            args.push("TORCH_CPP_LOG_LEVEL=ERROR".into());
            args.extend([python(), script.to_string()]);
            args.extend(job.args.iter().cloned());
            args.extend([
                "--rank".into(),
                r.to_string(),
                "--world".into(),
                n.to_string(),
                "--master".into(),
                format!("{master}:{port}"),
                "--ifname".into(),
                format!("plx{r}r0"),
                "--json".into(),
                json.to_string_lossy().into_owned(),
            ]);
            match rig.spawn(r, "env", &args) {
                Ok(c) => children.push(c),
                Err(e) => {
                    kill_all(&mut children);
                    return Err(format!("cannot start Gloo rank {r} in the rig: {e}"));
                }
            }
        }
        finish(children, job.timeout, &json)
    }

    fn json_path() -> PathBuf {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::env::temp_dir().join(format!("plexus-gloo-{}-{k}.json", std::process::id()))
    }

    /// A port on `addr` nobody listens on now (the master's store binds it a moment later).
    fn free_port(addr: IpAddr) -> Result<u16, String> {
        let l = TcpListener::bind((addr, 0)).map_err(|e| format!("no free port on {addr}: {e}"))?;
        l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
    }

    /// Forwards the children's stdout to our stderr (progress, and the script's own table),
    /// waits for all of them within `timeout` (killing all on a failure or past it) and reads
    /// the JSON rank 0 wrote.
    fn finish(mut children: Vec<Child>, timeout: Duration, json: &PathBuf) -> Result<serde_json::Value, String> {
        let forwarders: Vec<_> = children
            .iter_mut()
            .filter_map(|c| c.stdout.take())
            .map(|out| {
                std::thread::spawn(move || {
                    for line in BufReader::new(out).lines().map_while(Result::ok) {
                        eprintln!("  gloo| {line}");
                    }
                })
            })
            .collect();
        let until = Instant::now() + timeout;
        let mut failed = None;
        let mut done = vec![false; children.len()];
        while failed.is_none() && done.iter().any(|d| !d) {
            for (r, c) in children.iter_mut().enumerate() {
                if done[r] {
                    continue;
                }
                match c.try_wait() {
                    Ok(Some(s)) if s.success() => done[r] = true,
                    Ok(Some(s)) => {
                        done[r] = true;
                        failed.get_or_insert(format!("process {r} exited with {s}"));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        done[r] = true;
                        failed.get_or_insert(format!("process {r}: {e}"));
                    }
                }
            }
            if Instant::now() >= until {
                failed.get_or_insert(format!("not done after {} s", timeout.as_secs()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if failed.is_some() {
            kill_all(&mut children);
        }
        for f in forwarders {
            let _ = f.join();
        }
        let text = std::fs::read_to_string(json);
        let _ = std::fs::remove_file(json);
        if let Some(why) = failed {
            return Err(why);
        }
        let text = text.map_err(|e| format!("no results in {}: {e}", json.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))
    }

    /// Kills each child, and its process group where it leads one (spawn mode's ranks).
    fn kill_all(children: &mut [Child]) {
        for c in children {
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", c.id())]).stderr(Stdio::null()).status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Pieces of the live benchmarks (`placement-live`) that run real worker processes under
/// limits the benchmark sets: CPU quotas in cgroups of the benchmark's own, the command prefix
/// that puts a worker in one, and a TCP forwarder that lets processes in the rail rig's
/// namespaces reach a coordinator on loopback.
pub mod live {
    use std::ffi::OsString;
    use std::io;
    use std::net::{IpAddr, SocketAddr};
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::time::Duration;

    /// The parent of every cgroup the live benchmarks make, in the cpu hierarchy.
    pub const CGROUP_PARENT: &str = "plexus-bench-live";
    /// The cfs period the quotas are a share of, as the worker's own limits use.
    pub const PERIOD_US: u64 = 100_000;

    /// Where a cgroup hierarchy with the cpu controller is mounted: a v1 `cpu` hierarchy, else
    /// the unified (v2) one when its root delegates `cpu` to its children.
    fn cpu_hierarchy() -> Result<(PathBuf, bool), String> {
        let mounts =
            std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
        let mut unified = None;
        for line in mounts.lines() {
            let Some((left, right)) = line.split_once(" - ") else { continue };
            let Some(point) = left.split(' ').nth(4) else { continue };
            let mut r = right.split(' ');
            let (Some(fs), Some(_), Some(opts)) = (r.next(), r.next(), r.next()) else { continue };
            if fs == "cgroup" && opts.split(',').any(|o| o == "cpu") {
                return Ok((PathBuf::from(point), false));
            }
            if fs == "cgroup2" && unified.is_none() {
                unified = Some(PathBuf::from(point));
            }
        }
        let Some(u) = unified else { return Err("no cgroup file system with the cpu controller is mounted".into()) };
        let ctl = std::fs::read_to_string(u.join("cgroup.subtree_control")).unwrap_or_default();
        if ctl.split_whitespace().any(|c| c == "cpu") {
            Ok((u, true))
        } else {
            Err(format!("no cgroup v1 cpu hierarchy, and {} does not delegate cpu ({:?})", u.display(), ctl.trim()))
        }
    }

    /// CPU-quota'd cgroups `<cpu mount>/plexus-bench-live/<run>/<name>`, one per limited
    /// process tree. Dropping it kills whatever is still in them (only pids listed in these
    /// cgroups) and removes them, and the shared parent when it is empty.
    pub struct CpuQuotas {
        top: PathBuf,
        run: PathBuf,
        groups: Vec<PathBuf>,
        v2: bool,
    }

    impl CpuQuotas {
        /// Makes one cgroup per `(name, cores)`, each held to `cores` of a core (1.0: one core).
        pub fn create(run: &str, limits: &[(String, f64)]) -> Result<CpuQuotas, String> {
            let (mount, v2) = cpu_hierarchy()?;
            let top = mount.join(CGROUP_PARENT);
            let run_dir = top.join(run);
            let mut q = CpuQuotas { top, run: run_dir, groups: Vec::new(), v2 };
            std::fs::create_dir_all(&q.run).map_err(|e| format!("cannot create {}: {e}", q.run.display()))?;
            if v2 {
                for d in [&q.top, &q.run] {
                    std::fs::write(d.join("cgroup.subtree_control"), "+cpu")
                        .map_err(|e| format!("cannot enable cpu in {}: {e}", d.display()))?;
                }
            }
            for (name, cores) in limits {
                let dir = q.run.join(name);
                std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                q.groups.push(dir.clone());
                let quota = ((cores * PERIOD_US as f64).round() as u64).max(1_000);
                let files: Vec<(&str, String)> = if v2 {
                    vec![("cpu.max", format!("{quota} {PERIOD_US}"))]
                } else {
                    vec![("cpu.cfs_period_us", PERIOD_US.to_string()), ("cpu.cfs_quota_us", quota.to_string())]
                };
                for (f, v) in files {
                    std::fs::write(dir.join(f), &v)
                        .map_err(|e| format!("cannot write {v} to {}: {e}", dir.join(f).display()))?;
                }
            }
            Ok(q)
        }

        /// The `cgroup.procs` file of group `i`: a process that writes its pid there (before it
        /// executes the program) runs, with everything it starts, under that group's quota.
        pub fn procs_file(&self, i: usize) -> PathBuf {
            self.groups[i].join("cgroup.procs")
        }

        /// How often group `i` was throttled, and for how long (ms), so far.
        pub fn throttled(&self, i: usize) -> Option<(u64, f64)> {
            let text = std::fs::read_to_string(self.groups.get(i)?.join("cpu.stat")).ok()?;
            let field = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok());
            if self.v2 {
                Some((field("nr_throttled ")?, field("throttled_usec ")? as f64 / 1e3))
            } else {
                Some((field("nr_throttled ")?, field("throttled_time ")? as f64 / 1e6))
            }
        }

        fn pids(dir: &Path) -> Vec<u32> {
            let me = std::process::id();
            std::fs::read_to_string(dir.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .filter(|&p: &u32| p > 1 && p != me)
                .collect()
        }
    }

    impl Drop for CpuQuotas {
        fn drop(&mut self) {
            for g in &self.groups {
                for _ in 0..200 {
                    let pids = Self::pids(g);
                    if pids.is_empty() {
                        break;
                    }
                    for p in pids {
                        let _ = Command::new("kill").args(["-KILL", &p.to_string()]).stderr(Stdio::null()).status();
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                remove_dir_retrying(g);
            }
            remove_dir_retrying(&self.run);
            // Only when no other run of a live benchmark uses it (else the kernel refuses).
            let _ = std::fs::remove_dir(&self.top);
        }
    }

    fn remove_dir_retrying(d: &Path) {
        for _ in 0..100 {
            match std::fs::remove_dir(d) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        eprintln!("warning: could not remove the cgroup {}", d.display());
    }

    /// The command prefix that runs a program inside the cgroup whose `cgroup.procs` is `procs`
    /// (the shell writes its pid there, then executes the program in its place), and in network
    /// namespace `netns` when one is given (`ip netns exec`, which keeps the pid). The program
    /// and its arguments follow it (see `plexus_launch::WorkerLaunch::prefix`).
    pub fn confined(procs: &Path, netns: Option<&str>) -> Vec<OsString> {
        let mut c: Vec<OsString> = vec![
            "sh".into(),
            "-c".into(),
            "echo $$ > \"$1\" || exit 97; shift; exec \"$@\"".into(),
            "sh".into(),
            procs.into(),
        ];
        if let Some(ns) = netns {
            c.extend(["ip".into(), "netns".into(), "exec".into(), ns.into()]);
        }
        c
    }

    /// A TCP forwarder: connections to `listen_ip:<port>` are relayed to `target`, on a thread
    /// of its own. Processes in the rail rig's namespaces reach a coordinator that listens on
    /// loopback through it. Stopped (listener and every relay) when dropped.
    pub struct Forward {
        pub addr: SocketAddr,
        rt: Option<tokio::runtime::Runtime>,
    }

    impl Forward {
        pub fn start(listen_ip: IpAddr, target: SocketAddr) -> io::Result<Forward> {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("bench-forward")
                .enable_all()
                .build()?;
            let std_listener = std::net::TcpListener::bind((listen_ip, 0))?;
            std_listener.set_nonblocking(true)?;
            let addr = std_listener.local_addr()?;
            let listener = {
                let _g = rt.enter();
                tokio::net::TcpListener::from_std(std_listener)?
            };
            rt.spawn(async move {
                loop {
                    let Ok((mut inbound, _)) = listener.accept().await else {
                        // Out of descriptors, say: wait rather than spin.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    tokio::spawn(async move {
                        let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else { return };
                        let _ = inbound.set_nodelay(true);
                        let _ = outbound.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    });
                }
            });
            Ok(Forward { addr, rt: Some(rt) })
        }
    }

    impl Drop for Forward {
        fn drop(&mut self) {
            if let Some(rt) = self.rt.take() {
                rt.shutdown_background();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(super::percentile(&v, 50.0), 50);
        assert_eq!(super::percentile(&v, 99.0), 99);
        assert_eq!(super::percentile(&v, 100.0), 100);
        assert_eq!(super::percentile(&[], 50.0), 0);
    }

    #[test]
    fn medians_are_the_middle_of_the_sorted_sample() {
        assert_eq!(super::median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(super::median(&[4.0, 1.0, 3.0, 2.0]), Some(3.0), "the upper of two middles");
        assert_eq!(super::median(&[]), None);
    }

    #[test]
    fn sizes_in_iec_units() {
        assert_eq!(super::size(512), "512 B");
        assert_eq!(super::size(64 << 10), "64.0 KiB");
        assert_eq!(super::size(4 << 20), "4.0 MiB");
    }
}
