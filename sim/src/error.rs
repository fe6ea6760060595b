//! The crate's one error type.

/// What can go wrong reading a trace or running a simulation (of placers, of gangs, or of GPU
/// jobs). Every variant names the input that was wrong.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A trace line that does not parse or does not make sense (line numbers start at 1).
    #[error("trace line {line}: {message}")]
    Trace { line: usize, message: String },
    /// Reading the trace failed.
    #[error("trace line {line}: read failed: {source}")]
    Read {
        line: usize,
        #[source]
        source: std::io::Error,
    },
    /// A data object's home node is not a node of the simulated cluster.
    #[error("object {object:?} lives on node {node}, but the cluster has {nodes} nodes (0..{nodes})")]
    BadLocation { object: String, node: usize, nodes: usize },
    /// A task that no node of the cluster could ever run (more cores, memory or GPUs than any
    /// node has), so the simulation would never end.
    #[error("job {job:?} task {task:?} needs {needs} but no node is that large")]
    Unplaceable { job: String, task: String, needs: String },
    /// A placer returned an index that is out of range or names an infeasible candidate.
    #[error("placer {placer} chose candidate {chosen} for decision {decision}, which is not a feasible candidate")]
    InfeasibleChoice { placer: String, decision: u64, chosen: usize },
    /// Events ran out with tasks still unfinished (a dependency cycle in a hand-built workload).
    #[error("simulation stuck at {at_us} µs with {unfinished} tasks unfinished (a dependency cycle?)")]
    Stuck { at_us: u64, unfinished: usize },
    /// The cluster configuration cannot be simulated.
    #[error("cluster configuration: {0}")]
    Config(String),
    /// A gang configuration or hand-built gang workload that cannot be simulated.
    #[error("gang workload: {0}")]
    GangWorkload(String),
    /// The scheduling core refused a gang simulation's arrival's job file.
    #[error("the core refused item {item}: {why}")]
    Refused { item: usize, why: String },
    /// A gang scheduler started something that cannot be started (more cores than a worker has
    /// free, a member twice): a bug of the scheduler under test.
    #[error("scheduler bug: {0}")]
    SchedulerBug(String),
    /// A GPU job-completion-time configuration or hand-built workload that cannot be simulated.
    #[error("jct workload: {0}")]
    JctWorkload(String),
    /// A GPU search failed although the gang fits (a bug of the search), or returned an
    /// assignment the problem does not allow.
    #[error("placer {placer} on job {job}: {error}")]
    Search { placer: String, job: usize, error: plexus_scheduler::Error },
}
