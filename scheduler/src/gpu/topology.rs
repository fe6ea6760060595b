//! The cluster's GPU topology tree and the model-synchronisation cost `msc(i, j)` between any two
//! of its GPUs (issue 16 item 1; seed 002's communication term `C(M) = Σ msc_ij · muds_ij`).
//!
//! # The tree
//! As the seed draws it: GPU → link group → socket → node → rack → cluster.
//! - A **link group** is a set of one node's GPUs that are pairwise joined by NVLink or by PCIe
//!   switches only (`NV#`, `PIX`, `PXB`): a hybrid cube-mesh DGX-1 has two groups of four, an
//!   NVSwitch DGX A100 one group of eight, a PCIe box one group per switch. Groups are found
//!   greedily (each group grows from its lowest free device, best-linked candidates first, a
//!   candidate joining only when it is linked to every member), so they are cliques, not
//!   necessarily the largest ones. [`ClusterTopology::groups`] lists them, best-connected first
//!   within a node, for a topology-greedy search (NVIDIA's best-effort policy packs a gang into
//!   one).
//! - A **socket** is a NUMA node: the GPU's `NUMA Affinity` when the worker reported it, else the
//!   GPUs joined to it by a PCIe path that stays in one socket (`PIX` to `NODE`); a GPU with
//!   neither is a socket of its own. NVLink says nothing about sockets: an NVSwitch joins the
//!   GPUs of every socket, so there a link group spans sockets and the tree is not strictly
//!   nested. That is why msc within a node is the cost of the pair's own reported level (the
//!   exact edge), and the tree's upper levels (node, rack, cluster) give the rest.
//! - A **node** is a worker; its **rack** is its `rack` label (`--label rack=r1`). Workers
//!   without the label share one unnamed rack: a cluster that labels no racks is one rack.
//!
//! # msc
//! `msc(a, b)` for GPUs `a` and `b` of the cluster (dense indices, [`ClusterTopology::index_of`]
//! maps a worker's device to one): 0 for the same GPU; within a node, the cost of their link
//! level ([`MscCosts::level`]); else [`MscCosts::same_rack`] or [`MscCosts::cross_rack`].
//! A worker that reports GPUs but no links (nvidia-smi absent or unreadable, an old worker) has
//! every pair of its GPUs at `SYS`, the farthest in-node level: the conservative guess, so the
//! search never counts on a link it was not told of. A pair missing from a report that has
//! others is `SYS` for the same reason.
//!
//! The costs are configurable (`plexus-coordinator --msc nvlink=12,pix=12,...`); see
//! [`MscCosts`] for the defaults and the bandwidths they come from.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use plexus_proto::WorkerId;
use plexus_proto::topology::LinkLevel;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::hardware::Capacity;
pub use crate::hardware::NodeTopology;

/// The model-synchronisation cost of each level of the tree, in one unit: the cost of moving a
/// byte at 300 GB/s, so **cost = 300 GB/s ÷ the level's bandwidth per direction**. The defaults,
/// with the bandwidth each assumes:
///
/// | level | key | bandwidth | default |
/// | --- | --- | --- | --- |
/// | same GPU | — | device memory | 0 |
/// | NVLink, per bonded link (`NV#` costs `nvlink / #`) | `nvlink` | 25 GB/s (one NVLink 2–4 link); NV12 (A100) = 300 GB/s → 1, NV18 (H100) → 0.67, NV2 (DGX-1 V100) → 6 | 12 |
/// | PCIe switch (`PIX`, `PXB`) | `pix` | 25 GB/s (PCIe 4.0 x16 through a switch) | 12 |
/// | host bridge, same socket (`PHB`, `NODE`) | `phb` | 20 GB/s (peer traffic through the root complex) | 15 |
/// | across sockets (`SYS`) | `sys` | 10 GB/s (UPI/xGMI; peer access across sockets is often off and staged through host memory) | 30 |
/// | another node, same rack | `same-rack` | 6.25 GB/s (a 100 Gb/s NIC, 12.5 GB/s line rate, about half of it over TCP rails through host memory) | 48 |
/// | another rack | `cross-rack` | 2.1 GB/s (the same NIC behind a 3:1 oversubscribed spine) | 144 |
///
/// Costs must be finite, ≥ 0, and never decrease with distance: `nvlink ≤ pix ≤ phb ≤ sys ≤
/// same-rack ≤ cross-rack` ([`MscCosts::validate`]). One NVLink link counts at most a PCIe
/// switch's cost, so every NVLink pair is at least as close as a PCIe pair.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MscCosts {
    /// One bonded NVLink; `NV#` costs `nvlink / #`.
    pub nvlink: f64,
    /// `PIX` and `PXB`.
    pub pix: f64,
    /// `PHB` and `NODE`.
    pub phb: f64,
    /// `SYS` (and pairs a worker did not report).
    pub sys: f64,
    /// GPUs of two nodes in one rack.
    pub same_rack: f64,
    /// GPUs of two racks.
    pub cross_rack: f64,
}

impl Default for MscCosts {
    fn default() -> Self {
        MscCosts { nvlink: 12.0, pix: 12.0, phb: 15.0, sys: 30.0, same_rack: 48.0, cross_rack: 144.0 }
    }
}

impl MscCosts {
    /// The keys, from closest to farthest, as `--msc` names them.
    pub const KEYS: &'static [&'static str] = &["nvlink", "pix", "phb", "sys", "same-rack", "cross-rack"];

    fn values(&self) -> [f64; 6] {
        [self.nvlink, self.pix, self.phb, self.sys, self.same_rack, self.cross_rack]
    }

    fn slot(&mut self, key: &str) -> Option<&mut f64> {
        Some(match key {
            "nvlink" => &mut self.nvlink,
            "pix" => &mut self.pix,
            "phb" => &mut self.phb,
            "sys" => &mut self.sys,
            "same-rack" => &mut self.same_rack,
            "cross-rack" => &mut self.cross_rack,
            _ => return None,
        })
    }

    /// Finite, ≥ 0, and non-decreasing from `nvlink` to `cross-rack`.
    pub fn validate(&self) -> Result<(), Error> {
        let v = self.values();
        for (key, value) in Self::KEYS.iter().zip(v) {
            if !(value.is_finite() && value >= 0.0) {
                return Err(Error::NotACost { key, value: value.to_string() });
            }
        }
        for k in 1..v.len() {
            if v[k] < v[k - 1] {
                return Err(Error::MscDecreasing {
                    lower: Self::KEYS[k - 1],
                    lower_cost: v[k - 1],
                    higher: Self::KEYS[k],
                    higher_cost: v[k],
                });
            }
        }
        Ok(())
    }

    /// The defaults with the entries of `s` (`nvlink=1,pix=12,...`; any subset, in any order)
    /// in their place, validated.
    pub fn parse(s: &str) -> Result<MscCosts, Error> {
        let mut costs = MscCosts::default();
        for (name, v) in super::settings::parse_numbers(s, Self::KEYS)? {
            if let Some(slot) = costs.slot(name) {
                *slot = v;
            }
        }
        costs.validate()?;
        Ok(costs)
    }

    /// The cost of a link level within a node.
    pub fn level(&self, level: LinkLevel) -> f64 {
        match level {
            LinkLevel::SameGpu => 0.0,
            LinkLevel::NvLink(n) => self.nvlink / f64::from(n.max(1)),
            LinkLevel::Pix | LinkLevel::Pxb => self.pix,
            LinkLevel::Phb | LinkLevel::Node => self.phb,
            LinkLevel::Sys => self.sys,
        }
    }

    /// The cost of a distance in the tree.
    pub fn of(&self, d: Distance) -> f64 {
        match d {
            Distance::Link(level) => self.level(level),
            Distance::SameRack => self.same_rack,
            Distance::OtherRack => self.cross_rack,
        }
    }
}

impl FromStr for MscCosts {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MscCosts::parse(s)
    }
}

/// `nvlink=12,pix=12,phb=15,sys=30,same-rack=48,cross-rack=144`: what [`MscCosts::parse`] reads.
impl fmt::Display for MscCosts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (key, value)) in Self::KEYS.iter().zip(self.values()).enumerate() {
            write!(f, "{}{key}={value}", if i == 0 { "" } else { "," })?;
        }
        Ok(())
    }
}

/// How far apart two GPUs of the cluster are: where their paths in the tree meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Distance {
    /// One node: their link level (`SameGpu` for one GPU).
    Link(LinkLevel),
    /// Two nodes of one rack.
    SameRack,
    /// Two racks.
    OtherRack,
}

/// One GPU of the cluster and its path up the tree (all indices dense, into this topology).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuPlace {
    pub worker: WorkerId,
    /// Its device index on the worker (`nvidia-smi` numbering).
    pub device: u32,
    /// Its link group ([`ClusterTopology::groups`]).
    pub group: usize,
    /// Its socket (NUMA node), numbered across the cluster.
    pub socket: usize,
    /// Its node (worker), in worker id order.
    pub node: usize,
    /// Its rack ([`ClusterTopology::racks`]).
    pub rack: usize,
}

/// A link group: GPUs of one node pairwise joined by NVLink or PCIe switches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkGroup {
    pub node: usize,
    /// Dense GPU indices, in device order.
    pub gpus: Vec<usize>,
    /// The farthest level between two members (`SameGpu` for a group of one).
    pub worst: LinkLevel,
}

/// What the topology is built from: one worker's offered GPUs and what it reported.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeGpus {
    pub worker: WorkerId,
    /// Device indices.
    pub gpus: Vec<u32>,
    pub topology: NodeTopology,
}

#[derive(Clone, Debug)]
struct NodeEntry {
    /// Dense indices of its GPUs, in device order.
    gpus: Vec<usize>,
    /// `gpus.len()²`, row-major in the order of `gpus`.
    levels: Vec<LinkLevel>,
    links_reported: bool,
}

/// The cluster's GPUs, their tree, and msc between any two (see the module docs).
#[derive(Clone, Debug)]
pub struct ClusterTopology {
    costs: MscCosts,
    gpus: Vec<GpuPlace>,
    /// Each GPU's position within its node.
    slot: Vec<usize>,
    nodes: Vec<NodeEntry>,
    racks: Vec<String>,
    groups: Vec<LinkGroup>,
    index: BTreeMap<(WorkerId, u32), usize>,
}

/// A union-find over a node's GPUs, for its sockets.
fn find(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

impl ClusterTopology {
    /// Builds the tree. Workers are taken in worker id order (a repeated worker counts once, its
    /// first entry); a worker's devices in index order (repeats once); links naming a device the
    /// worker does not offer, or `X` between two devices, are ignored.
    pub fn new(nodes: impl IntoIterator<Item = NodeGpus>, costs: MscCosts) -> ClusterTopology {
        let mut by_worker: BTreeMap<WorkerId, NodeGpus> = BTreeMap::new();
        for n in nodes {
            by_worker.entry(n.worker).or_insert(n);
        }
        let mut t = ClusterTopology {
            costs,
            gpus: Vec::new(),
            slot: Vec::new(),
            nodes: Vec::new(),
            racks: Vec::new(),
            groups: Vec::new(),
            index: BTreeMap::new(),
        };
        let mut sockets = 0;
        for (node, (worker, n)) in by_worker.into_iter().enumerate() {
            let mut devices = n.gpus;
            devices.sort_unstable();
            devices.dedup();
            let k = devices.len();
            let rack_name = n.topology.rack().unwrap_or("").to_string();
            let rack = match t.racks.iter().position(|r| *r == rack_name) {
                Some(r) => r,
                None => {
                    t.racks.push(rack_name);
                    t.racks.len() - 1
                }
            };

            // The pairwise levels: SYS unless reported.
            let mut levels = vec![LinkLevel::Sys; k * k];
            for i in 0..k {
                levels[i * k + i] = LinkLevel::SameGpu;
            }
            let pos = |d: u32| devices.binary_search(&d).ok();
            for l in &n.topology.gpu_links {
                if let (Some(i), Some(j)) = (pos(l.a), pos(l.b))
                    && i != j
                    && l.level != LinkLevel::SameGpu
                {
                    levels[i * k + j] = l.level;
                    levels[j * k + i] = l.level;
                }
            }
            let numa: Vec<Option<u32>> = devices.iter().map(|d| n.topology.gpu_numa.get(d).copied()).collect();
            let socket = sockets_of(&numa, &levels, &mut sockets);
            let (group_of, node_groups) = link_groups(&levels, k);

            let base = t.gpus.len();
            let group_base = t.groups.len();
            // Best-connected groups first (largest, then closest), so a topology-greedy search
            // can take the first that fits.
            let mut order: Vec<usize> = (0..node_groups.len()).collect();
            order.sort_by(|&a, &b| {
                node_groups[b]
                    .0
                    .len()
                    .cmp(&node_groups[a].0.len())
                    .then(node_groups[a].1.cmp(&node_groups[b].1))
                    .then(a.cmp(&b))
            });
            let mut rank = vec![0; node_groups.len()];
            for (r, &g) in order.iter().enumerate() {
                rank[g] = r;
            }
            for &g in &order {
                let (members, worst) = &node_groups[g];
                t.groups.push(LinkGroup { node, gpus: members.iter().map(|&m| base + m).collect(), worst: *worst });
            }
            for (i, &device) in devices.iter().enumerate() {
                t.index.insert((worker, device), base + i);
                t.gpus.push(GpuPlace {
                    worker,
                    device,
                    group: group_base + rank[group_of[i]],
                    socket: socket[i],
                    node,
                    rack,
                });
                t.slot.push(i);
            }
            t.nodes.push(NodeEntry {
                gpus: (base..base + k).collect(),
                levels,
                links_reported: !n.topology.gpu_links.is_empty(),
            });
        }
        t
    }

    /// The tree of the workers' registered GPUs and topology reports.
    pub fn from_capacities<'a>(
        workers: impl IntoIterator<Item = (WorkerId, &'a Capacity)>,
        costs: MscCosts,
    ) -> ClusterTopology {
        let nodes = workers.into_iter().map(|(worker, c)| NodeGpus {
            worker,
            gpus: c.gpus.iter().map(|g| g.index).collect(),
            topology: c.topology.clone(),
        });
        ClusterTopology::new(nodes, costs)
    }

    pub fn costs(&self) -> &MscCosts {
        &self.costs
    }

    /// The number of GPUs.
    pub fn len(&self) -> usize {
        self.gpus.len()
    }

    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
    }

    /// Every GPU, by dense index: ordered by worker id, then device index.
    pub fn gpus(&self) -> &[GpuPlace] {
        &self.gpus
    }

    /// GPU `i`. Panics if `i ≥ len()`, as slice indexing does.
    pub fn gpu(&self, i: usize) -> &GpuPlace {
        &self.gpus[i]
    }

    /// The dense index of a worker's device.
    pub fn index_of(&self, worker: WorkerId, device: u32) -> Option<usize> {
        self.index.get(&(worker, device)).copied()
    }

    /// The dense indices of node `node`'s GPUs, in device order.
    pub fn node_gpus(&self, node: usize) -> &[usize] {
        self.nodes.get(node).map_or(&[], |n| &n.gpus)
    }

    /// The number of nodes (workers).
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Whether node `node` reported its GPUs' links (else its pairs count as `SYS`).
    pub fn links_reported(&self, node: usize) -> bool {
        self.nodes.get(node).is_some_and(|n| n.links_reported)
    }

    /// Rack names by rack index; `""` is the rack of the workers without a `rack` label.
    pub fn racks(&self) -> &[String] {
        &self.racks
    }

    /// The link groups: grouped by node (in node order), within a node the best-connected first
    /// (more members, then a closer worst link).
    pub fn groups(&self) -> &[LinkGroup] {
        &self.groups
    }

    /// Where GPUs `a` and `b` meet in the tree. Panics if either is not a GPU of this topology
    /// (`≥ len()`), as slice indexing does.
    pub fn distance(&self, a: usize, b: usize) -> Distance {
        let (ga, gb) = (&self.gpus[a], &self.gpus[b]);
        if ga.node == gb.node {
            let n = &self.nodes[ga.node];
            let k = n.gpus.len();
            Distance::Link(n.levels[self.slot[a] * k + self.slot[b]])
        } else if ga.rack == gb.rack {
            Distance::SameRack
        } else {
            Distance::OtherRack
        }
    }

    /// The model-synchronisation cost between GPUs `a` and `b` (0 for `a == b`). Symmetric.
    /// Panics like [`ClusterTopology::distance`].
    pub fn msc(&self, a: usize, b: usize) -> f64 {
        self.costs.of(self.distance(a, b))
    }

    /// msc among `gpus` as a dense row-major `gpus.len()²` matrix (what the objective's
    /// `Problem::with_msc_matrix` takes).
    pub fn msc_matrix(&self, gpus: &[usize]) -> Vec<f64> {
        gpus.iter().flat_map(|&a| gpus.iter().map(move |&b| self.msc(a, b))).collect()
    }
}

/// Each GPU's socket (numbered on from `next`, which advances past those used): GPUs share one
/// when they report the same NUMA node, or, when a node is unknown, a same-socket PCIe path.
fn sockets_of(numa: &[Option<u32>], levels: &[LinkLevel], next: &mut usize) -> Vec<usize> {
    let k = numa.len();
    let level = |i: usize, j: usize| levels[i * k + j];
    let mut parent: Vec<usize> = (0..k).collect();
    for i in 0..k {
        for j in i + 1..k {
            let joined = match (numa[i], numa[j]) {
                (Some(a), Some(b)) => a == b,
                _ => level(i, j).same_socket(),
            };
            if joined {
                let (a, b) = (find(&mut parent, i), find(&mut parent, j));
                parent[a.max(b)] = a.min(b);
            }
        }
    }
    let mut socket_of_root: BTreeMap<usize, usize> = BTreeMap::new();
    let mut socket = vec![0; k];
    for (i, s) in socket.iter_mut().enumerate() {
        let root = find(&mut parent, i);
        *s = *socket_of_root.entry(root).or_insert_with(|| {
            *next += 1;
            *next - 1
        });
    }
    socket
}

/// A clique of a node's GPUs (their slots), with its worst link.
type LinkClique = (Vec<usize>, LinkLevel);

/// A node's link groups, greedy cliques over NVLink and PCIe-switch links: each GPU's group,
/// and each group's members with its worst link.
fn link_groups(levels: &[LinkLevel], k: usize) -> (Vec<usize>, Vec<LinkClique>) {
    let level = |i: usize, j: usize| levels[i * k + j];
    let grouped = |l: LinkLevel| l.nvlinks() > 0 || l.is_pcie_switch();
    let mut group_of = vec![usize::MAX; k];
    let mut node_groups: Vec<LinkClique> = Vec::new();
    for seed in 0..k {
        if group_of[seed] != usize::MAX {
            continue;
        }
        let mut members = vec![seed];
        let mut candidates: Vec<usize> =
            (seed + 1..k).filter(|&j| group_of[j] == usize::MAX && grouped(level(seed, j))).collect();
        candidates.sort_by_key(|&j| (level(seed, j), j));
        for j in candidates {
            if members.iter().all(|&m| grouped(level(m, j))) {
                members.push(j);
            }
        }
        members.sort_unstable();
        let mut worst = LinkLevel::SameGpu;
        for (x, &a) in members.iter().enumerate() {
            for &b in &members[x + 1..] {
                worst = worst.max(level(a, b));
            }
        }
        for &m in &members {
            group_of[m] = node_groups.len();
        }
        node_groups.push((members, worst));
    }
    (group_of, node_groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_proto::topology::parse_topo_matrix;
    use plexus_proto::topology::{GpuLink, RACK_LABEL};

    const DGX1: &str = include_str!("../../../proto/tests/fixtures/nvidia-smi-topo/dgx1-v100.txt");
    const DGX1_TABS: &str = include_str!("../../../proto/tests/fixtures/nvidia-smi-topo/dgx1-v100-tabs.txt");
    const DGX_A100: &str = include_str!("../../../proto/tests/fixtures/nvidia-smi-topo/dgx-a100-damaged-paste.txt");
    const RTX4090: &str = include_str!("../../../proto/tests/fixtures/nvidia-smi-topo/pcie-8x-rtx4090.txt");
    const A10: &str = include_str!("../../../proto/tests/fixtures/nvidia-smi-topo/pcie-4x-a10.txt");
    const PHB5: &str = include_str!("../../../proto/tests/fixtures/nvidia-smi-topo/pcie-5gpu-phb-node.txt");

    fn wid(n: u8) -> WorkerId {
        let mut b = [0u8; 16];
        b[15] = n;
        WorkerId::from_bytes(b)
    }

    /// A worker offering every GPU of a recorded matrix, as the worker would report it.
    fn node(n: u8, fixture: &str, rack: Option<&str>) -> NodeGpus {
        let t = parse_topo_matrix(fixture).unwrap();
        let mut topology = NodeTopology { gpu_links: t.links(), ..Default::default() };
        topology.gpu_numa = t.gpus().iter().filter_map(|g| Some((g.index, g.numa?))).collect();
        if let Some(r) = rack {
            topology.labels.insert(RACK_LABEL.into(), r.into());
        }
        NodeGpus { worker: wid(n), gpus: t.gpus().iter().map(|g| g.index).collect(), topology }
    }

    fn bare(n: u8, gpus: u32, rack: Option<&str>) -> NodeGpus {
        let mut topology = NodeTopology::default();
        if let Some(r) = rack {
            topology.labels.insert(RACK_LABEL.into(), r.into());
        }
        NodeGpus { worker: wid(n), gpus: (0..gpus).collect(), topology }
    }

    fn groups_of(t: &ClusterTopology, node: usize) -> Vec<(Vec<u32>, String)> {
        t.groups()
            .iter()
            .filter(|g| g.node == node)
            .map(|g| (g.gpus.iter().map(|&i| t.gpu(i).device).collect(), g.worst.to_string()))
            .collect()
    }

    #[test]
    fn default_costs_are_valid_and_follow_bandwidth() {
        let c = MscCosts::default();
        c.validate().unwrap();
        assert_eq!(c.level(LinkLevel::SameGpu), 0.0);
        assert_eq!(c.level(LinkLevel::NvLink(12)), 1.0, "300 GB/s is the unit");
        assert_eq!(c.level(LinkLevel::NvLink(2)), 6.0);
        assert_eq!(c.level(LinkLevel::NvLink(1)), c.level(LinkLevel::Pix), "one NVLink ≈ a PCIe 4.0 x16 switch");
        assert_eq!((c.level(LinkLevel::Pxb), c.level(LinkLevel::Node), c.level(LinkLevel::Sys)), (12.0, 15.0, 30.0));
        assert_eq!((c.of(Distance::SameRack), c.of(Distance::OtherRack)), (48.0, 144.0));
        // Every level costs no more than the next farther one.
        let order = ["X", "NV18", "NV12", "NV2", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS"];
        let mut last = -1.0;
        for l in order {
            let cost = c.level(l.parse().unwrap());
            assert!(cost >= last, "{l}");
            last = cost;
        }
        assert!(c.of(Distance::SameRack) >= last);
    }

    #[test]
    fn costs_parse_override_and_are_checked() {
        assert_eq!(MscCosts::parse(&MscCosts::default().to_string()).unwrap(), MscCosts::default());
        assert_eq!(MscCosts::default().to_string(), "nvlink=12,pix=12,phb=15,sys=30,same-rack=48,cross-rack=144");
        let c: MscCosts = " nvlink = 1 , pix=2,cross-rack=1000".parse().unwrap();
        assert_eq!((c.nvlink, c.pix, c.phb, c.cross_rack), (1.0, 2.0, 15.0, 1000.0));
        let e = |s: &str| MscCosts::parse(s).unwrap_err().to_string();
        assert_eq!(e("pix"), "\"pix\" is not key=value (keys: nvlink, pix, phb, sys, same-rack, cross-rack)");
        assert_eq!(e(""), "\"\" is not key=value (keys: nvlink, pix, phb, sys, same-rack, cross-rack)");
        assert_eq!(e("node=3"), "unknown key \"node\" (keys: nvlink, pix, phb, sys, same-rack, cross-rack)");
        assert_eq!(e("pix=1,pix=2"), "pix is given twice");
        assert_eq!(e("pix=cheap"), "pix = \"cheap\" is not a finite number ≥ 0");
        assert_eq!(e("sys=NaN"), "sys = \"NaN\" is not a finite number ≥ 0");
        assert_eq!(e("cross-rack=inf"), "cross-rack = \"inf\" is not a finite number ≥ 0");
        assert_eq!(e("nvlink=-1"), "nvlink = \"-1\" is not a finite number ≥ 0");
        assert_eq!(
            e("sys=5"),
            "sys = 5 is less than phb = 15: costs must not decrease with distance (nvlink ≤ pix ≤ phb ≤ sys ≤ same-rack ≤ cross-rack)"
        );
        assert_eq!(
            e("nvlink=20"),
            "pix = 12 is less than nvlink = 20: costs must not decrease with distance (nvlink ≤ pix ≤ phb ≤ sys ≤ same-rack ≤ cross-rack)"
        );
        let long = format!("{}=1", "k".repeat(100_000));
        assert!(e(&long).len() < 200, "a huge key is not echoed whole");
        assert!(
            MscCosts::parse("nvlink=0,pix=0,phb=0,sys=0,same-rack=0,cross-rack=0").is_ok(),
            "all zero: topology-blind"
        );
    }

    #[test]
    fn msc_from_the_tree_on_dgx1_nodes_in_racks() {
        let t = ClusterTopology::new(
            [
                node(1, DGX1, Some("r1")),
                node(2, DGX1_TABS, Some("r1")),
                node(3, DGX1, Some("r2")),
                bare(4, 4, Some("r1")),
            ],
            MscCosts::default(),
        );
        assert_eq!((t.len(), t.nodes()), (28, 4));
        assert_eq!(t.racks(), ["r1", "r2"]);
        let g = |w: u8, d: u32| t.index_of(wid(w), d).unwrap();
        // Within a DGX-1: GPU0–GPU3 two NVLinks, GPU0–GPU1 one, GPU0–GPU5 across the sockets.
        assert_eq!(t.distance(g(1, 0), g(1, 3)), Distance::Link(LinkLevel::NvLink(2)));
        assert_eq!(t.msc(g(1, 0), g(1, 3)), 6.0);
        assert_eq!(t.msc(g(1, 0), g(1, 1)), 12.0);
        assert_eq!(t.msc(g(1, 0), g(1, 5)), 30.0);
        assert_eq!(t.msc(g(1, 2), g(1, 2)), 0.0);
        // The other enumeration of the same machine class.
        assert_eq!(t.msc(g(2, 0), g(2, 7)), 6.0);
        assert_eq!(t.msc(g(2, 0), g(2, 4)), 30.0);
        // Two workers in one rack, and in two racks.
        assert_eq!(t.distance(g(1, 0), g(2, 0)), Distance::SameRack);
        assert_eq!(t.msc(g(1, 0), g(2, 0)), 48.0);
        assert_eq!(t.distance(g(1, 0), g(3, 0)), Distance::OtherRack);
        assert_eq!(t.msc(g(2, 7), g(3, 3)), 144.0);
        // A worker that reported no links: every pair SYS.
        let n4 = t.gpu(g(4, 0)).node;
        assert!(!t.links_reported(n4) && t.links_reported(t.gpu(g(1, 0)).node));
        assert_eq!(t.msc(g(4, 0), g(4, 3)), 30.0);
        assert_eq!(t.msc(g(4, 1), g(1, 1)), 48.0);
        // msc is symmetric and 0 only on the diagonal; closer in the tree never costs more.
        for a in 0..t.len() {
            for b in 0..t.len() {
                assert_eq!(t.msc(a, b), t.msc(b, a));
                assert_eq!(t.msc(a, b) == 0.0, a == b);
                assert_eq!(
                    t.distance(a, b) == Distance::SameRack,
                    t.gpu(a).node != t.gpu(b).node && t.gpu(a).rack == t.gpu(b).rack
                );
            }
        }
        let m = t.msc_matrix(&[g(1, 0), g(1, 3), g(3, 0)]);
        assert_eq!(m, [0.0, 6.0, 144.0, 6.0, 0.0, 144.0, 144.0, 144.0, 0.0]);
        assert_eq!(t.index_of(wid(1), 8), None);
        assert_eq!(t.index_of(wid(9), 0), None);
    }

    #[test]
    fn groups_and_sockets_follow_the_links() {
        let t = ClusterTopology::new(
            [
                node(1, DGX1, None),
                node(2, DGX_A100, None),
                node(3, RTX4090, None),
                node(4, A10, None),
                node(5, PHB5, None),
                bare(6, 3, None),
            ],
            MscCosts::default(),
        );
        assert_eq!(t.racks(), [""], "no rack labels: one unnamed rack");
        let s = |v: &[(&[u32], &str)]| v.iter().map(|(d, l)| (d.to_vec(), l.to_string())).collect::<Vec<_>>();
        // The hybrid cube-mesh: two NVLink quads.
        assert_eq!(groups_of(&t, 0), s(&[(&[0, 1, 2, 3], "NV1"), (&[4, 5, 6, 7], "NV1")]));
        // NVSwitch: one group of eight across four NUMA nodes.
        assert_eq!(groups_of(&t, 1), s(&[(&[0, 1, 2, 3, 4, 5, 6, 7], "NV12")]));
        // PCIe switches: one group per switch.
        assert_eq!(groups_of(&t, 2), s(&[(&[0, 1, 2, 3], "PIX"), (&[4, 5, 6, 7], "PIX")]));
        // Nothing better than a host bridge: every GPU alone.
        assert_eq!(groups_of(&t, 3).len(), 4);
        assert_eq!(groups_of(&t, 4).len(), 5);
        assert_eq!(groups_of(&t, 5), s(&[(&[0], "X"), (&[1], "X"), (&[2], "X")]));
        for (i, g) in t.groups().iter().enumerate() {
            assert!(g.gpus.iter().all(|&m| t.gpu(m).group == i && t.gpu(m).node == g.node));
        }

        let sockets = |node: usize| t.node_gpus(node).iter().map(|&i| t.gpu(i).socket).collect::<Vec<_>>();
        let distinct = |v: Vec<usize>| v.iter().collect::<std::collections::BTreeSet<_>>().len();
        // The DGX A100 paste names NUMA nodes 3, 3, 1, 1, 7, 7, 5, 5.
        let a100 = sockets(1);
        assert_eq!(distinct(a100.clone()), 4);
        assert!(a100[0] == a100[1] && a100[2] == a100[3] && a100[0] != a100[2] && a100[4] != a100[6]);
        // The RTX 4090 box: NUMA 0 and 1.
        let rtx = sockets(2);
        assert!(rtx[..4].iter().all(|&s| s == rtx[0]) && rtx[4..].iter().all(|&s| s == rtx[4]) && rtx[0] != rtx[4]);
        // The DGX-1 fixture has no NUMA column and no PCIe path between GPUs: each its own.
        assert_eq!(distinct(sockets(0)), 8);
        // Sockets are numbered across the cluster.
        assert!(sockets(0).iter().all(|s| !sockets(1).contains(s)));
    }

    #[test]
    fn hostile_reports_cannot_break_the_tree() {
        let topology = NodeTopology {
            gpu_links: vec![
                GpuLink { a: 0, b: 0, level: LinkLevel::NvLink(4) },
                GpuLink { a: 0, b: 1, level: LinkLevel::SameGpu },
                GpuLink { a: 1, b: 99, level: LinkLevel::NvLink(4) },
                GpuLink { a: 2, b: 1, level: LinkLevel::Pix },
            ],
            gpu_numa: [(42, 7)].into(),
            ..Default::default()
        };
        let t = ClusterTopology::new(
            [
                NodeGpus { worker: wid(1), gpus: vec![2, 1, 0, 2, 1], topology },
                bare(1, 8, None),
                NodeGpus { worker: wid(2), gpus: vec![], topology: NodeTopology::default() },
            ],
            MscCosts::default(),
        );
        assert_eq!(t.len(), 3, "repeats once; the repeated worker's second entry is ignored");
        let g = |d: u32| t.index_of(wid(1), d).unwrap();
        assert_eq!(t.msc(g(0), g(0)), 0.0);
        assert_eq!(t.msc(g(0), g(1)), 30.0, "X between two devices is ignored: SYS");
        assert_eq!(t.msc(g(1), g(2)), 12.0, "a < b or not, the pair is read");
        assert_eq!(t.node_gpus(1), &[] as &[usize], "a worker without GPUs is a node without GPUs");
        assert_eq!(t.node_gpus(7), &[] as &[usize]);
        let empty = ClusterTopology::new([], MscCosts::default());
        assert!(empty.is_empty() && empty.groups().is_empty());
    }

    #[test]
    fn stored_capacities_without_topology_still_load() {
        let old = r#"{"cpus":8,"memory":1,"gpus":[{"index":0,"name":"H100","memory":1}],"rails":[],"cache_bytes":0,"hostname":"h"}"#;
        let c: Capacity = serde_json::from_str(old).unwrap();
        assert_eq!(c.topology, NodeTopology::default());
        let mut c2 = c.clone();
        c2.topology.labels.insert("rack".into(), "r1".into());
        c2.topology.gpu_links.push(GpuLink { a: 0, b: 1, level: LinkLevel::NvLink(18) });
        c2.topology.gpu_numa.insert(0, 1);
        let json = serde_json::to_string(&c2).unwrap();
        assert!(json.contains(r#""level":"NV18""#), "{json}");
        assert_eq!(serde_json::from_str::<Capacity>(&json).unwrap(), c2);
        assert!(!serde_json::to_string(&c).unwrap().contains("gpu_links"), "empty parts are not stored");
        let t = ClusterTopology::from_capacities([(wid(1), &c2)], MscCosts::default());
        assert_eq!(t.gpus()[0].device, 0);
        assert_eq!(t.racks(), ["r1"]);
    }
}
