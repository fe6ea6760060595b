//! Shared helpers of the benchmark binaries.

/// The p-th percentile (0..=100) of a sample, by nearest rank; 0 for an empty sample.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// A comma-separated list of `T` from a flag's value; a bad item ends `prog` with a message
/// naming it.
pub fn parse_list<T: std::str::FromStr>(prog: &str, s: &str, flag: &str) -> Vec<T> {
    s.split(',')
        .map(|x| {
            x.trim().parse().unwrap_or_else(|_| {
                eprintln!("{prog}: bad value {x:?} for {flag}");
                std::process::exit(2)
            })
        })
        .collect()
}

/// Worlds of worker processes: copies of the running benchmark binary started as `--worker R`,
/// one per rank (on the rail rig, rank r in host r's namespace with its first rails), which
/// each print `ADDRS <their rail addresses>` and then read every rank's on stdin.
pub mod world {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Child, ChildStdout, Command, Stdio};

    use plexus_dataplane::RailKey;
    use plexus_dataplane::rig::Rig;

    /// A fresh rail key for one world, hex, or none for `open`.
    pub fn key(auth: &str) -> Option<String> {
        (auth == "key").then(|| RailKey::random().as_bytes().iter().map(|b| format!("{b:02x}")).collect())
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
                Some(hex) => {
                    let bytes: Vec<u8> = (0..hex.len() / 2)
                        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("zz"), 16).map_err(|e| format!("--rail-key: {e}")))
                        .collect::<Result<_, _>>()?;
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
    pub fn spawn(n: usize, args: &[String], key: Option<&str>, rig: Option<(&Rig, usize)>) -> (Vec<Child>, Vec<BufReader<ChildStdout>>) {
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
        let mut readers: Vec<_> = children.iter_mut().map(|c| BufReader::new(c.stdout.take().expect("piped"))).collect();
        let mut addrs = Vec::new();
        for rd in &mut readers {
            let mut line = String::new();
            rd.read_line(&mut line).expect("worker stdout");
            let a = line.trim().strip_prefix("ADDRS ").unwrap_or_else(|| panic!("worker said {line:?} instead of its addresses"));
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
    pub const SCRIPT: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/anchors/gloo_collective.py"
    );

    /// Python's warnings are off: torch warns at import that the venv has no NumPy (the
    /// script needs none), once per rank.
    const QUIET: &str = "ignore";

    /// The python of the torch venv `scripts/setup-torch.sh` makes (`PLEXUS_TORCH_VENV`, else
    /// `~/.cache/plexus/torch-2.13.0`), or `python3` where there is no home.
    pub fn python() -> String {
        if let Ok(v) = std::env::var("PLEXUS_TORCH_VENV") {
            return format!("{v}/bin/python");
        }
        std::env::var("HOME").map_or_else(
            |_| "python3".to_string(),
            |h| format!("{h}/.cache/plexus/torch-2.13.0/bin/python"),
        )
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
        let child = c
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", python()))?;
        finish(vec![child], job.timeout, &json)
    }

    /// The script in rank mode on the rig: rank r in host r's namespace, Gloo on rail 0
    /// (interface `plx<r>r0`), rank 0 (host 0, the root namespace) the master; what rank 0
    /// wrote to `--json`.
    pub fn on_rig(rig: &Rig, job: &Job<'_>) -> Result<serde_json::Value, String> {
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
            args.extend([python(), SCRIPT.to_string()]);
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
    fn finish(
        mut children: Vec<Child>,
        timeout: Duration,
        json: &PathBuf,
    ) -> Result<serde_json::Value, String> {
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
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", c.id())])
                .stderr(Stdio::null())
                .status();
            let _ = c.kill();
            let _ = c.wait();
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
}
