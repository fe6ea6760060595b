//! The stores side by side (issue 19): sled and etcd (one member and three), and the failover
//! time at two lease TTLs.

use std::time::{Duration, Instant};

use plexus_bench::percentile;
use plexus_e2e::{Cluster, ClusterConfig};
use plexus_proto::pb;

use crate::SUBTASKS;

pub(crate) type Client = plexus_e2e::ha::Client;

/// Bursts and single jobs through one client: the placements per second of each burst (subtasks
/// ÷ the client's wall time from its submit call until it sees the job succeeded: every subtask
/// placed, persisted, run on a worker and its completion persisted), the submit→placed latencies
/// of the bursts' subtasks (ms, the coordinator's clock: job submitted → subtask placed), and the
/// client's submit → placed-seen of one-subtask jobs (µs).
struct StoreRun {
    /// Per burst size: (size, placements/s of each burst, submit→placed of every subtask, sorted).
    sizes: Vec<(usize, Vec<f64>, Vec<u64>)>,
    single: Vec<u64>,
}

const STORE_BURSTS: usize = 3;
/// Burst sizes: how the rate and latency grow with the depth of one job's queue.
const STORE_SIZES: [usize; 2] = [1_000, SUBTASKS as usize];
const STORE_SINGLES: usize = 100;

pub(crate) async fn burst(c: &mut Client, i: usize, size: usize) -> (f64, Vec<u64>) {
    let src = format!("name = \"store-{i}\"\n[[task]]\nname = \"noop\"\nkind = \"noop\"\nreplicas = {size}\ncpu = 0\n");
    let t0 = Instant::now();
    let job = c
        .submit_job(pb::SubmitJobRequest {
            source: src,
            format: String::new(),
            filename: "noop.toml".into(),
            after_jobs: vec![],
            working_dir: Vec::new(),
            dry_run: false,
        })
        .await
        .expect("submitted")
        .into_inner()
        .job_id;
    loop {
        let s =
            c.get_job(pb::GetJobRequest { job_id: job.clone(), subtasks: false }).await.expect("status").into_inner();
        if s.state != pb::JobState::Running as i32 {
            assert_eq!(s.state, pb::JobState::Succeeded as i32, "benchmark job failed: {}", s.error);
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let wall = t0.elapsed();
    let full = c.get_job(pb::GetJobRequest { job_id: job, subtasks: true }).await.expect("status").into_inner();
    let mut placed: Vec<u64> = full.subtasks.iter().map(|s| s.assigned_at.saturating_sub(full.submitted_at)).collect();
    placed.sort_unstable();
    (full.subtasks.len() as f64 / wall.as_secs_f64(), placed)
}

async fn store_run(c: &mut Client) -> StoreRun {
    let _ = burst(c, 0, SUBTASKS as usize).await;
    let mut r = StoreRun { sizes: Vec::new(), single: Vec::new() };
    for size in STORE_SIZES {
        let (mut rates, mut queue) = (Vec::new(), Vec::new());
        for i in 1..=STORE_BURSTS {
            let (rate, q) = burst(c, i, size).await;
            rates.push(rate);
            queue.extend(q);
        }
        queue.sort_unstable();
        r.sizes.push((size, rates, queue));
    }
    for i in 0..STORE_SINGLES {
        let t0 = Instant::now();
        let src = format!("name = \"one-{i}\"\n[[task]]\nname = \"noop\"\nkind = \"noop\"\ncpu = 0\n");
        let job = c
            .submit_job(pb::SubmitJobRequest {
                source: src,
                format: String::new(),
                filename: "one.toml".into(),
                after_jobs: vec![],
                working_dir: Vec::new(),
                dry_run: false,
            })
            .await
            .expect("submitted")
            .into_inner()
            .job_id;
        loop {
            let s = c
                .get_job(pb::GetJobRequest { job_id: job.clone(), subtasks: true })
                .await
                .expect("status")
                .into_inner();
            if s.subtasks.first().is_some_and(|st| st.assigned_at > 0) {
                break;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        r.single.push(t0.elapsed().as_micros() as u64);
    }
    r.single.sort_unstable();
    r
}

pub(crate) fn median(v: &[f64]) -> f64 {
    plexus_bench::median(v).unwrap_or(0.0)
}

/// The leader killed mid-job, `trials` times: seconds until a standby serves as the leader.
fn failovers(c: &mut plexus_e2e::ha::HaCluster, trials: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for t in 0..trials {
        let src = format!(
            "name = \"busy-{t}\"\n[[task]]\nname = \"s\"\ncommand = [\"sleep\", \"0.05\"]\nreplicas = 400\ncpu = 0\n"
        );
        let job = c.try_submit("busy.toml", &src).expect("submitted");
        std::thread::sleep(Duration::from_millis(500));
        let (leader, _) = c.wait_leader(Duration::from_secs(30));
        c.kill_coordinator(leader);
        let t0 = Instant::now();
        let _ = c.wait_leader(Duration::from_secs(60));
        out.push(t0.elapsed().as_secs_f64());
        c.start_coordinator(leader);
        let end = c.wait_job(&job, Duration::from_secs(300));
        assert_eq!(end.state, pb::JobState::Succeeded as i32, "a job across a failover failed: {}", end.error);
    }
    out
}

/// The learned placer's experiences written per second to sled and to etcd (1 and 3 members).
fn experiences_table() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (sled, _) = plexus_coordinator::store::SledStore::open(dir.path()).expect("a sled store");
    let mut rows = vec![(
        "sled",
        experience_rates(&plexus_coordinator::store::KvPolicyStore::new(sled.spaces().expect("spaces").policy)),
    )];
    for (name, members) in [("etcd, 1 member", 1usize), ("etcd, 3 members", 3)] {
        let Ok(cluster) = plexus_e2e::etcd::EtcdCluster::start(members) else { break };
        let url: plexus_coordinator::etcd::EtcdUrl = format!("{}/bench", cluster.url()).parse().expect("an etcd URL");
        let etcd = plexus_coordinator::etcd::Etcd::connect(&url).expect("connecting to etcd");
        rows.push((name, experience_rates(&plexus_coordinator::store::KvPolicyStore::new(etcd.spaces().policy))));
    }
    println!();
    println!(
        "learned-placer experiences persisted per second (2,000 one at a time, 4,000 in batches of 256; ~120 B each)"
    );
    println!("{:<34} {:>14} {:>14} {:>8}", "store", "one at a time", "batched", "ratio");
    for (name, (one, batched)) in rows {
        println!("{:<34} {:>14.0} {:>14.0} {:>8.1}", name, one, batched, batched / one.max(1e-9));
    }
}

/// Experiences the learned placer persists per second through `store`'s policy space: one
/// write each (as before batching) and batches of up to 256 (as the training thread writes now).
fn experience_rates(store: &dyn plexus_policy::PolicyStore) -> (f64, f64) {
    const N: u64 = 2_000;
    let bytes = vec![0x5au8; 120]; // about one encoded experience
    let t0 = Instant::now();
    for id in 0..N {
        store.put_experience(id, &bytes).expect("an experience written");
    }
    let one = N as f64 / t0.elapsed().as_secs_f64();
    let items: Vec<(u64, Vec<u8>)> = (N..3 * N).map(|id| (id, bytes.clone())).collect();
    let t0 = Instant::now();
    for batch in items.chunks(256) {
        store.put_experiences(batch).expect("experiences written");
    }
    let batched = items.len() as f64 / t0.elapsed().as_secs_f64();
    let ids: Vec<u64> = (0..3 * N).collect();
    store.remove_experiences(&ids).expect("experiences removed");
    (one, batched)
}

pub(crate) fn stores() {
    let (rows, failover) = measure_stores();
    print_stores(&rows);
    experiences_table();
    println!();
    print_failover(&failover);
}

/// Each store's name and what was measured on it.
type StoreRows = Vec<(String, StoreRun)>;
/// Per lease TTL (seconds), the failover times measured (seconds).
type Failovers = Vec<(u64, Vec<f64>)>;

/// Measured rows per store (sled, etcd with 1 and 3 members), and per lease TTL the failover
/// times; the etcd rows stop at the first cluster that cannot start, saying why.
fn measure_stores() -> (StoreRows, Failovers) {
    use plexus_e2e::ha::{HaCluster, HaConfig};
    eprintln!("stores: sled, then etcd with 1 and 3 members (3 coordinators each)");
    let sled = {
        let c = Cluster::start(ClusterConfig {
            workers: 4,
            log: "warn".into(),
            coordinator_args: vec!["--http".into(), "none".into()],
            ..Default::default()
        });
        let mut client = c.client_with(c.admin_token.as_deref());
        c.block_on(store_run(&mut client))
    };
    let mut rows = vec![("sled (1 coordinator)".to_string(), sled)];
    let mut failover = Vec::new();
    for members in [1usize, 3] {
        let config = HaConfig {
            etcd_members: members,
            coordinators: 3,
            workers: 4,
            lease_ttl_s: 2,
            log: "warn".into(),
            ..Default::default()
        };
        let mut c = match HaCluster::start(config) {
            Ok(c) => c,
            Err(why) => {
                println!("stores: etcd rows skipped: {why}");
                break;
            }
        };
        let mut client = c.leader_client();
        let r = c.block_on(store_run(&mut client));
        rows.push((format!("etcd, {members} member{} (3 coordinators)", if members == 1 { "" } else { "s" }), r));
        if members == 3 {
            for ttl in [2u64, 5] {
                drop(c);
                let config = HaConfig {
                    etcd_members: 3,
                    coordinators: 3,
                    workers: 4,
                    lease_ttl_s: ttl,
                    log: "warn".into(),
                    ..Default::default()
                };
                c = HaCluster::start(config).expect("etcd started a moment ago");
                failover.push((ttl, failovers(&mut c, 3)));
            }
        }
    }
    (rows, failover)
}

/// The stores' table: rates and latencies per store and burst size, and each etcd row ÷ sled.
fn print_stores(rows: &[(String, StoreRun)]) {
    println!(
        "stores: bursts of 1,000 and {SUBTASKS} no-op subtasks ({STORE_BURSTS} of each, after a warm-up), then {STORE_SINGLES} one-subtask jobs; 4 workers; loopback; TLS and tokens"
    );
    println!(
        "{:<34} {:>7} {:>14} {:>14} {:>12} {:>12} {:>16} {:>16}",
        "store", "burst", "placements/s", "(min..max)", "placed_p50", "placed_p99", "submit->placed", "p99"
    );
    for (name, r) in rows {
        for (size, rates, queue) in &r.sizes {
            let lo = rates.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = rates.iter().copied().fold(0.0, f64::max);
            println!(
                "{:<34} {:>7} {:>14.0} {:>14} {:>10}ms {:>10}ms {:>14.2}ms {:>14.2}ms",
                name,
                size,
                median(rates),
                format!("{lo:.0}..{hi:.0}"),
                percentile(queue, 50.0),
                percentile(queue, 99.0),
                percentile(&r.single, 50.0) as f64 / 1000.0,
                percentile(&r.single, 99.0) as f64 / 1000.0
            );
        }
    }
    if let Some((_, sled)) = rows.first() {
        for (name, r) in rows.iter().skip(1) {
            for ((size, rates, _), (_, sled_rates, _)) in r.sizes.iter().zip(&sled.sizes) {
                println!(
                    "{:<42} {:>14.2}",
                    format!("ratio {} / sled, {size}", name.split(" (").next().unwrap_or(name)),
                    median(rates) / median(sled_rates).max(1e-9)
                );
            }
        }
    }
    println!("{:<34} {:>14}", "target on etcd", 5_000);
    println!(
        "(placements/s: subtasks ÷ the client's wall time from submit until it sees the job succeeded (placed, persisted, run, completion persisted); placed = job submitted → subtask placed+persisted within a burst, by the coordinator's clock; submit->placed = a client's submit call until it sees its one subtask placed, polling every 0.2 ms)"
    );
}

/// Failover times per lease TTL, against the target (TTL + 2 s).
fn print_failover(failover: &[(u64, Vec<f64>)]) {
    if !failover.is_empty() {
        println!(
            "failover: the leader killed with kill -9 while a 400-subtask job runs; seconds until a standby serves as the leader (polled every 0.1 s), 3 etcd members, 3 coordinators"
        );
        println!("{:<12} {:>10} {:>10} {:>10} {:>16}", "lease TTL", "min", "median", "max", "target (TTL+2s)");
        for (ttl, v) in failover {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            println!("{:<12} {:>10.2} {:>10.2} {:>10.2} {:>16}", format!("{ttl} s"), lo, median(v), hi, ttl + 2);
        }
        println!();
    }
}
