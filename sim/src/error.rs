//! The crate's one error type.

/// What can go wrong reading a trace or running a simulation. Every variant names the input
/// that was wrong.
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
}
