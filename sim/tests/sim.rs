//! The simulator's behaviour: exact figures on a hand-checked scenario, determinism, eviction
//! accounting, trace replay and its errors, honest baselines, and the placer contract.

use std::io::Cursor;

use plexus_proto::Resources;
use plexus_sim::baseline::LocalityPlus;
use plexus_sim::placer::{Candidate, Decision, HEURISTICS, Outcome, PlacementRequest, Placer, heuristic};
use plexus_sim::*;

/// Wraps a placer, checks every request against the contract and records what it saw.
struct Checked {
    inner: Box<dyn Placer>,
    requests: Vec<u64>,
    outcomes: Vec<Outcome>,
    /// Decision → the chosen candidate's (estimated fetch ms, estimated compute ms).
    estimates: std::collections::HashMap<u64, (f64, f64)>,
}

impl Checked {
    fn new(inner: Box<dyn Placer>) -> Self {
        Checked { inner, requests: Vec::new(), outcomes: Vec::new(), estimates: Default::default() }
    }
}

impl Placer for Checked {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn place(&mut self, req: &PlacementRequest, candidates: &[Candidate]) -> Decision {
        assert!(candidates.iter().any(|c| c.feasible), "asked with no feasible candidate");
        assert!(candidates.windows(2).all(|w| w[0].worker < w[1].worker), "candidates in worker-id order");
        for c in candidates {
            assert_eq!(c.feasible, req.resources.fits_in(&c.free), "feasible means the request fits");
            assert!(c.cache_used <= c.cache_bytes, "fast memory over capacity");
            assert!(c.local_input_bytes <= req.input_bytes);
            let (Some(f), Some(x)) = (c.est_fetch_ms, c.est_compute_ms) else {
                panic!("the simulator gives every candidate estimates")
            };
            assert!(f >= 0.0 && x >= 0.0);
        }
        self.requests.push(req.decision);
        let d = self.inner.place(req, candidates);
        assert!(candidates[d.chosen].feasible, "{} chose an infeasible candidate", self.inner.name());
        let c = &candidates[d.chosen];
        self.estimates.insert(req.decision, (c.est_fetch_ms.unwrap_or(f64::NAN), c.est_compute_ms.unwrap_or(f64::NAN)));
        d
    }

    fn observe(&mut self, outcome: &Outcome) {
        self.outcomes.push(outcome.clone());
        self.inner.observe(outcome);
    }
}

fn small(mix: Mix, nodes: usize, seed: u64, jobs: usize) -> SimConfig {
    let mut c = SimConfig::new(nodes, mix, seed);
    c.workload.jobs = jobs;
    c.window = 50;
    c
}

/// One node with four 1-GFLOP/s cores and 1 GiB of fast memory; the local slow tier and the
/// eviction path both move 1 GiB/s.
fn one_node() -> SimConfig {
    let mut cluster = ClusterConfig::standard(1);
    cluster.classes = vec![NodeClass {
        name: "n".into(),
        weight: 1,
        cores: 4.0,
        memory: 16 * GIB,
        gpus: 0,
        core_flops: 1e9,
        gpu_flops: 0.0,
        cache_bytes: GIB,
    }];
    cluster.tiers.local = Tier { latency_us: 100, bytes_per_s: GIB as f64 };
    cluster.eviction_bytes_per_s = GIB as f64;
    SimConfig {
        cluster,
        workload: WorkloadConfig::preset(Mix::Mixed, 1),
        seed: 0,
        window: 1,
        hidden: Default::default(),
    }
}

fn task(name: &str, cpu: f64, flops: f64, inputs: Vec<usize>) -> Task {
    Task {
        name: name.into(),
        resources: Resources { cpu, memory: 0, gpu: 0 },
        flops,
        inputs,
        deps: vec![],
        output_bytes: 0,
    }
}

#[test]
fn hand_checked_scenario_on_one_node() {
    // A (768 MiB) starts in fast memory; B (512 MiB) does not fit beside it and stays in the
    // node's slow memory. Both tasks need all four cores, so t2 waits for t1.
    let workload = Workload {
        objects: vec![
            DataObject { name: "A".into(), bytes: 768 * MIB, home: 0 },
            DataObject { name: "B".into(), bytes: 512 * MIB, home: 0 },
        ],
        jobs: vec![Job {
            name: "j".into(),
            arrival_us: 0,
            tasks: vec![task("t1", 4.0, 4e9, vec![1]), task("t2", 4.0, 2e9, vec![0])],
        }],
    };
    let mut p = Checked::new(heuristic("least-loaded", 0).unwrap());
    let r = simulate(&one_node(), &workload, &mut p).unwrap();

    // t1: fetch B from local slow memory (100 µs + 0.5 s), evict A (0.75 s), compute 4e9 on
    // 4 × 1e9 (1 s).
    let t1 = &r.tasks[0];
    assert_eq!((t1.task, t1.start_us, t1.fetch_us, t1.evict_us, t1.compute_us), (0, 0, 500_100, 750_000, 1_000_000));
    assert_eq!((t1.finish_us, t1.fetched_bytes, t1.evicted_bytes, t1.hit_bytes), (2_250_100, 512 * MIB, 768 * MIB, 0));
    // t2 waits for t1's cores, fetches A back (100 µs + 0.75 s), evicts B (0.5 s), computes 0.5 s.
    let t2 = &r.tasks[1];
    assert_eq!(
        (t2.task, t2.ready_us, t2.start_us, t2.fetch_us, t2.evict_us, t2.compute_us),
        (1, 0, 2_250_100, 750_100, 500_000, 500_000)
    );
    assert_eq!((t2.finish_us, t2.evicted_bytes), (4_000_200, 512 * MIB));

    assert_eq!(r.mean_wait_ms(), 1125.05);
    assert_eq!(r.mean_response_ms(), 3125.15);
    assert_eq!(r.p95_response_ms(), 4000.2);
    assert_eq!(r.mean_job_response_ms(), 4000.2);
    assert_eq!(r.evicted_bytes(), 1280 * MIB);
    assert_eq!(r.utilisation.cpu, 1.0, "all four cores are held from the first start to the last finish");
    let busy = 1_500_000.0 / 4_000_200.0;
    assert!((r.utilisation.busy - busy).abs() < 1e-12, "busy {} ≠ {busy}", r.utilisation.busy);
    assert_eq!((r.first_decision, r.placements, r.windows.len()), (0, 2, 2));
    assert_eq!(r.windows[1].mean_response_ms, 4000.2);

    // The placer heard about both decisions, with the same ids and the same figures (ms); the
    // run is what follows the fetch (eviction and compute), as a worker reports it.
    assert_eq!(p.requests, vec![0, 1]);
    let o: Vec<_> = p
        .outcomes
        .iter()
        .map(|o| (o.decision, o.wait_ms, o.run_ms, o.fetch_ms, o.fetched_bytes, o.evicted_bytes))
        .collect();
    assert_eq!(o, vec![(0, 0, 1750, 500, 512 * MIB, 768 * MIB), (1, 2250, 1000, 750, 768 * MIB, 512 * MIB)]);
    assert!(
        (p.outcomes[0].cluster_utilisation - 1e6 / 2_250_100.0).abs() < 1e-12,
        "measured (computing) share over t1's run"
    );
}

#[test]
fn same_seed_same_report_other_seed_other_report() {
    for name in HEURISTICS {
        let config = small(Mix::Mixed, 16, 7, 60);
        let w = Workload::generate(&config).unwrap();
        assert_eq!(w, Workload::generate(&config).unwrap());
        let a = simulate(&config, &w, heuristic(name, 7).unwrap().as_mut()).unwrap();
        let b = simulate(&config, &w, heuristic(name, 7).unwrap().as_mut()).unwrap();
        assert_eq!(a, b, "{name}");
        assert_eq!(a.tasks.len(), w.tasks());
    }
    let a = Workload::generate(&small(Mix::Mixed, 16, 7, 60)).unwrap();
    let b = Workload::generate(&small(Mix::Mixed, 16, 8, 60)).unwrap();
    assert_ne!(a, b);
}

#[test]
fn eviction_accounting_adds_up() {
    let config = small(Mix::LocalityHeavy, 16, 3, 120);
    let w = Workload::generate(&config).unwrap();
    let mut p = Checked::new(heuristic("random", 3).unwrap());
    let r = simulate(&config, &w, &mut p).unwrap();
    assert!(r.evicted_bytes() > 0, "a scattering placer on a locality-heavy workload must evict");
    assert_eq!(r.evicted_bytes(), p.outcomes.iter().map(|o| o.evicted_bytes).sum::<u64>());
    assert_eq!(r.fetched_bytes(), p.outcomes.iter().map(|o| o.fetched_bytes).sum::<u64>());
    let bw = config.cluster.eviction_bytes_per_s;
    for t in &r.tasks {
        assert_eq!(t.evict_us, (t.evicted_bytes as f64 * 1e6 / bw).ceil() as u64);
        assert_eq!(t.finish_us - t.start_us, t.fetch_us + t.evict_us + t.compute_us);
        assert_eq!(t.fetched_bytes == 0, t.fetch_us == 0);
    }
    // Every decision was observed exactly once, with its own id.
    let mut seen: Vec<u64> = p.outcomes.iter().map(|o| o.decision).collect();
    seen.sort_unstable();
    assert_eq!(seen, p.requests);
    assert_eq!(seen, (0..w.tasks() as u64).collect::<Vec<_>>());
}

#[test]
fn locality_beats_random_on_a_locality_heavy_workload() {
    for seed in 1..=3 {
        let config = small(Mix::LocalityHeavy, 16, seed, 160);
        let w = Workload::generate(&config).unwrap();
        let run = |p: &mut dyn Placer| simulate(&config, &w, p).unwrap();
        let locality = run(heuristic("locality", seed).unwrap().as_mut());
        let random = run(heuristic("random", seed).unwrap().as_mut());
        let plus = run(&mut LocalityPlus);
        assert!(
            locality.mean_response_ms() < 0.95 * random.mean_response_ms(),
            "seed {seed}: locality {:.0} ms vs random {:.0} ms",
            locality.mean_response_ms(),
            random.mean_response_ms()
        );
        assert!(locality.hit_ratio() > random.hit_ratio() + 0.1);
        assert!(plus.mean_response_ms() < random.mean_response_ms());
    }
}

/// A candidate's estimates are what the engine then charges the task that runs there: its
/// fetches exactly (same instant, same copies, same tiers) and its compute.
#[test]
fn candidate_estimates_match_what_the_chosen_node_charges() {
    for (mix, placer) in [(Mix::LocalityHeavy, "locality"), (Mix::Mixed, "random")] {
        let config = small(mix, 16, 4, 80);
        let w = Workload::generate(&config).unwrap();
        let mut p = Checked::new(heuristic(placer, 4).unwrap());
        let r = simulate(&config, &w, &mut p).unwrap();
        let mut fetched = 0;
        for t in &r.tasks {
            let (fetch, compute) = p.estimates[&t.decision];
            assert_eq!(fetch, t.fetch_us as f64 / 1e3, "decision {}", t.decision);
            assert_eq!(compute, t.compute_us as f64 / 1e3, "decision {}", t.decision);
            fetched += (t.fetch_us > 0) as usize;
        }
        assert!(fetched > 0, "{placer}: some task fetched, so the fetch estimate was exercised");
    }
}

/// A feasible 32-core candidate with worker id `n`, `free_cpu` cores free, `local` input bytes
/// resident and no estimates.
fn candidate(n: u8, free_cpu: f64, local: u64) -> Candidate {
    let mut b = [0u8; 16];
    b[15] = n;
    Candidate {
        worker: plexus_proto::WorkerId::from_bytes(b),
        feasible: true,
        note: String::new(),
        capacity: Resources { cpu: 32.0, memory: 1 << 40, gpu: 0 },
        free: Resources { cpu: free_cpu, memory: 1 << 40, gpu: 0 },
        assigned: (32.0 - free_cpu) as u32,
        cpu_utilisation: 0.0,
        local_input_bytes: local,
        cache_bytes: 1 << 35,
        cache_used: 0,
        est_fetch_ms: None,
        est_compute_ms: None,
        recent_slowdown: None,
        est_compute_own: false,
        est_compute_kind: false,
        running: Vec::new(),
    }
}

/// `fastest` takes the least estimated fetch + compute and breaks ties as `locality+`.
#[test]
fn fastest_takes_the_least_estimate_then_the_locality_key() {
    let cand = |n: u8, free_cpu: f64, local: u64, fetch: f64, compute: f64| Candidate {
        est_fetch_ms: Some(fetch),
        est_compute_ms: Some(compute),
        ..candidate(n, free_cpu, local)
    };
    let req = PlacementRequest {
        decision: 0,
        job_age_ms: 0,
        resources: Resources { cpu: 1.0, memory: 0, gpu: 0 },
        input_bytes: GIB,
        flops: None,
        writes: false,
        kind: 0,
    };
    let mut f = plexus_sim::baseline::Fastest;
    // The node holding the input is slower overall than a faster engine one rack away.
    let c = vec![cand(1, 8.0, GIB, 0.0, 1000.0), cand(2, 8.0, 0, 400.0, 500.0)];
    assert_eq!(f.place(&req, &c).chosen, 1);
    // Equal estimates: most resident bytes, then most free cores.
    let c = vec![cand(1, 8.0, 0, 0.0, 900.0), cand(2, 4.0, GIB, 100.0, 800.0), cand(3, 9.0, GIB, 200.0, 700.0)];
    assert_eq!(f.place(&req, &c).chosen, 2);
    let mut c = vec![cand(1, 1.0, 0, 0.0, 10.0), cand(2, 2.0, 0, 0.0, 20.0)];
    c[0].feasible = false;
    let d = f.place(&req, &c);
    assert_eq!(d.chosen, 1);
    assert!(d.scores[0].is_nan());
}

#[test]
fn infeasible_candidates_are_never_chosen_and_a_placer_that_does_is_refused() {
    // Compute-heavy work has GPU tasks, for which every CPU-only node is infeasible.
    let config = small(Mix::ComputeHeavy, 16, 5, 60);
    let w = Workload::generate(&config).unwrap();
    assert!(w.jobs.iter().flat_map(|j| &j.tasks).any(|t| t.resources.gpu > 0));
    for c in Contender::baselines(5) {
        let mut p = Checked::new(c.placer);
        simulate(&config, &w, &mut p).unwrap();
    }

    struct Contrary;
    impl Placer for Contrary {
        fn name(&self) -> &'static str {
            "contrary"
        }
        fn place(&mut self, _: &PlacementRequest, c: &[Candidate]) -> Decision {
            let chosen = c.iter().position(|c| !c.feasible).unwrap_or(0);
            Decision { chosen, scores: vec![0.0; c.len()], exploratory: false, reason: String::new(), features: None }
        }
    }
    match simulate(&config, &w, &mut Contrary) {
        Err(SimError::InfeasibleChoice { placer, .. }) => assert_eq!(placer, "contrary"),
        other => panic!("expected InfeasibleChoice, got {:?}", other.map(|r| r.placements)),
    }
}

#[test]
fn run_all_warms_learning_contenders_up_and_continues_their_decision_ids() {
    let config = small(Mix::LocalityHeavy, 16, 2, 40);
    let w = Workload::generate(&config).unwrap();
    let warm = Workload::generate(&config.with_seed(1002)).unwrap();
    let mut contenders = Contender::baselines(2);
    // On exact estimates: `Checked` insists every candidate has them (measured ones start empty).
    contenders.push(
        Contender::learning("learner", Box::new(Checked::new(heuristic("locality", 2).unwrap())))
            .on(EstimateMode::Exact),
    );
    let runs = run_all(&config, &w, Some(&warm), contenders).unwrap();
    // The coordinator's heuristics (its `fastest` on measured estimates), locality+,
    // fastest-exact (the coordinator's `fastest` on exact ones) and the learner.
    assert_eq!(runs.len(), HEURISTICS.len() + 3, "the heuristics, locality+, fastest-exact and the learner");
    assert_eq!(
        runs.iter().filter(|r| r.estimates == EstimateMode::Exact).map(|r| r.name.as_str()).collect::<Vec<_>>(),
        vec!["fastest-exact", "learner"]
    );
    assert!(
        best_heuristic(&runs).is_some_and(|b| b.estimates == EstimateMode::Measured),
        "the oracle is never the reference"
    );
    for r in &runs {
        assert_eq!(r.warmup.is_some(), r.learning, "{}", r.name);
        assert_eq!(r.report.tasks.len(), w.tasks());
    }
    let learner = runs.last().unwrap();
    let warmup = learner.warmup.as_ref().unwrap();
    assert_eq!(warmup.first_decision, 0);
    assert_eq!(learner.report.first_decision, warmup.placements);
    // The same placer on the same workload measures the same, learning or not.
    let locality = runs.iter().find(|r| r.name == "locality").unwrap();
    assert_eq!(
        learner.report.tasks,
        locality
            .report
            .tasks
            .iter()
            .map(|t| plexus_sim::TaskRecord { decision: t.decision + warmup.placements, ..t.clone() })
            .collect::<Vec<_>>()
    );

    let mut out = Vec::new();
    print_table(&mut out, "title", &runs).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("locality+") && text.contains("learning curve of learner") && text.contains("warm-up:"),
        "{text}"
    );
}

#[test]
fn the_example_trace_replays() {
    let text = include_str!("../traces/example.jsonl");
    let w = Workload::from_jsonl(Cursor::new(text)).unwrap();
    assert_eq!(w.jobs.len(), 5);
    assert_eq!(w.tasks(), 14);
    assert_eq!(w.objects.len(), 4, "clicks/part0..2 and geometry.stl, each once");
    assert_eq!(w.jobs[4].arrival_us, 4_000_500);
    let config = SimConfig { window: 5, ..SimConfig::new(8, Mix::Mixed, 0) };
    for c in Contender::baselines(1) {
        let mut p = Checked::new(c.placer);
        let r = simulate(&config, &w, &mut p).unwrap();
        assert_eq!(r.tasks.len(), 14);
        assert_eq!(r.jobs.len(), 5);
        // The GPU task ran on a GPU node (classes repeat gpu, fat, std, std).
        let train = r.tasks.iter().find(|t| t.job == 1 && t.task == 1).unwrap();
        assert_eq!(train.node % 4, 0);
        // Dependencies are respected.
        for t in &r.tasks {
            for &d in &w.jobs[t.job].tasks[t.task].deps {
                let dep = r.tasks.iter().find(|x| x.job == t.job && x.task == d).unwrap();
                assert!(dep.finish_us <= t.start_us);
            }
        }
    }
}

#[test]
fn generated_workloads_round_trip_through_a_trace() {
    let config = small(Mix::Mixed, 16, 11, 40);
    let w = Workload::generate(&config).unwrap();
    let mut text = Vec::new();
    w.to_jsonl(&mut text).unwrap();
    let back = Workload::from_jsonl(Cursor::new(text)).unwrap();
    // Field by field first, so that a mismatch prints one job rather than the whole workload.
    assert_eq!(back.objects, w.objects);
    for (a, b) in back.jobs.iter().zip(&w.jobs) {
        assert_eq!(a, b);
    }
    assert!(back == w);
}

fn trace_error(text: &str) -> (usize, String) {
    match Workload::from_jsonl(Cursor::new(text)) {
        Err(SimError::Trace { line, message }) => (line, message),
        other => panic!("expected a trace error, got {other:?}"),
    }
}

#[test]
fn trace_errors_name_the_line_and_the_mistake() {
    let ok = r#"{"job":"a","arrival_ms":0,"tasks":[{"name":"x","inputs":[{"object":"o","bytes":10,"node":0}]}]}"#;
    let cases: &[(&str, usize, &str)] = &[
        (&format!("{ok}\n{{\"job\":"), 2, "EOF"),
        (
            &format!("{ok}\n\n{{\"job\":\"b\",\"arrival_ms\":1,\"tasks\":[{{\"name\":\"x\",\"cpus\":2}}]}}"),
            3,
            "unknown field `cpus`",
        ),
        (r#"{"job":"b","arrival_ms":0,"tasks":[{"name":"x","deps":["nope"]}]}"#, 1, "unknown dependency \"nope\""),
        (
            r#"{"job":"b","arrival_ms":0,"tasks":[{"name":"x","deps":["y"]},{"name":"y","deps":["x"]}]}"#,
            1,
            "dependency cycle x -> y -> x",
        ),
        (r#"{"job":"b","arrival_ms":0,"tasks":[{"name":"x"},{"name":"x"}]}"#, 1, "duplicate task name \"x\""),
        (r#"{"job":"b","arrival_ms":0,"tasks":[]}"#, 1, "has no tasks"),
        (r#"{"job":"b","arrival_ms":-1,"tasks":[{"name":"x"}]}"#, 1, "arrival_ms"),
        (r#"{"job":"b","arrival_ms":0,"tasks":[{"name":"x","cpu":-2}]}"#, 1, "cpu -2"),
        (&format!("{ok}\n{ok}"), 2, "job \"a\" already appeared on line 1"),
        (
            &format!(
                "{ok}\n{}",
                r#"{"job":"b","arrival_ms":0,"tasks":[{"name":"y","inputs":[{"object":"o","bytes":11,"node":0}]}]}"#
            ),
            2,
            "object \"o\" is 11 bytes on node 0 here but 10 bytes on node 0 on line 1",
        ),
        (r#"{"object":"o","bytes":10}"#, 1, "missing field `node`"),
    ];
    for (text, line, needle) in cases {
        let (l, m) = trace_error(text);
        assert_eq!(l, *line, "{m}");
        assert!(m.contains(needle), "{m:?} should mention {needle:?}");
    }
}

#[test]
fn simulation_refuses_workloads_that_do_not_fit_the_cluster() {
    let config = SimConfig::new(8, Mix::Mixed, 0);
    let far = r#"{"job":"a","arrival_ms":0,"tasks":[{"name":"x","inputs":[{"object":"o","bytes":10,"node":99}]}]}"#;
    let w = Workload::from_jsonl(Cursor::new(far)).unwrap();
    let e = simulate(&config, &w, heuristic("locality", 0).unwrap().as_mut()).unwrap_err();
    assert!(matches!(e, SimError::BadLocation { node: 99, nodes: 8, .. }), "{e}");

    let huge = r#"{"job":"a","arrival_ms":0,"tasks":[{"name":"x","gpu":9}]}"#;
    let w = Workload::from_jsonl(Cursor::new(huge)).unwrap();
    let e = simulate(&config, &w, heuristic("locality", 0).unwrap().as_mut()).unwrap_err();
    assert!(e.to_string().contains("job \"a\" task \"x\" needs 1 cores, 0 MiB, 9 GPUs"), "{e}");
}

#[test]
fn locality_plus_breaks_ties_among_holders_by_free_cores() {
    let cand = candidate;
    let req = PlacementRequest {
        decision: 0,
        job_age_ms: 0,
        resources: Resources { cpu: 1.0, memory: 0, gpu: 0 },
        input_bytes: 2 * GIB,
        flops: None,
        writes: false,
        kind: 0,
    };
    // Two nodes hold the same 1.5 GiB; the second is idle.
    let c = vec![cand(1, 2.0, 1536 * MIB), cand(2, 32.0, 1536 * MIB), cand(3, 32.0, 0)];
    assert_eq!(LocalityPlus.place(&req, &c).chosen, 1);
    let c = vec![cand(1, 2.0, 1536 * MIB), cand(2, 32.0, 1024 * MIB)];
    assert_eq!(LocalityPlus.place(&req, &c).chosen, 0, "resident bytes come first");
}
