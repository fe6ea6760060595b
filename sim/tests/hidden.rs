//! The hidden effects (issue 34, item 2): exact figures for interference that changes while
//! tasks run, drift, affinity and shared links; the oracle's estimates seeing them; and the
//! blind workloads running deterministically.

use plexus_proto::Resources;
use plexus_sim::hidden::{Affinity, Drift, Interference};
use plexus_sim::placer::{Candidate, Decision, Outcome, PlacementRequest, Placer, heuristic};
use plexus_sim::*;

/// Records the chosen candidate's exact compute estimate of every decision.
struct Seen {
    inner: Box<dyn Placer>,
    compute_ms: Vec<f64>,
}

impl Placer for Seen {
    fn name(&self) -> &'static str {
        "seen"
    }

    fn place(&mut self, req: &PlacementRequest, candidates: &[Candidate]) -> Decision {
        let d = self.inner.place(req, candidates);
        self.compute_ms.push(candidates[d.chosen].est_compute_ms.expect("exact estimates"));
        d
    }

    fn observe(&mut self, outcome: &Outcome) {
        self.inner.observe(outcome);
    }
}

fn seen() -> Seen {
    Seen { inner: heuristic("least-loaded", 0).unwrap(), compute_ms: Vec::new() }
}

fn class(name: &str, weight: u32, cores: f64, cache_bytes: u64) -> NodeClass {
    NodeClass {
        name: name.into(),
        weight,
        cores,
        memory: 64 * GIB,
        gpus: 0,
        core_flops: 1e9,
        gpu_flops: 0.0,
        cache_bytes,
    }
}

fn config(nodes: usize, classes: Vec<NodeClass>, hidden: Hidden) -> SimConfig {
    let mut cluster = ClusterConfig::standard(nodes);
    cluster.classes = classes;
    SimConfig { cluster, workload: WorkloadConfig::preset(Mix::Mixed, nodes), seed: 0, window: 1, hidden }
}

/// A task of `cores` cores doing `seconds` of work at full speed on 1-GFLOP/s cores.
fn task(name: &str, cores: f64, seconds: f64, inputs: Vec<usize>) -> Task {
    Task {
        name: name.into(),
        resources: Resources { cpu: cores, memory: 0, gpu: 0 },
        flops: cores * seconds * 1e9,
        inputs,
        deps: vec![],
        output_bytes: 0,
    }
}

fn job(name: &str, arrival_s: f64, tasks: Vec<Task>) -> Job {
    Job { name: name.into(), arrival_us: (arrival_s * 1e6) as u64, tasks }
}

fn finish_of(r: &Report, job: usize) -> u64 {
    r.tasks.iter().find(|t| t.job == job).expect("the task ran").finish_us
}

fn interference() -> Hidden {
    Hidden {
        interference: Some(Interference { kinds: vec!["stream".into()], stream_share: 0.25, neighbour: 0.5 }),
        ..Hidden::default()
    }
}

#[test]
fn interference_follows_the_neighbours_as_they_come_and_go() {
    // 64 cores sustain 16 cores of memory-bound work. A alone runs at full speed for 5 s; B
    // (memory-bound) and C (not) join: demand 32, twice what is sustained, so A and B run at
    // half speed and C at 1 / 1.5. A's last 5 s of work end at 15 s; then B and C run alone.
    let c = config(1, vec![class("n", 1, 64.0, GIB)], interference());
    let w = Workload {
        objects: vec![],
        jobs: vec![
            job("a", 0.0, vec![task("stream0", 16.0, 10.0, vec![])]),
            job("b", 5.0, vec![task("stream1", 16.0, 10.0, vec![])]),
            job("c", 5.0, vec![task("solve0", 16.0, 10.0, vec![])]),
        ],
    };
    let mut p = seen();
    let r = simulate(&c, &w, &mut p).unwrap();
    assert_eq!(finish_of(&r, 0), 15_000_000);
    // B: 5 s of work done by 15 s, 5 s alone after.
    assert_eq!(finish_of(&r, 1), 20_000_000);
    // C: 10 s × 2/3 done by 15 s, the 3.33 s left at full speed.
    assert!(finish_of(&r, 2).abs_diff(18_333_334) <= 1, "{}", finish_of(&r, 2));
    // A task's compute time is what it took.
    for t in &r.tasks {
        assert_eq!(t.compute_us, t.finish_us - t.start_us);
    }
    // The oracle saw the contention each task would meet when it was placed: A alone, B beside
    // A, C beside both.
    assert_eq!(p.compute_ms, vec![10_000.0, 20_000.0, 15_000.0]);

    // Without the hidden effect, the same work takes 10 s each.
    let plain = simulate(&config(1, vec![class("n", 1, 64.0, GIB)], Hidden::default()), &w, &mut seen()).unwrap();
    assert_eq!(
        (finish_of(&plain, 0), finish_of(&plain, 1), finish_of(&plain, 2)),
        (10_000_000, 15_000_000, 15_000_000)
    );
}

#[test]
fn drifting_nodes_run_slower_in_their_slow_phases() {
    let drift = |share: f64| Hidden {
        drift: Some(Drift { period_us: 4_000_000, share, slow: 3.0, seed: 1 }),
        ..Hidden::default()
    };
    let w = Workload { objects: vec![], jobs: vec![job("a", 0.0, vec![task("solve0", 4.0, 10.0, vec![])])] };
    let always = simulate(&config(1, vec![class("n", 1, 8.0, GIB)], drift(1.0)), &w, &mut seen()).unwrap();
    assert_eq!(finish_of(&always, 0), 30_000_000);
    let never = simulate(&config(1, vec![class("n", 1, 8.0, GIB)], drift(0.0)), &w, &mut seen()).unwrap();
    assert_eq!(finish_of(&never, 0), 10_000_000);
    // Half the phases slow: the task ends between the two, on a phase boundary's schedule, and
    // the run ends when it does (no phase is waited for past the last task).
    let half = simulate(&config(1, vec![class("n", 1, 8.0, GIB)], drift(0.5)), &w, &mut seen()).unwrap();
    let end = finish_of(&half, 0);
    assert!((10_000_000..=30_000_000).contains(&end), "{end}");
    assert_eq!(half.end_us, end);
    let h = drift(0.5);
    let slow_phases = (0..end.div_ceil(4_000_000)).filter(|p| h.drift(0, p * 4_000_000) > 1.0).count();
    assert!(slow_phases > 0 || end == 10_000_000);
}

#[test]
fn a_class_can_be_fast_for_one_kind_and_slow_for_another() {
    let hidden = Hidden {
        affinity: vec![
            Affinity { class: "fat".into(), kind: "solve".into(), speed: 2.0 },
            Affinity { class: "fat".into(), kind: "map".into(), speed: 0.4 },
        ],
        ..Hidden::default()
    };
    let c = config(1, vec![class("fat", 1, 8.0, GIB)], hidden);
    let w = Workload {
        objects: vec![],
        jobs: vec![
            job("s", 0.0, vec![task("solve3", 4.0, 10.0, vec![])]),
            job("m", 0.0, vec![task("map7", 4.0, 10.0, vec![])]),
        ],
    };
    let mut p = seen();
    let r = simulate(&c, &w, &mut p).unwrap();
    assert_eq!((finish_of(&r, 0), finish_of(&r, 1)), (5_000_000, 25_000_000));
    assert_eq!(p.compute_ms, vec![5_000.0, 25_000.0]);
    // The lower bound knows the solver's speed-up.
    assert_eq!(response_bound_ms(&c, &w).unwrap(), 15_000.0);
}

#[test]
fn fetches_from_one_node_share_its_link() {
    // Node 0 holds a 1 GiB object and has no room for the tasks; nodes 1 and 2 cannot cache it,
    // so both fetch it from node 0 at once: the second shares the link with the first.
    let classes = vec![class("src", 1, 1.0, 2 * GIB), class("dst", 2, 2.0, MIB)];
    let w = Workload {
        objects: vec![DataObject { name: "o".into(), bytes: GIB, home: 0 }],
        jobs: vec![
            job("a", 0.0, vec![task("scan0", 2.0, 1.0, vec![0])]),
            job("b", 0.0, vec![task("scan1", 2.0, 1.0, vec![0])]),
        ],
    };
    let fetches = |shared: bool| {
        let c = config(3, classes.clone(), Hidden { shared_links: shared, ..Hidden::default() });
        let r = simulate(&c, &w, &mut seen()).unwrap();
        let mut f: Vec<u64> = r.tasks.iter().map(|t| t.fetch_us).collect();
        f.sort();
        f
    };
    // Same rack: 100 µs + bytes / 2.5 GB/s, the second at half that rate.
    assert_eq!(fetches(false), vec![429_597, 429_597]);
    assert_eq!(fetches(true), vec![429_597, 859_094]);
}

#[test]
fn the_blind_workloads_run_deterministically_and_say_what_is_hidden() {
    for mix in Mix::BLIND {
        let mut c = SimConfig::new(8, mix, 2);
        c.workload.jobs = 40;
        let w = Workload::generate(&c).unwrap();
        let run = || simulate(&c, &w, heuristic("fastest", 2).unwrap().as_mut()).unwrap();
        let (a, b) = (run(), run());
        assert_eq!(a.tasks, b.tasks, "{}", mix.name());
        assert!(describe(&c, &w).contains("hidden from per-worker speeds"), "{}", mix.name());
        let streams = w.jobs.iter().flat_map(|j| &j.tasks).filter(|t| t.name.starts_with("stream")).count();
        assert_eq!(streams > 0, mix == Mix::Interference, "{}", mix.name());
    }
    for mix in Mix::ORIGINAL {
        assert_eq!(SimConfig::new(8, mix, 2).hidden, Hidden::default());
    }
}
