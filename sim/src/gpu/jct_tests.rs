//! Tests of the JCT simulation: determinism, a case computed by hand, and every placement
//! feasible for every search, checked from the outcomes alone.

use plexus_scheduler::gpu::objective::Weights;
use plexus_scheduler::gpu::search::SflaParams;

use super::jct::{GangJob, JctConfig, JctReport, JctWorkload, MSC_UNIT_BYTES_PER_S, Placer, Search, simulate, sync_ms};
use super::*;
use crate::SimError;

fn exact() -> GroundTruth {
    GroundTruth { sigma: 0.0, ..GroundTruth::new(1) }
}

fn placer<'a>(name: &str, search: Search, model: &'a GroundTruth) -> Placer<'a> {
    Placer { name: name.into(), search, model, weights: Weights::default() }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn the_same_seed_gives_the_same_workload_and_report() {
    let config = JctConfig { jobs: 30, ..JctConfig::new(32, 0.9) };
    let w = JctWorkload::generate(&config, 3).unwrap();
    assert_eq!(w, JctWorkload::generate(&config, 3).unwrap());
    let other = JctWorkload::generate(&config, 4).unwrap();
    assert_ne!(w.jobs, other.jobs);
    assert_eq!(w.jobs.len(), 30);
    assert!(w.jobs.windows(2).all(|p| p[0].arrival_ms <= p[1].arrival_ms));
    assert!(w.jobs.iter().any(|j| j.share) && w.jobs.iter().any(|j| !j.share));
    let truth = GroundTruth::new(2);
    let sfla = placer("sfla", Search::Sfla(SflaParams::default()), &truth);
    let first = simulate(&w, &truth, &sfla).unwrap();
    assert_eq!(first, simulate(&w, &truth, &sfla).unwrap());
    assert_ne!(first, simulate(&other, &truth, &sfla).unwrap());
    assert_eq!(first.jobs.len() + first.unplaceable.len(), 30);
}

#[test]
fn a_tiny_case_matches_the_hand_computed_times() {
    // One DGX-1 node, no residents; only GPUs 0 and 1 (one NVLink, msc 2) may be used.
    let mut cluster = GpuCluster::generate(&GpuClusterConfig { busy: 0.0, ..GpuClusterConfig::new(8) }, 0);
    for g in &mut cluster.gpus[2..] {
        g.exclusive = true;
    }
    assert_eq!(cluster.msc(0, 1), 2.0);
    let resnet = Kind::ResNet50.profile();
    // One iteration of a ResNet-50 pair on GPUs 0 and 1, alone: 85 ms of compute, and each
    // member sends 2B/2 = B bytes (26 M parameters × 4 = 104 MiB) over msc 2.
    let sync = 2.0 * resnet.model_bytes as f64 / MSC_UNIT_BYTES_PER_S * 1e3;
    assert!(close(sync, 4.36207616) && close(sync_ms(&cluster, Kind::ResNet50, &[0, 1]), sync));
    assert_eq!(sync_ms(&cluster, Kind::ResNet50, &[0, 0]), 0.0, "members on one GPU exchange for free");
    let alone = 85.0 + sync;
    // Two ResNet-50s on one GPU: 2.156875 each (truth.rs's test).
    let shared = 85.0 * 2.156875 + sync;
    let job = |id, arrival_ms, members, share, iterations| GangJob {
        id,
        arrival_ms,
        kind: Kind::ResNet50,
        members,
        share,
        iterations,
    };
    let w = JctWorkload {
        cluster,
        jobs: vec![
            // A: alone on GPUs 0 and 1 (greedy does not pair its own members).
            job(0, 0.0, 2, true, 100),
            // B: arrives when A is half done; shares GPUs 0 and 1 with it, one member each.
            job(1, 50.0 * alone, 2, true, 100),
            // C: exclusive; waits until A and B are gone.
            job(2, 5_000.0, 2, false, 10),
            // D: needs three idle GPUs, which the cluster never has: never queued, blocks nothing.
            job(3, 6_000.0, 3, false, 10),
        ],
        seed: 1,
    };
    let truth = exact();
    let r = simulate(&w, &truth, &placer("greedy", Search::Greedy, &truth)).unwrap();
    assert_eq!(r.unplaceable, vec![3]);
    assert_eq!(r.jobs.iter().map(|o| o.id).collect::<Vec<_>>(), vec![0, 1, 2], "in the order they end");
    let (a, b, c) = (&r.jobs[0], &r.jobs[1], &r.jobs[2]);
    for o in [a, b, c] {
        let mut gpus = o.gpus.clone();
        gpus.sort_unstable();
        assert_eq!(gpus, vec![0, 1], "job {}", o.id);
    }
    // A: 50 iterations alone, then 50 beside B.
    assert!(close(a.start_ms, 0.0) && close(a.end_ms, 50.0 * alone + 50.0 * shared), "{a:?}");
    // B: 50 beside A, then 50 alone.
    assert!(close(b.start_ms, b.arrival_ms) && close(b.end_ms, a.end_ms + 50.0 * alone), "{b:?}");
    assert!(close(b.jct_ms(), a.jct_ms()), "symmetric");
    // C: starts when B ends, runs 10 iterations alone.
    assert!(close(c.start_ms, b.end_ms) && close(c.end_ms, b.end_ms + 10.0 * alone), "{c:?}");
    assert!(close(r.mean_jct_ms(), (a.jct_ms() + b.jct_ms() + c.jct_ms()) / 3.0));
    assert!(close(r.makespan_ms(), c.end_ms));
    assert!(close(r.mean_wait_ms(), (c.start_ms - 5_000.0) / 3.0));
    assert!(close(r.p95_jct_ms(), a.jct_ms().max(c.jct_ms())));
}

/// Rebuilds what ran on every GPU at each start from the outcomes alone and checks it was
/// allowed: no GPU over its memory, no member on a GPU held by a resident, at most
/// `members_per_gpu` of a sharing gang's members on one GPU, an exclusive gang's GPUs holding
/// nothing else; and the queue is FIFO.
fn check_feasible(w: &JctWorkload, r: &JctReport) {
    let config = &w.cluster.config;
    assert_eq!(r.jobs.len() + r.unplaceable.len(), w.jobs.len(), "{}: every job ends or is unplaceable", r.placer);
    for o in &r.jobs {
        let job = &w.jobs[o.id];
        assert_eq!(o.gpus.len(), job.members);
        assert!(o.start_ms >= o.arrival_ms && o.end_ms > o.start_ms);
        // Slowdowns are ≥ 1 up to the truth's small per-combination effect.
        assert!(o.end_ms - o.start_ms >= 0.9 * o.solo_ms, "{}: job {} ran faster than alone", r.placer, o.id);
        let t = o.start_ms;
        let live: Vec<_> = r.jobs.iter().filter(|p| p.start_ms <= t && p.end_ms > t).collect();
        for (g, gpu) in w.cluster.gpus.iter().enumerate() {
            let members: Vec<usize> =
                live.iter().flat_map(|p| p.gpus.iter().filter(move |&&h| h == g).map(move |_| p.id)).collect();
            if members.is_empty() {
                continue;
            }
            assert!(!gpu.exclusive, "{}: GPU {g} is held by its resident", r.placer);
            let memory: u64 = gpu.resident.iter().map(|v| v.gpu_memory).sum::<u64>()
                + members.iter().map(|&j| w.jobs[j].kind.profile().gpu_memory).sum::<u64>();
            assert!(memory <= gpu.device_memory, "{}: GPU {g} at {t} ms holds {memory} bytes", r.placer);
            for &j in &members {
                let count = members.iter().filter(|&&k| k == j).count();
                if w.jobs[j].share {
                    assert!(count <= config.members_per_gpu, "{}: job {j} has {count} members on GPU {g}", r.placer);
                } else {
                    assert!(
                        count == 1 && members.len() == 1 && gpu.resident.is_empty(),
                        "{}: exclusive job {j} shares GPU {g}",
                        r.placer
                    );
                }
            }
        }
    }
    let mut placed: Vec<_> = r.jobs.iter().collect();
    placed.sort_by_key(|o| o.id);
    assert!(placed.windows(2).all(|p| p[0].start_ms <= p[1].start_ms), "{}: FIFO", r.placer);
}

#[test]
fn every_placement_is_feasible_for_every_search() {
    let truth = GroundTruth::new(5);
    for (gpus, seed) in [(32, 1), (16, 2)] {
        // A heavy load, so the queue backs up and GPUs are shared by several gangs.
        let config = JctConfig { jobs: 24, ..JctConfig::new(gpus, 1.5) };
        let w = JctWorkload::generate(&config, seed).unwrap();
        for (name, search) in [
            ("sfla", Search::Sfla(SflaParams::default())),
            ("greedy", Search::Greedy),
            ("topology-greedy", Search::TopologyGreedy),
            ("random", Search::Random),
        ] {
            let r = simulate(&w, &truth, &placer(name, search, &truth)).unwrap();
            check_feasible(&w, &r);
            assert!(r.mean_wait_ms() > 0.0, "{name} on {gpus} GPUs: the load makes jobs wait");
        }
    }
}

#[test]
fn bad_configurations_and_workloads_are_refused() {
    assert!(JctWorkload::generate(&JctConfig { load: 0.0, ..JctConfig::new(8, 1.0) }, 0).is_err());
    assert!(JctWorkload::generate(&JctConfig { members: vec![], ..JctConfig::new(8, 1.0) }, 0).is_err());
    let mut w = JctWorkload::generate(&JctConfig { jobs: 3, ..JctConfig::new(8, 1.0) }, 0).unwrap();
    w.jobs.swap(0, 1);
    let truth = exact();
    assert!(matches!(simulate(&w, &truth, &placer("greedy", Search::Greedy, &truth)), Err(SimError::JctWorkload(_))));
}
