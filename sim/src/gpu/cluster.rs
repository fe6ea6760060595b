//! Simulated GPU clusters: 8-GPU nodes (DGX-1-like NVLink hybrid cube-mesh, or PCIe only)
//! grouped into racks, each pair of GPUs at a link level with a model-synchronisation cost, and
//! some GPUs already running tasks, drawn from a seed.
//!
//! This is a dense msc matrix of its own, independent of the scheduler's topology tree: the
//! benchmark feeds the same problems to every search, and the simulator needs no parser.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use plexus_scheduler::gpu::TaskVector;
use plexus_scheduler::gpu::objective::{GpuCandidate, Problem, Weights};

use super::truth::Kind;
use crate::config::GIB;

/// How two GPUs are connected, best first (the levels of `nvidia-smi topo -m`, then the network).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Link {
    /// The same GPU.
    Same,
    /// Two NVLink links (NV2).
    Nv2,
    /// One NVLink link (NV1).
    Nv1,
    /// One PCIe switch (PIX).
    Pix,
    /// One socket, through its host bridges (NODE).
    Node,
    /// Across the sockets' interconnect (SYS).
    Sys,
    /// Another node of the same rack (the node's NIC and the top-of-rack switch).
    Rack,
    /// Another rack (through the oversubscribed spine).
    Cluster,
}

/// The cost per byte of each link level, relative to NV2. They follow the inverse of each
/// level's bandwidth on a V100-generation machine: NV2 ≈ 50 GB/s, NV1 ≈ 25, a PCIe 3 switch
/// ≈ 12, through the host bridge ≈ 10, across sockets ≈ 6, a 100 Gb/s NIC shared by the node's
/// GPUs ≈ 4, a 3:1 oversubscribed spine less still. Illustrative values of the right order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MscLevels {
    pub nv2: f64,
    pub nv1: f64,
    pub pix: f64,
    pub node: f64,
    pub sys: f64,
    pub rack: f64,
    pub cluster: f64,
}

impl Default for MscLevels {
    fn default() -> MscLevels {
        MscLevels { nv2: 1.0, nv1: 2.0, pix: 4.0, node: 5.0, sys: 8.0, rack: 12.0, cluster: 30.0 }
    }
}

impl MscLevels {
    pub fn cost(&self, link: Link) -> f64 {
        match link {
            Link::Same => 0.0,
            Link::Nv2 => self.nv2,
            Link::Nv1 => self.nv1,
            Link::Pix => self.pix,
            Link::Node => self.node,
            Link::Sys => self.sys,
            Link::Rack => self.rack,
            Link::Cluster => self.cluster,
        }
    }
}

/// The two kinds of 8-GPU node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// DGX-1 with V100s: NVLink hybrid cube-mesh (two fully connected quads, GPU i linked to
    /// i + 4), pairs without NVLink across the sockets (SYS).
    Dgx1,
    /// Two sockets, each with two PCIe switches of two GPUs: PIX, NODE, SYS.
    Pcie,
}

/// `nvidia-smi topo -m` of a DGX-1 (V100).
const DGX1: [[Link; 8]; 8] = {
    use Link::{Nv1 as A, Nv2 as B, Same as X, Sys as S};
    [
        [X, A, A, B, B, S, S, S],
        [A, X, B, A, S, B, S, S],
        [A, B, X, B, S, S, A, S],
        [B, A, B, X, S, S, S, A],
        [B, S, S, S, X, A, A, B],
        [S, B, S, S, A, X, B, A],
        [S, S, A, S, A, B, X, B],
        [S, S, S, A, B, A, B, X],
    ]
};

impl NodeKind {
    /// The link between GPUs a and b (0..8) of one node.
    pub fn link(self, a: usize, b: usize) -> Link {
        match self {
            NodeKind::Dgx1 => DGX1[a][b],
            NodeKind::Pcie if a == b => Link::Same,
            NodeKind::Pcie if a / 2 == b / 2 => Link::Pix,
            NodeKind::Pcie if a / 4 == b / 4 => Link::Node,
            NodeKind::Pcie => Link::Sys,
        }
    }
}

/// GPUs per node.
pub const NODE_GPUS: usize = 8;

/// A simulated GPU cluster to draw.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuClusterConfig {
    /// The nodes, 8 GPUs each, in order; racks take consecutive nodes.
    pub nodes: Vec<NodeKind>,
    pub nodes_per_rack: usize,
    pub device_memory: u64,
    pub levels: MscLevels,
    /// Share of GPUs running a task already.
    pub busy: f64,
    /// Share of busy GPUs running a second task (when it fits).
    pub second: f64,
    /// Share of resident tasks that are inference services (the rest single-GPU trainers).
    pub services: f64,
    /// Share of busy GPUs whose tasks hold them exclusively (never candidates).
    pub exclusive: f64,
    /// How many members of one sharing gang a GPU may take.
    pub members_per_gpu: usize,
}

impl GpuClusterConfig {
    /// `gpus` GPUs (a multiple of 8) in 8-GPU nodes, racks of 4 nodes; every third node PCIe
    /// only, the rest DGX-1; about half the GPUs busy. The benchmark's 8, 32 and 128.
    pub fn new(gpus: usize) -> GpuClusterConfig {
        let nodes = gpus.div_ceil(NODE_GPUS).max(1);
        GpuClusterConfig {
            nodes: (0..nodes).map(|k| if k % 3 == 2 { NodeKind::Pcie } else { NodeKind::Dgx1 }).collect(),
            nodes_per_rack: 4,
            device_memory: 32 * GIB,
            levels: MscLevels::default(),
            busy: 0.5,
            second: 0.2,
            services: 0.5,
            exclusive: 0.2,
            members_per_gpu: 2,
        }
    }
}

/// One GPU of a simulated cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct SimGpu {
    pub node: usize,
    pub rack: usize,
    /// Its index in its node, 0..8.
    pub local: usize,
    pub device_memory: u64,
    /// The tasks already on it.
    pub resident: Vec<TaskVector>,
    /// Whether its tasks hold it exclusively.
    pub exclusive: bool,
}

/// A drawn GPU cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuCluster {
    pub config: GpuClusterConfig,
    pub gpus: Vec<SimGpu>,
}

impl GpuCluster {
    /// Draws the residents from `seed`; the topology is the configuration's.
    pub fn generate(config: &GpuClusterConfig, seed: u64) -> GpuCluster {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut gpus = Vec::with_capacity(config.nodes.len() * NODE_GPUS);
        for node in 0..config.nodes.len() {
            for local in 0..NODE_GPUS {
                let mut gpu = SimGpu {
                    node,
                    rack: node / config.nodes_per_rack.max(1),
                    local,
                    device_memory: config.device_memory,
                    resident: Vec::new(),
                    exclusive: false,
                };
                if rng.random::<f64>() < config.busy {
                    let tasks = if rng.random::<f64>() < config.second { 2 } else { 1 };
                    for _ in 0..tasks {
                        let pool: &[Kind] =
                            if rng.random::<f64>() < config.services { &Kind::SERVICES } else { &Kind::TRAINING };
                        let t = pool[rng.random_range(0..pool.len())].task(config.device_memory);
                        if gpu.free_memory() >= t.gpu_memory {
                            gpu.resident.push(t);
                        }
                    }
                    gpu.exclusive = rng.random::<f64>() < config.exclusive;
                }
                gpus.push(gpu);
            }
        }
        GpuCluster { config: config.clone(), gpus }
    }

    pub fn link(&self, a: usize, b: usize) -> Link {
        let (ga, gb) = (&self.gpus[a], &self.gpus[b]);
        if ga.node == gb.node {
            self.config.nodes[ga.node].link(ga.local, gb.local)
        } else if ga.rack == gb.rack {
            Link::Rack
        } else {
            Link::Cluster
        }
    }

    pub fn msc(&self, a: usize, b: usize) -> f64 {
        self.config.levels.cost(self.link(a, b))
    }

    /// The candidates for a gang of `members`: when they share GPUs (`gpu_share`), every GPU
    /// not held exclusively, taking up to `members_per_gpu` of them in its free memory; else
    /// only idle GPUs, one member each. Returns the problem and each candidate's GPU index.
    pub fn problem(
        &self,
        members: Vec<TaskVector>,
        share: bool,
        weights: Weights,
    ) -> Result<(Problem, Vec<usize>), plexus_scheduler::Error> {
        let ids: Vec<usize> = (0..self.gpus.len())
            .filter(|&g| !self.gpus[g].exclusive && (share || self.gpus[g].resident.is_empty()))
            .collect();
        let candidates = ids
            .iter()
            .map(|&g| {
                let gpu = &self.gpus[g];
                GpuCandidate {
                    resident: gpu.resident.clone(),
                    free_memory: gpu.free_memory(),
                    slots: if share { self.config.members_per_gpu } else { 1 },
                }
            })
            .collect();
        let problem = Problem::new(members, candidates, |a, b| self.msc(ids[a], ids[b]), weights)?;
        Ok((problem, ids))
    }
}

impl SimGpu {
    pub fn free_memory(&self) -> u64 {
        self.device_memory.saturating_sub(self.resident.iter().map(|t| t.gpu_memory).sum())
    }
}

/// A data-parallel gang: `members` alike members of one training kind.
pub fn gang(kind: Kind, members: usize, device_memory: u64) -> Vec<TaskVector> {
    vec![kind.task(device_memory); members]
}
