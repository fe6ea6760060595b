//! One worker process of the allreduce benchmark: bind, learn the group, run every size,
//! check every byte of the first result, report from rank 0.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_dataplane::collective::Profile;
use plexus_dataplane::{
    Algorithm, CollectiveConfig, Communicator, DType, Endpoint, EndpointConfig, LinkMeter, ReduceOp,
};

use super::{Cli, MIB, WARMUP};

/// Rank `rank` of a world: the allreduces of `cli.bytes`, one after the other, on one
/// communicator (with a link meter, as a worker's data plane keeps one, so `auto` learns).
pub async fn run(rank: usize, cli: Cli) -> Result<(), String> {
    let seg_max = cli.seg_max.map_or(EndpointConfig::default().seg_max, |m| (m * MIB as f64) as u64);
    let (ep, ranks) = plexus_bench::world::join(
        &cli.world.rails,
        seg_max,
        cli.sndbuf.map(|k| k << 10),
        cli.world.rail_key.as_deref(),
    )
    .await?;
    let n = ranks.len();
    let mut cfg = CollectiveConfig { algorithm: cli.algorithm, ..CollectiveConfig::default() };
    if let Some(s) = cli.slices {
        cfg.slices = s;
    }
    if let Some(w) = cli.window {
        cfg.send_window = w;
    }
    let comm = Communicator::new(ep.clone(), ranks.clone(), rank, 0, cfg)
        .map_err(|e| e.to_string())?
        .with_meter(Arc::new(LinkMeter::new()));
    // Barriers and the slowest-rank round on a communicator of their own, so they neither
    // feed the meter nor take the measured one's profile.
    let control = Communicator::new(
        ep.clone(),
        ranks,
        rank,
        1 << 56,
        CollectiveConfig { algorithm: Algorithm::Halving, slices: 1, ..CollectiveConfig::default() },
    )
    .map_err(|e| e.to_string())?;
    for &bytes in &cli.bytes {
        let len = (bytes / 4) as usize;
        // Like Gloo's in-place tensor, one buffer is reduced again and again: each result
        // (unique, so the collective assembles it in the input's own memory) is the next input.
        let mut data = input(len, rank);
        let mut times = Vec::new();
        let mut profile = Profile::default();
        let mut ran = (cfg.algorithm, cfg.slices);
        let mut chosen = Vec::new();
        let sent_before = sent_per_rail_now(&ep);
        let mut cpu_before = None;
        for it in 0..WARMUP + cli.iters_for(bytes) {
            if it == WARMUP {
                cpu_before = plexus_bench::cpu_ticks();
            }
            let mut b = [0i32];
            control.allreduce_typed(&mut b, ReduceOp::Sum).await.map_err(|e| e.to_string())?;
            let t = Instant::now();
            let out = comm.allreduce_bytes(data, DType::F32, ReduceOp::Sum).await.map_err(|e| e.to_string())?;
            let dt = t.elapsed().as_secs_f64();
            if it == 0 {
                check(&out, len, n)?;
            }
            if let Some(c) = comm.last_choice() {
                chosen.push(format!("{}×{}", c.algorithm.name(), c.slices));
                if rank == 0 && std::env::var_os("PLEXUS_BENCH_REASONS").is_some() {
                    eprintln!("call {it}: {}", c.reason);
                }
            }
            if it >= WARMUP {
                times.push(dt);
                profile = comm.last_profile();
                if let Some(c) = comm.last_choice() {
                    ran = (c.algorithm, c.slices);
                }
            }
            data = out;
        }
        let busy = plexus_bench::busy_share(cpu_before, plexus_bench::cpu_ticks()).unwrap_or(f64::NAN);
        // The slowest rank per iteration, as the Gloo script reports.
        control.allreduce_typed(&mut times, ReduceOp::Max).await.map_err(|e| e.to_string())?;
        let median = plexus_bench::median(&times).expect("at least one timed iteration");
        if rank == 0 {
            // What `auto` ran call by call (warm-up first): its measured corrections at work.
            eprintln!("{n} ranks, {bytes} bytes, calls ran: {}", chosen.join(" "));
            eprintln!("{n} ranks, {bytes} bytes, rank 0 sent per rail: {}", sent_per_rail(&ep, &sent_before));
            let s = |d: Duration| d.as_secs_f64();
            println!(
                "RESULT {bytes} {median} {} {} {} {} {} {} {} {} {} {busy}",
                ran.0.name(),
                ran.1,
                s(profile.total),
                s(profile.wait),
                s(profile.reduce),
                profile.reduced_bytes,
                s(profile.copy),
                profile.copied_bytes,
                s(profile.drain),
            );
        }
    }
    if rank == 0 {
        let rates: Vec<String> =
            ep.rail_rates().iter().map(|r| r.map_or("-".into(), |r| format!("{:.3}", r / 1e9))).collect();
        eprintln!("rank 0's rails as the transport measured them, GB/s: {}", rates.join(", "));
    }
    // Let the last acknowledgements go out before the process exits.
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(())
}

/// Each rail's bytes and segments sent so far.
fn sent_per_rail_now(ep: &Endpoint) -> Vec<(u64, u64)> {
    ep.stats().rails.iter().map(|r| (r.bytes_sent, r.segments_sent)).collect()
}

/// Where rank 0's bytes went since `before` (every call of a size, warm-up included), per rail.
fn sent_per_rail(ep: &Endpoint, before: &[(u64, u64)]) -> String {
    let per: Vec<String> = sent_per_rail_now(ep)
        .iter()
        .zip(before)
        .map(|((b1, s1), (b0, s0))| format!("{:.1} KiB in {} segments", (b1 - b0) as f64 / 1024.0, s1 - s0))
        .collect();
    per.join("; ")
}

/// Element i of rank r's input: a small integer (0..16) from a seeded hash, so every sum of up
/// to 2^20 ranks is exact in f32 and the expected result costs a few operations per element.
fn value(i: usize, rank: usize) -> f32 {
    const SEED: u64 = 3;
    let x =
        (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (rank as u64 + 1).wrapping_mul(0xc2b2_ae3d_27d4_eb4f) ^ SEED;
    let x = (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    ((x >> 40) & 15) as f32
}

fn input(len: usize, rank: usize) -> Bytes {
    let mut v = Vec::with_capacity(len * 4);
    for i in 0..len {
        v.extend_from_slice(&value(i, rank).to_le_bytes());
    }
    Bytes::from(v)
}

/// Every element of `out` against the exact sum of every rank's input.
fn check(out: &[u8], len: usize, n: usize) -> Result<(), String> {
    if out.len() != len * 4 {
        return Err(format!("the result has {} bytes, expected {}", out.len(), len * 4));
    }
    for (i, c) in out.chunks_exact(4).enumerate() {
        let want: f32 = (0..n).map(|r| value(i, r)).sum();
        let got = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        if got.to_bits() != want.to_bits() {
            return Err(format!("element {i}: {got}, expected {want}"));
        }
    }
    Ok(())
}
