//! The seeded open-loop stream of fan-out/fan-in jobs, the same for every placer.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::SHAPES;
use crate::args::Opts;

/// One job of the stream.
pub(crate) struct Plan {
    /// Arrival, from the start of the stream.
    pub(crate) at: Duration,
    pub(crate) shape: (u32, u32, u32),
    pub(crate) source: String,
}

fn job_source(i: usize, (mb, maps, passes): (u32, u32, u32)) -> String {
    // Literal TOML strings ('...'): the shell text holds no single quote.
    format!(
        r#"name = "live-{i:03}"

[[task]]
name = "gen"
command = 'head -c ${{MB}}M /dev/urandom > $PLEXUS_OUT/data'
env = {{ MB = "{mb}" }}
outputs = ["data"]
cpu = 1
timeout = "120s"

[[task]]
name = "map"
replicas = {maps}
inputs = ["gen/data"]
outputs = ["part"]
command = 'in=$PLEXUS_IN/gen/0/data; {{ i=0; while [ $i -lt $PASSES ]; do cat $in; i=$((i+1)); done | sha256sum; echo $PLEXUS_RANK; head -c $((MB * 512))K $in; }} > $PLEXUS_OUT/part'
env = {{ MB = "{mb}", PASSES = "{passes}" }}
cpu = 1
timeout = "120s"

[[task]]
name = "reduce"
inputs = ["map/part"]
outputs = ["total"]
command = 'cat $PLEXUS_IN/map/*/part | sha256sum > $PLEXUS_OUT/total'
cpu = 1
timeout = "120s"
"#
    )
}

/// The seeded stream: exponential gaps of mean `interval_ms`, a shape per job.
pub(crate) fn stream(o: &Opts) -> Vec<Plan> {
    let mut rng = StdRng::seed_from_u64(o.seed);
    let mut t = 0.0f64;
    (0..o.warmup + o.jobs)
        .map(|i| {
            if i > 0 {
                let u: f64 = rng.random::<f64>().max(1e-9);
                t += -u.ln() * o.interval_ms as f64;
            }
            let shape = SHAPES[rng.random_range(0..SHAPES.len())];
            Plan { at: Duration::from_micros((t * 1000.0) as u64), shape, source: job_source(i, shape) }
        })
        .collect()
}

/// Worker ids, seeded: the same for every placer, so candidates come in the same id order (the
/// heuristics break ties by it) in every run.
pub(crate) fn worker_ids(o: &Opts) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(o.seed ^ 0x05ee_d1d5);
    (0..o.quotas.len()).map(|_| format!("wkr-{:032x}", rng.random::<u128>())).collect()
}
