//! `plexus-local-gang`: runs one command as every member of an N-member `communicator = true` gang on this host,
//! without a coordinator: N collective endpoints on loopback (the worker's own, with its data
//! plane), each member's process started with the environment a gang member gets in a Plexus
//! task (`PLEXUS_COLLECTIVE_SOCKET`, `PLEXUS_COLLECTIVE_SECRET`, `PLEXUS_RANK`,
//! `PLEXUS_REPLICAS`, `PLEXUS_TASK`). Like `torchrun --standalone`: for trying a training script
//! against the `plexus` backend, and for the GPU check (`scripts/gpu-check.sh`), which runs on a
//! machine with a GPU but without libtorch 2.13 (this binary does not link it). The sockets live
//! in a fresh directory (mode 0700) under the temporary directory, removed at the end.
//!
//! When a member ends its endpoint tells the others (failed: their pending ops fail at once), as
//! a worker does. Exits 0 when every member exited 0, else 1 naming the members that failed.
//!
//!   plexus-local-gang --members 4 -- python3 train.py

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use plexus_dataplane::{Endpoint, EndpointConfig};
use plexus_worker::gang_endpoint::{GangEndpoint, Spec};

#[derive(Parser)]
struct Args {
    /// Members of the gang (processes started).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    members: u16,
    /// Rails of each member's data plane: addresses of this host (loopback by default).
    #[arg(long, default_value = "127.0.0.1", value_delimiter = ',')]
    rails: Vec<std::net::IpAddr>,
    /// The command each member runs, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let a = Args::parse();
    match run(a).await {
        Ok(failed) if failed.is_empty() => ExitCode::SUCCESS,
        Ok(failed) => {
            eprintln!("local_gang: members that failed: {}", failed.join("; "));
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("local_gang: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Starts the endpoints and the members; the failures, `rank: why`.
async fn run(a: Args) -> Result<Vec<String>, String> {
    let n = usize::from(a.members);
    let dir = Dir::create()?;
    let mut rails = Vec::new();
    for _ in 0..n {
        let cfg = EndpointConfig { rails: a.rails.clone(), ..Default::default() };
        rails.push(Arc::new(Endpoint::bind(cfg).await.map_err(|e| format!("bind the data plane: {e}"))?));
    }
    let members: Vec<_> = rails.iter().map(|r| r.local_addrs()).collect();
    // Tags of this run's gang: distinct from another run's on the same host.
    let tag = u64::from(std::process::id()) << 32;
    let mut running = Vec::new();
    for (rank, r) in rails.into_iter().enumerate() {
        let socket = dir.0.join(format!("member-{rank}.sock"));
        let secret = uuid::Uuid::new_v4().simple().to_string();
        let meter = std::sync::Arc::default();
        let spec =
            Spec { rails: r, members: members.clone(), rank, tag, socket: socket.clone(), uid: None, secret, meter };
        let secret = spec.secret.clone();
        let endpoint = GangEndpoint::open(spec).map_err(|e| format!("member {rank}'s endpoint: {e}"))?;
        let mut child = tokio::process::Command::new(&a.command[0])
            .args(&a.command[1..])
            .env("PLEXUS_COLLECTIVE_SOCKET", &socket)
            .env("PLEXUS_COLLECTIVE_SECRET", &secret)
            .env("PLEXUS_RANK", rank.to_string())
            .env("PLEXUS_REPLICAS", n.to_string())
            .env("PLEXUS_TASK", "local")
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("start {:?}: {e}", a.command[0]))?;
        running.push(tokio::spawn(async move {
            let failure = match child.wait().await {
                Ok(status) if status.success() => None,
                Ok(status) => Some(format!("exited with {status}")),
                Err(e) => Some(format!("could not be waited for: {e}")),
            };
            endpoint.close(failure.clone()).await;
            failure.map(|why| format!("{rank}: {why}"))
        }));
    }
    let mut failed = Vec::new();
    for r in running {
        if let Some(f) = r.await.map_err(|e| format!("a member's waiter: {e}"))? {
            failed.push(f);
        }
    }
    Ok(failed)
}

/// The sockets' directory, removed when dropped.
struct Dir(std::path::PathBuf);

impl Dir {
    fn create() -> Result<Dir, String> {
        use std::os::unix::fs::DirBuilderExt;
        let path = std::env::temp_dir().join(format!("plexus-local-gang-{}", std::process::id()));
        std::fs::DirBuilder::new().mode(0o700).create(&path).map_err(|e| format!("create {}: {e}", path.display()))?;
        Ok(Dir(path))
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
