//! What is simulated: the cluster (node classes, racks, memory tiers) and the workload mix.
//!
//! Every default has a comment saying where the number comes from; they describe a plausible
//! mid-size cluster, not a measured one, and the benchmark prints them so a reader can judge.

use plexus_proto::{Resources, WorkerId};

use crate::SimError;
use crate::hidden::{Affinity, Drift, Hidden, Interference};

pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// One latency/bandwidth tier: moving `bytes` costs `latency_us + bytes / bytes_per_s`.
#[derive(Clone, Debug, PartialEq)]
pub struct Tier {
    pub latency_us: u64,
    pub bytes_per_s: f64,
}

impl Tier {
    /// Microseconds to move `bytes` over this tier, rounded up.
    pub fn transfer_us(&self, bytes: u64) -> u64 {
        self.latency_us + (bytes as f64 * 1e6 / self.bytes_per_s).ceil() as u64
    }
}

/// Where an input comes from, relative to the node that needs it. An object already in the
/// node's fast memory costs nothing; the three tiers below are for everything else.
#[derive(Clone, Debug, PartialEq)]
pub struct Tiers {
    /// The node's own slow memory (its share of the pooled memory: SCM/NVM/disk), where an
    /// object's durable home copy lives.
    pub local: Tier,
    /// Another node in the same rack (fast or slow memory alike: the network is the limit).
    pub rack: Tier,
    /// A node in another rack, across the oversubscribed spine.
    pub remote: Tier,
}

impl Default for Tiers {
    fn default() -> Self {
        Tiers {
            // NVMe-class local pool: ~10 µs access, ~8 GiB/s sequential read.
            local: Tier { latency_us: 10, bytes_per_s: 8.0 * GIB as f64 },
            // 25 GbE top-of-rack at ~80 % goodput: ~2.5 GB/s, ~100 µs per request round trip.
            rack: Tier { latency_us: 100, bytes_per_s: 2.5e9 },
            // A 4:1 oversubscribed spine leaves a quarter of that per flow, and a longer path.
            remote: Tier { latency_us: 1_000, bytes_per_s: 0.625e9 },
        }
    }
}

/// One kind of node. A cluster repeats its classes in proportion to their weights.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeClass {
    pub name: String,
    pub weight: u32,
    pub cores: f64,
    /// Task memory (a placement resource), bytes.
    pub memory: u64,
    pub gpus: u32,
    /// Floating-point operations per second of one core.
    pub core_flops: f64,
    /// Floating-point operations per second of one GPU.
    pub gpu_flops: f64,
    /// Fast memory that holds cached objects, bytes.
    pub cache_bytes: u64,
}

impl NodeClass {
    /// The default heterogeneous mix, repeated every four nodes: one GPU node, one large CPU
    /// node with a faster core and more fast memory, two standard nodes.
    pub fn defaults() -> Vec<NodeClass> {
        vec![
            // A 4-GPU box; one GPU is worth ~50 of its cores on dense compute.
            NodeClass {
                name: "gpu".into(),
                weight: 1,
                cores: 32.0,
                memory: 256 * GIB,
                gpus: 4,
                core_flops: 20e9,
                gpu_flops: 1e12,
                cache_bytes: 48 * GIB,
            },
            NodeClass {
                name: "fat".into(),
                weight: 1,
                cores: 64.0,
                memory: 512 * GIB,
                gpus: 0,
                core_flops: 25e9,
                gpu_flops: 0.0,
                cache_bytes: 96 * GIB,
            },
            NodeClass {
                name: "std".into(),
                weight: 2,
                cores: 32.0,
                memory: 128 * GIB,
                gpus: 0,
                core_flops: 20e9,
                gpu_flops: 0.0,
                cache_bytes: 32 * GIB,
            },
        ]
    }
}

/// The simulated cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterConfig {
    pub nodes: usize,
    /// Nodes are split into this many racks of consecutive indices.
    pub racks: usize,
    pub classes: Vec<NodeClass>,
    pub tiers: Tiers,
    /// How fast evicted bytes are pushed out of fast memory (the seed's eviction bandwidth):
    /// a task that evicts `e` bytes spends `e / eviction_bytes_per_s` doing so.
    pub eviction_bytes_per_s: f64,
}

impl ClusterConfig {
    /// `nodes` nodes of the default classes, eight to a rack.
    pub fn standard(nodes: usize) -> Self {
        ClusterConfig {
            nodes,
            // Eight nodes a rack: 16 nodes are two racks, 64 are eight.
            racks: nodes.div_ceil(8).max(1),
            classes: NodeClass::defaults(),
            tiers: Tiers::default(),
            // Writing back to the slow pool at half its read speed.
            eviction_bytes_per_s: 4.0 * GIB as f64,
        }
    }

    /// The nodes, in index (and worker-id) order.
    pub fn node_specs(&self) -> Result<Vec<NodeSpec>, SimError> {
        if self.nodes == 0 || self.racks == 0 || self.racks > self.nodes {
            return Err(SimError::Config(format!("{} nodes in {} racks", self.nodes, self.racks)));
        }
        if self.classes.is_empty() || self.classes.iter().any(|c| c.weight == 0) {
            return Err(SimError::Config("node classes must be non-empty with positive weights".into()));
        }
        if let Some(c) = self.classes.iter().find(|c| !positive(c.core_flops) || (c.gpus > 0 && !positive(c.gpu_flops)))
        {
            return Err(SimError::Config(format!("node class {:?}: engine speeds must be positive", c.name)));
        }
        let tiers = [&self.tiers.local, &self.tiers.rack, &self.tiers.remote];
        if !tiers.iter().all(|t| positive(t.bytes_per_s)) || !positive(self.eviction_bytes_per_s) {
            return Err(SimError::Config("bandwidths must be positive".into()));
        }
        // Interleave classes by weight ([1, 1, 2] → a b c c) so every rack gets the same mix.
        let mut pattern = Vec::new();
        let max_w = self.classes.iter().map(|c| c.weight).max().unwrap_or(1);
        for round in 0..max_w {
            for (i, c) in self.classes.iter().enumerate() {
                if c.weight > round {
                    pattern.push(i);
                }
            }
        }
        Ok((0..self.nodes)
            .map(|i| {
                let class = pattern[i % pattern.len()];
                let c = &self.classes[class];
                NodeSpec {
                    index: i,
                    worker: worker_id(i),
                    rack: i * self.racks / self.nodes,
                    class,
                    capacity: Resources { cpu: c.cores, memory: c.memory, gpu: c.gpus },
                    core_flops: c.core_flops,
                    gpu_flops: c.gpu_flops,
                    cache_bytes: c.cache_bytes,
                }
            })
            .collect())
    }
}

/// Greater than zero (so not NaN).
pub(crate) fn positive(x: f64) -> bool {
    x > 0.0
}

/// The deterministic worker id of node `index`; ids sort in index order.
pub fn worker_id(index: usize) -> WorkerId {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(b"sim\0");
    b[8..].copy_from_slice(&(index as u64).to_be_bytes());
    WorkerId::from_bytes(b)
}

/// One node of a configured cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpec {
    pub index: usize,
    pub worker: WorkerId,
    pub rack: usize,
    /// Index into [`ClusterConfig::classes`].
    pub class: usize,
    pub capacity: Resources,
    pub core_flops: f64,
    pub gpu_flops: f64,
    pub cache_bytes: u64,
}

/// The workload presets of the benchmark: three where a node's measured speed says what a task
/// costs there, and four where it does not ([`Mix::BLIND`], issue 34 item 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// Nine jobs in ten are data-heavy: big, shared, skewed-popularity inputs.
    LocalityHeavy,
    /// Nine jobs in ten are compute-heavy: small inputs, many flops, some on GPUs.
    ComputeHeavy,
    /// Half and half.
    Mixed,
    /// Compute-heavy, half the CPU tasks memory-bandwidth bound (`stream`), contending on a node
    /// ([`Interference`]).
    Interference,
    /// Mixed, on nodes that slow down three times for 30-second phases, a quarter of them at a
    /// time ([`Drift`]).
    Drifting,
    /// Mixed, on node classes fast for one kind of task and slow for another ([`Affinity`]).
    Affinity,
    /// Locality-heavy, fetches from one node sharing its link (`Hidden::shared_links`).
    Congested,
}

impl Mix {
    pub const ALL: [Mix; 7] = [
        Mix::LocalityHeavy,
        Mix::ComputeHeavy,
        Mix::Mixed,
        Mix::Interference,
        Mix::Drifting,
        Mix::Affinity,
        Mix::Congested,
    ];
    /// The three original workloads: run time follows the node's engines and where data is.
    pub const ORIGINAL: [Mix; 3] = [Mix::LocalityHeavy, Mix::ComputeHeavy, Mix::Mixed];
    /// The workloads with effects per-worker speeds do not show (`crate::hidden`).
    pub const BLIND: [Mix; 4] = [Mix::Interference, Mix::Drifting, Mix::Affinity, Mix::Congested];

    pub fn name(self) -> &'static str {
        match self {
            Mix::LocalityHeavy => "locality-heavy",
            Mix::ComputeHeavy => "compute-heavy",
            Mix::Mixed => "mixed",
            Mix::Interference => "interference",
            Mix::Drifting => "drifting",
            Mix::Affinity => "affinity",
            Mix::Congested => "congested",
        }
    }

    /// The original workload a blind one draws its jobs like.
    pub fn base(self) -> Mix {
        match self {
            Mix::Interference => Mix::ComputeHeavy,
            Mix::Drifting | Mix::Affinity => Mix::Mixed,
            Mix::Congested => Mix::LocalityHeavy,
            m => m,
        }
    }

    /// The hidden effects of this workload's cluster (none for the original three); `seed`
    /// draws the drift phases.
    pub fn hidden(self, seed: u64) -> Hidden {
        match self {
            // Half a node's cores of memory-bound work saturate its memory bandwidth (a
            // STREAM-like kernel reaches peak bandwidth on about half the cores of a socket);
            // other work feels a quarter of the excess (its misses queue behind).
            Mix::Interference => Hidden {
                interference: Some(Interference { kinds: vec!["stream".into()], stream_share: 0.5, neighbour: 0.25 }),
                ..Hidden::default()
            },
            // 30 s phases (several task lengths, so a measured mean lags them; a run of ~2 min of
            // arrivals sees four or more), a quarter of the nodes three times slower in each (a
            // noisy co-tenant, a throttled CPU).
            Mix::Drifting => Hidden {
                drift: Some(Drift { period_us: 30_000_000, share: 0.25, slow: 3.0, seed }),
                ..Hidden::default()
            },
            // The large nodes' wide vector units make the solver twice as fast there, while their
            // slower memory per core makes scans (maps) take 2.5 times as long; the GPU nodes'
            // fast local NVMe makes maps 1.5 times as fast.
            Mix::Affinity => Hidden {
                affinity: vec![
                    Affinity { class: "fat".into(), kind: "solve".into(), speed: 2.0 },
                    Affinity { class: "fat".into(), kind: "map".into(), speed: 0.4 },
                    Affinity { class: "gpu".into(), kind: "map".into(), speed: 1.5 },
                ],
                ..Hidden::default()
            },
            Mix::Congested => Hidden { shared_links: true, ..Hidden::default() },
            _ => Hidden::default(),
        }
    }
}

/// How [`crate::Workload::generate`] draws jobs. Ranges are inclusive `(low, high)`; byte sizes
/// are drawn log-uniformly, everything else uniformly. Work is given in seconds on the
/// reference engines and turned into flops, so the same job is faster on a faster node.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadConfig {
    pub jobs: usize,
    /// Offered load: the arrival rate is set so that the jobs' nominal work (compute on the
    /// reference engines plus fetching all inputs over the rack tier, times the cores or GPUs
    /// held) fills this share of the cluster's cores or of its GPUs, whichever is busier.
    /// Placement that fetches more than nominal pushes the real load up, less pulls it down.
    pub load: f64,
    /// Share of jobs that are data-heavy; the rest are compute-heavy.
    pub data_share: f64,

    /// Hot datasets shared across jobs; each is split into partitions homed on random nodes.
    pub datasets: usize,
    pub partitions: (usize, usize),
    pub partition_bytes: (u64, u64),
    /// Zipf exponent of dataset popularity (0 = uniform).
    pub popularity_skew: f64,

    /// A data-heavy job: `map_tasks` tasks each reading one partition (sometimes two) of one
    /// dataset, then one reduce task reading every map output.
    pub map_tasks: (usize, usize),
    /// Probability that a map task also reads the next partition (inputs shared inside a job).
    pub second_partition: f64,
    pub map_cpu: (u32, u32),
    pub map_core_seconds: (f64, f64),
    pub map_output_bytes: (u64, u64),
    pub reduce_core_seconds: (f64, f64),

    /// A compute-heavy job: a small input, then a chain or fan-out of heavy tasks.
    pub compute_tasks: (usize, usize),
    pub compute_cpu: (u32, u32),
    pub compute_core_seconds: (f64, f64),
    pub compute_input_bytes: (u64, u64),
    pub compute_output_bytes: (u64, u64),
    /// Share of compute-heavy tasks that need a GPU (one GPU, one core).
    pub gpu_share: f64,
    /// Share of the compute-heavy CPU tasks that are memory-bandwidth bound (named `stream…`
    /// rather than `solve…`; what that costs is `Hidden::interference`'s).
    pub stream_share: f64,
    pub gpu_seconds: (f64, f64),

    /// Task memory request per requested core.
    pub memory_per_core: u64,
    /// The engines that "seconds" above refer to.
    pub reference_core_flops: f64,
    pub reference_gpu_flops: f64,
}

impl WorkloadConfig {
    /// The preset for `mix` on a cluster of `nodes` nodes: job and dataset counts grow with the
    /// cluster so that load, cache pressure and run length per node stay comparable.
    pub fn preset(mix: Mix, nodes: usize) -> Self {
        let data_share = match mix.base() {
            Mix::LocalityHeavy => 0.9,
            Mix::ComputeHeavy => 0.1,
            _ => 0.5,
        };
        WorkloadConfig {
            // Sixteen jobs a node: long enough for caches to warm and queues to form, short
            // enough that a learned placer's inference keeps the benchmark within minutes.
            jobs: 24 * nodes,
            // Busy but not saturated at nominal: bad placement tips it over.
            load: 0.85,
            data_share,
            // Four datasets a node of ~8 partitions of ~1.35 GiB on average (log-uniform
            // 256 MiB–4 GiB): ~43 GiB homed on each node, about three quarters of the cluster's
            // fast memory. The skewed popularity keeps a hot subset, but a 32 GiB node cannot
            // hold all it is home to, so fast memory fills and eviction matters (seed 001's
            // eviction penalty), and a placer that scatters copies thrashes.
            datasets: nodes * 4,
            partitions: (4, 12),
            partition_bytes: (256 * MIB, 4 * GIB),
            popularity_skew: 1.1,
            map_tasks: (2, 8),
            second_partition: 0.25,
            map_cpu: (2, 8),
            map_core_seconds: (2.0, 12.0),
            map_output_bytes: (32 * MIB, 256 * MIB),
            reduce_core_seconds: (1.0, 4.0),
            compute_tasks: (1, 6),
            compute_cpu: (4, 16),
            compute_core_seconds: (20.0, 120.0),
            compute_input_bytes: (MIB, 16 * MIB),
            compute_output_bytes: (MIB, 16 * MIB),
            gpu_share: 0.3,
            stream_share: if mix == Mix::Interference { 0.5 } else { 0.0 },
            gpu_seconds: (2.0, 12.0),
            memory_per_core: 2 * GIB,
            reference_core_flops: 20e9,
            reference_gpu_flops: 1e12,
        }
    }
}

/// Everything one simulation needs besides the placer.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    pub cluster: ClusterConfig,
    pub workload: WorkloadConfig,
    /// Seeds workload generation (the simulation itself draws no random numbers).
    pub seed: u64,
    /// Completed tasks per learning-curve window.
    pub window: usize,
    /// Effects on run time that per-worker speeds do not show (none by default).
    pub hidden: Hidden,
}

impl SimConfig {
    /// The benchmark's configuration: `nodes` standard nodes running the `mix` preset.
    pub fn new(nodes: usize, mix: Mix, seed: u64) -> Self {
        SimConfig {
            cluster: ClusterConfig::standard(nodes),
            workload: WorkloadConfig::preset(mix, nodes),
            seed,
            window: 250,
            hidden: mix.hidden(seed),
        }
    }

    /// The same configuration with another seed (a warm-up workload, say).
    pub fn with_seed(&self, seed: u64) -> Self {
        SimConfig { seed, ..self.clone() }
    }
}
