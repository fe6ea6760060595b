//! Where candidates' `est_fetch_ms` / `est_compute_ms` come from (issue 17, item 4): the
//! simulator's exact figures, or the coordinator's own estimator fed online with what the
//! simulated cluster would report to a coordinator.
//!
//! # Two modes ([`EstimateMode`])
//! * [`EstimateMode::Exact`]: what the engine will charge, known in advance (the tiers, every
//!   copy, the engines' speeds). No production placer has this: it is the oracle.
//! * [`EstimateMode::Measured`]: an instance of the production estimator,
//!   [`plexus_scheduler::core::estimates::Estimates`], used unchanged. It starts empty at the
//!   start of every simulated run (a fresh cluster, a fresh coordinator; a learning contender's
//!   warm-up starts cold too, so a learned placer never knows more of the cluster than a
//!   heuristic measured on the same run), and is fed when each task finishes, in event order,
//!   with what its worker would report, the way `Core::learn_speeds` feeds the coordinator's:
//!   - **run**: `observe_run(worker, signature, work, compute ms)`, the work being the task's
//!     flops per core or GPU (`estimates::work`). The worker's clock
//!     starts once the inputs are in, so the run is the compute only (no fetch, no eviction),
//!     rounded to whole milliseconds as a worker reports it.
//!   - **fetch**: one sample per task, `observe_fetch(holder, worker, same_rack, objects, bytes,
//!     ms)`, over the inputs brought from other nodes (fast memory or home copy alike): their
//!     count, bytes and total fetch time (whole ms), credited whole to the node that supplied
//!     most of those bytes (ties: the first met), as the coordinator's `FetchPlan` credits an
//!     attempt. Reads of the node's own slow memory (an object homed on it but out of its fast
//!     memory) are not fetches from another worker and are not reported; neither is eviction.
//!     Every simulated worker is taken to carry a `rack=` label, so the relation is always
//!     known (`Some(same rack)`).
//!
//!   A candidate's estimates are built as `Core::choose` builds them: an input is resident
//!   (nothing to fetch, counted in `local_input_bytes`) when the node holds any copy of it (in
//!   fast memory, or as its home); each other input costs the least `link(holder → node)
//!   .fetch_ms(bytes)` over its first [`RANKED_HOLDERS`] holders in id order (fast-memory
//!   holders and its home); the fetch estimate is `None` when some input has no estimate at all
//!   (nothing measured yet); compute is `compute(node, signature, work)`, `None` until
//!   something comparable ran. So the measured estimates miss what a coordinator cannot see:
//!   slow-memory reads of resident inputs, which copy is in fast memory, eviction, and the
//!   per-task spread of work within a signature.
//!
//! # Signatures
//! The coordinator keys run times by `core::gpus::signature`: the task's command or kind and
//! its requests, so the same work in different jobs shares what was measured. A simulated task
//! has no command; its kind is its name without the trailing index (`map3` → `map`, `reduce`,
//! `solve2` → `solve`, `train0` → `train`), and [`signature`] hashes it with the requests the
//! way `signature` hashes a `kind` task (FNV-1a, each field closed by `0xff`). Work within a
//! signature varies (a map draws 2–12 core-seconds), which the measured mean does not see: the
//! estimator's first fallback, the signature's own mean on that worker, wins over the task's work
//! × the worker's ms per unit of work, as in production.
//!
//! Deterministic: samples arrive in event order, and the estimator's only iteration over its
//! hash maps (rebuilding its sums after a trim past its bounds, 4,096 pairs or (worker,
//! signature) means) is not reached by the benchmark's clusters (at most 64 × 63 pairs and
//! 64 × 22 means).

use plexus_proto::WorkerId;
use plexus_scheduler::core::estimates::{Estimates, work};

use crate::workload::Task;

/// Holders of an input whose fetch is estimated for each candidate (the coordinator's
/// `RANKED_HOLDERS`).
pub const RANKED_HOLDERS: usize = 8;

/// Which estimates candidates carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EstimateMode {
    /// What the engine will charge (the oracle; today's simulator).
    #[default]
    Exact,
    /// The production estimator's, learnt online from what the simulated workers report.
    Measured,
}

impl EstimateMode {
    pub fn name(self) -> &'static str {
        match self {
            EstimateMode::Exact => "exact",
            EstimateMode::Measured => "measured",
        }
    }
}

/// The kind of a simulated task: its name without its trailing digits.
pub fn kind(name: &str) -> &str {
    let k = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if k.is_empty() { name } else { k }
}

/// What `task` runs, hashed without its requests, as the coordinator's `kind_key` hashes a task
/// of that kind (`PlacementRequest::kind`).
pub fn kind_key(task: &Task) -> u64 {
    let mut h = plexus_scheduler::core::FieldHash::default();
    h.eat(kind(&task.name).as_bytes());
    h.finish()
}

/// The run-time key of `task`, as the coordinator's `signature` keys a task of that kind with
/// those requests.
pub fn signature(task: &Task) -> u64 {
    let mut h = plexus_scheduler::core::FieldHash::with_state(kind_key(task));
    h.eat(&task.resources.cpu.to_le_bytes());
    h.eat(&task.resources.memory.to_le_bytes());
    h.eat(&task.resources.gpu.to_le_bytes());
    h.finish()
}

/// Whole milliseconds, as a worker reports them.
pub(crate) fn whole_ms(us: u64) -> f64 {
    ((us + 500) / 1000) as f64
}

/// What one task's worker reports of its fetch: the inputs it brought from other nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FetchSample {
    /// The node credited with the fetch (the one that supplied most of its bytes).
    pub holder: usize,
    pub objects: u32,
    pub bytes: u64,
    pub us: u64,
}

/// Builds a [`FetchSample`] from each remote input's (source node, bytes, µs), in fetch order.
#[derive(Default)]
pub(crate) struct FetchTally {
    objects: u32,
    bytes: u64,
    us: u64,
    /// Bytes per source, in first-met order.
    from: Vec<(usize, u64)>,
}

impl FetchTally {
    pub fn add(&mut self, source: usize, bytes: u64, us: u64) {
        self.objects += 1;
        self.bytes += bytes;
        self.us += us;
        match self.from.iter_mut().find(|(s, _)| *s == source) {
            Some(f) => f.1 += bytes,
            None => self.from.push((source, bytes)),
        }
    }

    pub fn sample(self) -> Option<FetchSample> {
        let mut best: Option<(usize, u64)> = None;
        for (s, b) in self.from {
            if best.is_none_or(|(_, bb)| b > bb) {
                best = Some((s, b));
            }
        }
        best.map(|(holder, _)| FetchSample { holder, objects: self.objects, bytes: self.bytes, us: self.us })
    }
}

/// The production estimator as the simulated coordinator holds it, with the nodes' worker ids
/// and racks.
pub(crate) struct Measured {
    pub estimates: Estimates,
    workers: Vec<WorkerId>,
    racks: Vec<usize>,
}

impl Measured {
    pub fn new(workers: Vec<WorkerId>, racks: Vec<usize>) -> Self {
        Measured { estimates: Estimates::new(), workers, racks }
    }

    fn same_rack(&self, a: usize, b: usize) -> Option<bool> {
        Some(self.racks[a] == self.racks[b])
    }

    /// The estimated fetch to `node` of the inputs it does not hold, each given as (bytes, its
    /// first [`RANKED_HOLDERS`] holders in index order, whether `node` holds it); `None` when
    /// an input to fetch has no estimate from any of its holders.
    pub fn fetch_ms<'a>(&self, node: usize, inputs: impl Iterator<Item = (u64, &'a [usize], bool)>) -> Option<f64> {
        let to = self.workers[node];
        let mut total = 0.0;
        for (bytes, holders, resident) in inputs {
            if resident {
                continue;
            }
            let best = holders
                .iter()
                .filter(|&&h| h != node)
                .filter_map(|&h| self.estimates.link(self.workers[h], to, self.same_rack(h, node)))
                .map(|l| l.fetch_ms(bytes))
                .min_by(f64::total_cmp)?;
            total += best;
        }
        Some(total)
    }

    /// The estimated compute of a task of `signature` with `work` (`estimates::work`: its flops
    /// per core or GPU) on `node`.
    pub fn compute_ms(&self, node: usize, signature: u64, kind: u64, work: Option<f64>) -> Option<f64> {
        self.estimates.compute_of(self.workers[node], signature, Some(kind), work).map(|e| e.ms)
    }

    /// [`Measured::compute_ms`], and where it comes from (`Estimate::own`, `Estimate::of_kind`).
    pub fn compute(
        &self,
        node: usize,
        signature: u64,
        kind: u64,
        work: Option<f64>,
    ) -> Option<plexus_scheduler::core::estimates::Estimate> {
        self.estimates.compute_of(self.workers[node], signature, Some(kind), work)
    }

    /// How much slower than estimated `node`'s latest tasks ran (`Estimates::slowdown`).
    pub fn slowdown(&self, node: usize) -> Option<f64> {
        self.estimates.slowdown(self.workers[node])
    }

    /// What `node`'s worker reports when a task of `signature` and `kind` with `work` ends: its
    /// compute time, then its fetch.
    pub fn observe(
        &mut self,
        node: usize,
        (signature, kind): (u64, u64),
        work: Option<f64>,
        compute_us: u64,
        fetch: Option<FetchSample>,
    ) {
        let to = self.workers[node];
        self.estimates.observe_run_of(to, signature, Some(kind), work, whole_ms(compute_us));
        if let Some(f) = fetch.filter(|f| f.holder != node && f.objects > 0) {
            let relation = self.same_rack(f.holder, node);
            self.estimates.observe_fetch(self.workers[f.holder], to, relation, f.objects, f.bytes, whole_ms(f.us));
        }
    }
}

/// The work of `task` for the estimator: its flops per core or GPU (`estimates::work`).
pub(crate) fn work_of(task: &Task) -> Option<f64> {
    work(Some(task.flops), &task.resources)
}

#[cfg(test)]
mod tests {
    use plexus_proto::Resources;
    use plexus_scheduler::placer::{Candidate, Decision, PlacementRequest, Placer, heuristic};

    use super::*;
    use crate::config::{ClusterConfig, GIB, MIB, Mix, NodeClass, SimConfig, Tier, WorkloadConfig};
    use crate::engine::simulate_with;
    use crate::workload::{DataObject, Job, Workload};

    /// Places decision `i` on node `script[i]` and records every candidate's estimates.
    struct Scripted {
        script: Vec<usize>,
        seen: Vec<Vec<(Option<f64>, Option<f64>)>>,
    }

    impl Placer for Scripted {
        fn name(&self) -> &'static str {
            "scripted"
        }

        fn place(&mut self, req: &PlacementRequest, candidates: &[Candidate]) -> Decision {
            self.seen.push(candidates.iter().map(|c| (c.est_fetch_ms, c.est_compute_ms)).collect());
            let chosen = self.script[req.decision as usize];
            Decision {
                chosen,
                scores: vec![0.0; candidates.len()],
                exploratory: false,
                reason: String::new(),
                features: None,
            }
        }
    }

    /// Records every candidate's estimates while `inner` places.
    struct Recording {
        inner: Box<dyn Placer>,
        seen: Vec<Vec<(Option<f64>, Option<f64>)>>,
    }

    impl Placer for Recording {
        fn name(&self) -> &'static str {
            self.inner.name()
        }

        fn place(&mut self, req: &PlacementRequest, candidates: &[Candidate]) -> Decision {
            self.seen.push(candidates.iter().map(|c| (c.est_fetch_ms, c.est_compute_ms)).collect());
            self.inner.place(req, candidates)
        }
    }

    /// Three nodes of four 1-GFLOP/s cores and 1 GiB of fast memory; nodes 0 and 1 share rack 0,
    /// node 2 is rack 1. Same rack: 1 ms + 1 GiB/s; across racks: 2 ms + 0.5 GiB/s.
    fn three_nodes() -> SimConfig {
        let mut cluster = ClusterConfig::standard(3);
        cluster.racks = 2;
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
        cluster.tiers.rack = Tier { latency_us: 1_000, bytes_per_s: GIB as f64 };
        cluster.tiers.remote = Tier { latency_us: 2_000, bytes_per_s: GIB as f64 / 2.0 };
        SimConfig {
            cluster,
            workload: WorkloadConfig::preset(Mix::Mixed, 3),
            seed: 0,
            window: 10,
            hidden: Default::default(),
        }
    }

    fn job(name: &str, arrival_us: u64, task: &str, cpu: f64, flops: f64, inputs: Vec<usize>) -> Job {
        let t = Task {
            name: task.into(),
            resources: Resources { cpu, memory: 0, gpu: 0 },
            flops,
            inputs,
            deps: vec![],
            output_bytes: 0,
        };
        Job { name: name.into(), arrival_us, tasks: vec![t] }
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() <= 1e-9 * b.abs().max(1.0))
    }

    #[test]
    fn kinds_and_signatures_follow_the_work_and_the_requests() {
        assert_eq!((kind("map3"), kind("reduce"), kind("solve12"), kind("7")), ("map", "reduce", "solve", "7"));
        let t = |name: &str, cpu: f64, flops: f64| Task {
            name: name.into(),
            resources: Resources { cpu, memory: 0, gpu: 0 },
            flops,
            inputs: vec![],
            deps: vec![],
            output_bytes: 0,
        };
        assert_eq!(
            signature(&t("map0", 4.0, 1e9)),
            signature(&t("map7", 4.0, 5e9)),
            "the same kind and requests: the same work"
        );
        assert_ne!(signature(&t("map0", 4.0, 1e9)), signature(&t("map0", 2.0, 1e9)));
        assert_ne!(signature(&t("map0", 4.0, 1e9)), signature(&t("solve0", 4.0, 1e9)));
    }

    /// Three jobs one after another, each task placed by script, and every candidate's measured
    /// estimates checked against values worked out by hand from what the workers reported.
    #[test]
    fn the_estimator_fed_by_the_simulation_gives_the_hand_computed_estimates() {
        // A (512 MiB) and B (256 MiB) live on node 1, C (128 MiB) on node 0, all in fast memory.
        let workload = Workload {
            objects: vec![
                DataObject { name: "A".into(), bytes: 512 * MIB, home: 1 },
                DataObject { name: "B".into(), bytes: 256 * MIB, home: 1 },
                DataObject { name: "C".into(), bytes: 128 * MIB, home: 0 },
            ],
            jobs: vec![
                job("j1", 0, "map0", 4.0, 2e9, vec![0]),
                job("j2", 2_000_000, "map1", 4.0, 4e9, vec![1, 2]),
                job("j3", 10_000_000, "solve0", 2.0, 3e9, vec![1]),
            ],
        };
        let mut p = Scripted { script: vec![0, 2, 1], seen: Vec::new() };
        let r = simulate_with(&three_nodes(), &workload, &mut p, 0, EstimateMode::Measured).unwrap();
        assert_eq!(r.tasks.iter().map(|t| t.node).collect::<Vec<_>>(), vec![0, 2, 1]);
        let s = &p.seen;

        // Decision 0: nothing measured. Node 1 holds A (nothing to fetch); elsewhere A has no
        // estimate; no compute estimate anywhere.
        assert_eq!(s[0], vec![(None, None), (Some(0.0), None), (None, None)]);

        // j1 on node 0 fetched A from node 1 over the rack tier (1 ms + 0.5 s = 501 ms) and
        // computed 2e9 flops on 4 × 1e9 (500 ms). Reported: run 500 ms of `map`/4 cores with
        // 2e9 flops; fetch 1 object, 512 MiB, 501 ms, 1 → 0, same rack. One sample cannot
        // separate latency from throughput: L = 0, R = 501 ms / 512 MiB.
        assert_eq!((r.tasks[0].fetch_us, r.tasks[0].compute_us), (501_000, 500_000));
        let rate = 501.0 / (512 * MIB) as f64;
        // Decision 1 (map1, 4e9 flops, reads B and C):
        // * node 0: B over the measured 1 → 0 (256 MiB × R = 250.5 ms), C resident; compute: its
        //   own ms per flop for the signature × this map's flops, 4e9 × 500 ms / 2e9 = 1000 ms
        //   (this map does twice the work);
        // * node 1: B resident; C over 0 → 1, never measured: the same-rack mean, which is
        //   1 → 0's (128 MiB × R = 125.25 ms); compute: the mean over the workers that ran the
        //   signature (node 0's 500 ms);
        // * node 2: B over 1 → 2 and C over 0 → 2, other-rack pairs, none measured in that
        //   class: the cluster's mean (250.5 + 125.25 ms); compute 500 ms likewise.
        assert!(
            close(s[1][0].0, 256.0 * MIB as f64 * rate) && close(s[1][0].0, 250.5) && close(s[1][0].1, 1000.0),
            "{:?}",
            s[1]
        );
        assert!(close(s[1][1].0, 125.25) && close(s[1][1].1, 500.0), "{:?}", s[1]);
        assert!(close(s[1][2].0, 375.75) && close(s[1][2].1, 500.0), "{:?}", s[1]);

        // j2 on node 2 (rack 1) fetched B from node 1 (2 ms + 0.5 s) and C from node 0 (2 ms +
        // 0.25 s) across racks: 754 ms, 384 MiB, 2 objects, credited to node 1 (most bytes);
        // computed 4e9 on 4 × 1e9: 1000 ms.
        assert_eq!((r.tasks[1].fetch_us, r.tasks[1].compute_us), (754_000, 1_000_000));
        // Decision 2 (solve, 2 cores, 3e9 flops, reads B, which nodes 1 and 2 hold):
        // * node 0: B from 1 (measured, 250.5 ms) or from 2 (2 → 0 never measured: the
        //   other-rack mean, 1 → 2's 754 ms / 384 MiB × 256 MiB = 502.67 ms): the least, 250.5;
        //   compute: a new signature, so its work (3e9 flops over 2 cores) × node 0's ms per unit
        //   of work (500 ms for 2e9 flops over 4 cores) = 1.5e9 × 500 / 5e8 = 1500 ms, what the
        //   engine charges (per flop alone it was 750 ms: the 4-core map's speed read as a core's);
        // * node 1: B resident; compute: it never ran a task with flops, so 1.5e9 × the mean of
        //   the workers' ms per unit (500 / 5e8 and 1000 / 1e9) = 1500 ms;
        // * node 2: B resident (fast memory); 1.5e9 × its own 1000 / 1e9 = 1500 ms.
        assert!(close(s[2][0].0, 250.5) && close(s[2][0].1, 1500.0), "{:?}", s[2]);
        assert!(close(s[2][1].0, 0.0) && close(s[2][1].1, 1500.0), "{:?}", s[2]);
        assert!(close(s[2][2].0, 0.0) && close(s[2][2].1, 1500.0), "{:?}", s[2]);
        assert_eq!(r.tasks[2].compute_us, 1_500_000);

        // The mode changes what placers see, not what the engine charges.
        let mut again = Scripted { script: vec![0, 2, 1], seen: Vec::new() };
        let exact = simulate_with(&three_nodes(), &workload, &mut again, 0, EstimateMode::Exact).unwrap();
        assert_eq!(exact.tasks, r.tasks);
        assert_eq!(again.seen[0][0], (Some(501.0), Some(500.0)), "exact: what the engine will charge");
    }

    /// A pair never measured takes the mean of its rack class, then the cluster's; with nothing
    /// measured at all there is no estimate (`estimates.rs`).
    #[test]
    fn unknown_pairs_fall_back_as_documented() {
        // Nodes 0, 1 in rack 0; 2, 3 in rack 1.
        let mut m = Measured::new((0..4).map(crate::config::worker_id).collect(), vec![0, 0, 1, 1]);
        let one = [1usize];
        assert_eq!(m.fetch_ms(0, [(1000, &one[..], false)].into_iter()), None, "nothing measured");
        assert_eq!(m.fetch_ms(0, [(1000, &one[..], true)].into_iter()), Some(0.0), "resident: nothing to fetch");
        assert_eq!(m.fetch_ms(0, std::iter::empty()), Some(0.0), "no inputs");
        // 1 → 0 (same rack) measured at 10 ms per 1000 B; no other-rack pair yet: every pair,
        // of either relation, takes it (the cluster's mean).
        m.observe(0, (7, 7), Some(1e9), 1_000, Some(FetchSample { holder: 1, objects: 1, bytes: 1000, us: 10_000 }));
        assert!(close(m.fetch_ms(0, [(1000, &one[..], false)].into_iter()), 10.0));
        let two = [2usize];
        assert!(close(m.fetch_ms(3, [(2000, &two[..], false)].into_iter()), 20.0), "same rack (2 → 3): the class mean");
        assert!(
            close(m.fetch_ms(0, [(1000, &two[..], false)].into_iter()), 10.0),
            "no other-rack pair: the cluster's mean"
        );
        // 2 → 1 (across racks) at 40 ms per 1000 B: other-rack pairs now take that class's mean,
        // same-rack pairs keep theirs.
        m.observe(1, (7, 7), Some(1e9), 1_000, Some(FetchSample { holder: 2, objects: 1, bytes: 1000, us: 40_000 }));
        assert!(close(m.fetch_ms(0, [(1000, &two[..], false)].into_iter()), 40.0), "other rack: the class mean");
        assert!(close(m.fetch_ms(3, [(1000, &[2usize][..], false)].into_iter()), 10.0), "same rack: the class mean");
        // Of several holders, the least estimate; an input with a holder on the node itself is
        // resident only if the caller says so (the node's own copy is skipped as a source).
        assert!(close(m.fetch_ms(0, [(1000, &[1usize, 2][..], false)].into_iter()), 10.0));
        assert!(close(m.fetch_ms(0, [(1000, &[0usize, 2][..], false)].into_iter()), 40.0));
        // A fetch credited to the node itself is no sample (a read of its own memory).
        let before = m.estimates.revision();
        m.observe(3, (8, 8), Some(1e9), 1_000, Some(FetchSample { holder: 3, objects: 1, bytes: 1000, us: 5_000 }));
        assert_eq!(m.estimates.revision(), before + 1, "only the run was recorded");
        // Run times are recorded in whole milliseconds, as workers report them.
        assert!(close(m.compute_ms(3, 8, 8, Some(1e9)), 1.0));
        m.observe(3, (9, 9), Some(1e9), 1_499, None);
        assert!(close(m.compute_ms(3, 9, 9, Some(0.0)), 1.0), "1.499 ms reported as 1 ms");
    }

    #[test]
    fn fetch_samples_are_credited_to_the_holder_of_most_bytes() {
        let mut t = FetchTally::default();
        assert_eq!(FetchTally::default().sample(), None, "nothing fetched: no sample");
        t.add(4, 100, 1_000);
        t.add(2, 300, 2_000);
        t.add(4, 250, 3_000);
        assert_eq!(t.sample(), Some(FetchSample { holder: 4, objects: 3, bytes: 650, us: 6_000 }));
        let mut t = FetchTally::default();
        t.add(5, 100, 1);
        t.add(1, 100, 1);
        assert_eq!(t.sample().map(|s| s.holder), Some(5), "ties: the first met");
    }

    /// Measured mode repeats exactly, and its estimates differ from the exact ones.
    #[test]
    fn measured_runs_repeat() {
        let mut config = SimConfig::new(16, Mix::Mixed, 3);
        config.workload.jobs = 60;
        let w = Workload::generate(&config).unwrap();
        let run = |mode| {
            let mut p = Recording { inner: heuristic("fastest", 3).unwrap(), seen: Vec::new() };
            let r = simulate_with(&config, &w, &mut p, 0, mode).unwrap();
            (r, p.seen)
        };
        let (a, seen_a) = run(EstimateMode::Measured);
        let (b, seen_b) = run(EstimateMode::Measured);
        assert_eq!(a, b);
        assert_eq!(seen_a, seen_b);
        let (exact, seen_exact) = run(EstimateMode::Exact);
        assert_eq!(exact.tasks.len(), a.tasks.len());
        assert_ne!(seen_a, seen_exact, "measured estimates are not the exact ones");
        // Estimates appear once the first tasks have reported: by the last decisions every
        // candidate has a compute estimate.
        assert!(seen_a.first().unwrap().iter().all(|c| c.1.is_none()), "nothing measured before the first task ends");
        assert!(seen_a.last().unwrap().iter().all(|c| c.1.is_some()));
    }
}
