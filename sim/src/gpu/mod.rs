//! GPU group placement in the simulator (issue 16): the ground truth the searches of
//! [`plexus_scheduler::gpu::search`] are measured against.
//!
//! - [`truth`]: task kinds by signature (ResNet-50, VGG-16, BERT-base, GPT-2 small, an LSTM,
//!   two inference services) and [`GroundTruth`], a seeded interference model of documented
//!   form that implements [`InterferenceModel`](plexus_scheduler::gpu::InterferenceModel), so a
//!   search can run on the truth as an oracle and a learned model can be trained on its
//!   measurements.
//! - [`cluster`]: simulated clusters of 8-GPU nodes (DGX-1 NVLink cube-mesh or PCIe only) in
//!   racks, with a dense msc matrix and GPUs already running tasks, drawn from a seed, and the
//!   search problem of a gang on one.
//! - [`jct`]: a GPU training workload in simulated time (gangs that synchronise every
//!   iteration, some sharing GPUs), placed by a search and timed by the truth: job completion
//!   times per placer.
//!
//! Everything is a function of its seed.

pub mod cluster;
pub mod jct;
pub mod truth;

#[cfg(test)]
mod jct_tests;
#[cfg(test)]
mod tests;

pub use cluster::{GpuCluster, GpuClusterConfig, Link, MscLevels, NodeKind, SimGpu, gang};
pub use jct::{GangJob, JctConfig, JctReport, JctWorkload, JobOutcome, Placer, Search};
pub use truth::{GroundTruth, Kind, Profile};
