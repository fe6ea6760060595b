//! One worker process: every (size, table, schedule) exchanged, timed and checked.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_dataplane::{
    CollectiveConfig, ComTable, Communicator, Endpoint, ExchangeAlgorithm, Exchanger, LinkMeter, PeerId, ReduceOp,
    ScheduleKind,
};

use crate::args::{Opts, Sched};
use crate::table::{Case, fill, verify};
use crate::{MIB, WARMUP};

/// One worker process: bind, learn the group, run every (size, table, schedule), report from
/// rank 0.
pub(crate) async fn worker(rank: usize, opts: Opts) -> Result<(), String> {
    let (ep, ranks) =
        plexus_bench::world::join(&opts.rails, opts.seg_max, opts.sndbuf, opts.rail_key.as_deref()).await?;
    let n = ranks.len();
    // The exchanges use tags from 0, the barriers and the time reductions the next span, the
    // `direct` exchanges the one after (a tag per call).
    // One meter for the process, as a worker keeps one: every stepped exchange's messages feed
    // the cost model that `auto` decides from.
    let meter = Arc::new(LinkMeter::new());
    let x = Exchanger::new(ep.clone(), ranks.clone(), rank, 0).map_err(|e| e.to_string())?.with_meter(meter.clone());
    // `auto` and `x-direct`, in their own tag span.
    let xa =
        Exchanger::new(ep.clone(), ranks.clone(), rank, 4 << 56).map_err(|e| e.to_string())?.with_meter(meter.clone());
    // `auto` striped by the rail scheduler alone, in its own tag span.
    let xs = Exchanger::new(ep.clone(), ranks.clone(), rank, 5 << 56)
        .map_err(|e| e.to_string())?
        .with_meter(meter)
        .with_rail_shares(false);
    // The same group with the seed's acknowledged steps, in its own tag span.
    let xo =
        Exchanger::new(ep.clone(), ranks.clone(), rank, 3 << 56).map_err(|e| e.to_string())?.with_acked_steps(true);
    let comm = Communicator::new(ep.clone(), ranks.clone(), rank, 1 << 56, CollectiveConfig::default())
        .map_err(|e| e.to_string())?;
    let mut direct_tag = 2u64 << 56;
    let mut wrong = 0i32;
    for &mib in &opts.sizes {
        for &t in &opts.tables {
            let c = Case::new(t, n, (mib * MIB) as u64, &opts);
            let sends: Vec<Bytes> = (0..n).map(|j| fill(rank, j, c.table.get(rank, j) as usize)).collect();
            let mut times = vec![Vec::new(); c.schedules.len()];
            // What `auto` ran in its last iteration, per schedule row.
            let mut ran = vec![String::new(); c.schedules.len()];
            for it in 0..WARMUP + opts.iters {
                for (k, (s, schedule)) in c.schedules.iter().enumerate() {
                    barrier(&comm, wrong).await?;
                    let t0 = Instant::now();
                    let got = match s {
                        Sched::Kind(kind) => x.alltoallv(&c.table, sends.clone(), *kind).await,
                        Sched::CssAcked => xo.alltoallv(&c.table, sends.clone(), ScheduleKind::Css).await,
                        Sched::Alg1 | Sched::Alg2 => x.alltoallv_with(&c.table, schedule, sends.clone()).await,
                        Sched::Direct => {
                            direct_tag += 1;
                            direct(&ep, &ranks, rank, &c.table, &sends, direct_tag).await
                        }
                        Sched::XDirect | Sched::Auto | Sched::AutoRailScheduler => {
                            let how = (*s == Sched::XDirect).then_some(ExchangeAlgorithm::Direct);
                            let xc = if *s == Sched::AutoRailScheduler { &xs } else { &xa };
                            let r = xc.alltoallv_chosen(&c.table, sends.clone(), how).await;
                            r.map(|(got, chosen)| {
                                if rank == 0 && *s == Sched::Auto && it + 1 == WARMUP + opts.iters {
                                    eprintln!("CHOICE N={n} {mib} MiB {}: {}", t.name(), chosen.reason);
                                }
                                ran[k] = chosen.algorithm.to_string();
                                got
                            })
                        }
                    }
                    .map_err(|e| format!("{mib} MiB {} {}: {e}", t.name(), s.name()))?;
                    let dt = t0.elapsed().as_secs_f64();
                    if it >= WARMUP {
                        times[k].push(dt);
                    }
                    // Every rank checks what it got only once every rank's exchange is over: a
                    // rank that finished first and checked meanwhile would take CPU from the
                    // ranks still exchanging (on this machine's two cores, most of it), and the
                    // slowest rank's time would measure the check (Gloo's script checks once,
                    // after its timed loop).
                    barrier(&comm, 0).await?;
                    if let Err(e) = verify(rank, &c.table, &got) {
                        eprintln!("alltoall worker {rank}: {mib} MiB {} {} iteration {it}: {e}", t.name(), s.name());
                        wrong += 1;
                    }
                }
            }
            barrier(&comm, wrong).await?;
            for (k, (s, _)) in c.schedules.iter().enumerate() {
                // The slowest rank per iteration, as the Gloo script reports.
                let mut ts = std::mem::take(&mut times[k]);
                comm.allreduce_typed(&mut ts, ReduceOp::Max).await.map_err(|e| e.to_string())?;
                if rank == 0 {
                    let median = plexus_bench::median(&ts).expect("--iters is at least 1");
                    let ran = if ran[k].is_empty() { "-" } else { &ran[k] };
                    println!("RESULT {mib} {} {} {median} {ran}", t.name(), s.name());
                }
            }
        }
    }
    // Let the last acknowledgements go out before the process exits.
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(())
}

/// The `direct` exchange: every send started at once, then every receive taken (the
/// endpoint's connection readers take in every message meanwhile, each into its own buffer);
/// done when all are received and every send acknowledged.
pub(crate) async fn direct(
    ep: &Arc<Endpoint>,
    ranks: &[Vec<SocketAddr>],
    me: usize,
    table: &ComTable,
    sends: &[Bytes],
    tag: u64,
) -> plexus_dataplane::Result<Vec<Bytes>> {
    let n = ranks.len();
    let mut sending = tokio::task::JoinSet::new();
    for j in (0..n).filter(|&j| j != me && table.get(me, j) > 0) {
        let (ep, addrs, data) = (ep.clone(), ranks[j].clone(), sends[j].clone());
        sending.spawn(async move { ep.send(&addrs, tag, data).await });
    }
    let mut got = Vec::with_capacity(n);
    for (j, addrs) in ranks.iter().enumerate() {
        got.push(if j == me {
            sends[me].clone()
        } else if table.get(j, me) > 0 {
            ep.recv(PeerId(addrs[0]), tag).await?.freeze()
        } else {
            Bytes::new()
        });
    }
    while let Some(r) = sending.join_next().await {
        r.map_err(|e| plexus_dataplane::Error::Peer(format!("send task: {e}")))??;
    }
    Ok(got)
}

/// Waits for every rank; fails on every rank if any has found wrong bytes so far.
async fn barrier(comm: &Communicator, wrong: i32) -> Result<(), String> {
    let mut b = [wrong];
    comm.allreduce_typed(&mut b, ReduceOp::Sum).await.map_err(|e| e.to_string())?;
    if b[0] > 0 {
        return Err(format!("{} received parts were wrong (see the ranks' messages)", b[0]));
    }
    Ok(())
}
