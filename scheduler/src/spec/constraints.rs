//! Node constraints (issue 32, item 4): which workers a task may run on, by their labels.
//!
//! ```toml
//! constraints = { rack = "r1", gpu_model = "A100", zone = "!=us-east", ssd = true, spot = false }
//! ```
//!
//! A string is an equality test (`"!=v"`: inequality), `true` asks that the worker carries the
//! label at all, `false` that it does not. A worker's labels are its `--label key=value`s; beside
//! them `gpu_model` is derived from its GPUs (unless a label names it): it equals any word of a
//! device's model name as `nvidia-smi` reports it, so `"A100"` matches
//! `NVIDIA A100-SXM4-80GB`. Every test must hold.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The most constraints one task may carry (as many as a worker may carry labels).
pub const MAX_CONSTRAINTS: usize = plexus_proto::topology::MAX_LABELS;

/// The label derived from a worker's GPUs.
pub const GPU_MODEL_LABEL: &str = "gpu_model";

/// What one constraint asks of a label.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LabelTest {
    Equals(String),
    NotEquals(String),
    Present,
    Absent,
}

/// One constraint: a label key and its test.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Constraint {
    pub key: String,
    pub test: LabelTest,
}

/// What a constraint reads of a worker: a label's values (a derived label may have several).
pub trait Labels {
    /// Whether the worker carries `key` at all.
    fn has(&self, key: &str) -> bool;
    /// Whether one of `key`'s values is `value`.
    fn is(&self, key: &str, value: &str) -> bool;
}

impl Constraint {
    /// Whether a worker with `labels` meets it.
    pub fn admits(&self, labels: &impl Labels) -> bool {
        match &self.test {
            LabelTest::Equals(v) => labels.is(&self.key, v),
            LabelTest::NotEquals(v) => !labels.is(&self.key, v),
            LabelTest::Present => labels.has(&self.key),
            LabelTest::Absent => !labels.has(&self.key),
        }
    }

    /// Whether only a worker that carries the label can meet it (`=` and presence tests): such a
    /// constraint on a label no worker has ever carried is refused at submit.
    pub fn needs_label(&self) -> bool {
        matches!(self.test, LabelTest::Equals(_) | LabelTest::Present)
    }
}

/// Whether a worker with `labels` meets every constraint.
pub fn admits_all(constraints: &[Constraint], labels: &impl Labels) -> bool {
    constraints.iter().all(|c| c.admits(labels))
}

/// `rack=r1`, `zone!=us-east`, `ssd`, `!spot`: as `plexus` and the reasons print them.
impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.test {
            LabelTest::Equals(v) => write!(f, "{}={v}", self.key),
            LabelTest::NotEquals(v) => write!(f, "{}!={v}", self.key),
            LabelTest::Present => write!(f, "{}", self.key),
            LabelTest::Absent => write!(f, "!{}", self.key),
        }
    }
}

/// A task's constraints as one text: `rack=r1, !spot`.
pub fn describe(constraints: &[Constraint]) -> String {
    constraints.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    struct Map(BTreeMap<&'static str, &'static str>);
    impl Labels for Map {
        fn has(&self, key: &str) -> bool {
            self.0.contains_key(key)
        }
        fn is(&self, key: &str, value: &str) -> bool {
            self.0.get(key) == Some(&value)
        }
    }

    #[test]
    fn each_test_reads_the_labels() {
        let w = Map([("rack", "r1"), ("ssd", "yes")].into_iter().collect());
        let c = |key: &str, test| Constraint { key: key.into(), test };
        assert!(c("rack", LabelTest::Equals("r1".into())).admits(&w));
        assert!(!c("rack", LabelTest::Equals("r2".into())).admits(&w));
        assert!(c("rack", LabelTest::NotEquals("r2".into())).admits(&w));
        assert!(!c("rack", LabelTest::NotEquals("r1".into())).admits(&w));
        assert!(c("zone", LabelTest::NotEquals("a".into())).admits(&w), "no label: not equal");
        assert!(c("ssd", LabelTest::Present).admits(&w));
        assert!(!c("spot", LabelTest::Present).admits(&w));
        assert!(c("spot", LabelTest::Absent).admits(&w));
        assert!(!c("ssd", LabelTest::Absent).admits(&w));
        let all = [c("rack", LabelTest::Equals("r1".into())), c("spot", LabelTest::Absent)];
        assert!(admits_all(&all, &w));
        assert_eq!(describe(&all), "rack=r1, !spot");
        assert!(admits_all(&[], &w), "no constraint: every worker");
    }
}
