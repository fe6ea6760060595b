//! What a worker offers: its cores, memory, GPUs, rails, and where its node sits and how its GPUs
//! connect. Both the scheduling core (a worker's record) and the GPU topology read it, so it sits
//! beside both rather than inside either.

use std::collections::BTreeMap;

use plexus_proto::Resources;
use plexus_proto::topology::{GpuLink, RACK_LABEL};
use serde::{Deserialize, Serialize};

use crate::spec::constraints::{Constraint, GPU_MODEL_LABEL, Labels, admits_all};

/// The hardware a worker offers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    pub cpus: u32,
    pub memory: u64,
    pub gpus: Vec<GpuRecord>,
    pub rails: Vec<String>,
    pub cache_bytes: u64,
    pub hostname: String,
    /// Its labels and how its GPUs connect (issue 16); absent from records stored before.
    #[serde(default)]
    pub topology: NodeTopology,
    /// The most attempts it runs at once, whatever they ask for (tasks with `cpu = 0` take no
    /// core): placed and reserved attempts count. 0: no bound (records stored before).
    #[serde(default)]
    pub max_attempts: u32,
}

impl Capacity {
    pub fn resources(&self) -> Resources {
        Resources { cpu: self.cpus as f64, memory: self.memory, gpu: self.gpus.len() as u32 }
    }

    /// Whether it meets every one of a task's `constraints`.
    pub fn admits(&self, constraints: &[Constraint]) -> bool {
        admits_all(constraints, self)
    }
}

/// A worker's labels for constraints: its `--label`s, and `gpu_model` from its GPUs unless a
/// label names it (any word of a device's model name: `A100` is one of `NVIDIA A100-SXM4-80GB`).
impl Labels for Capacity {
    fn has(&self, key: &str) -> bool {
        self.topology.labels.contains_key(key) || (key == GPU_MODEL_LABEL && !self.gpus.is_empty())
    }

    fn is(&self, key: &str, value: &str) -> bool {
        match self.topology.labels.get(key) {
            Some(v) => v == value,
            None if key == GPU_MODEL_LABEL => {
                self.gpus.iter().any(|g| g.name == value || g.name.split([' ', '-']).any(|word| word == value))
            }
            None => false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuRecord {
    pub index: u32,
    pub name: String,
    pub memory: u64,
}

/// Where a worker's node sits and how its GPUs connect, as it registered them: kept in its
/// [`Capacity`] (stored with the worker record; every field defaults, so records stored before
/// it load).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeTopology {
    /// `--label key=value`; `rack` names the node's rack.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// How pairs of its offered GPUs connect (`nvidia-smi topo -m`), `a < b`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_links: Vec<GpuLink>,
    /// The NUMA node of each offered GPU whose node is known (device index → NUMA node).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpu_numa: BTreeMap<u32, u32>,
}

impl NodeTopology {
    /// The node's rack, when labelled.
    pub fn rack(&self) -> Option<&str> {
        self.labels.get(RACK_LABEL).map(String::as_str)
    }
}
