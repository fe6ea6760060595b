//! A task's `constraints = { key = "v" | "!=v" | true | false }`, and the job's, which every task
//! gets below its own.

use std::collections::BTreeMap;

use plexus_proto::topology::check_label;

use super::Validator;
use crate::error::SpecError;
use crate::spec::constraints::{Constraint, LabelTest, MAX_CONSTRAINTS};
use crate::spec::raw::{RawConstraint, RawTask};

impl Validator<'_> {
    /// The task's constraints, the job's merged below its own, in key order.
    pub(super) fn constraints(
        &self,
        t: &RawTask,
        job: &BTreeMap<String, RawConstraint>,
    ) -> Result<Vec<Constraint>, SpecError> {
        let mut merged: BTreeMap<&String, &RawConstraint> = job.iter().collect();
        merged.extend(t.constraints.iter());
        if merged.len() > MAX_CONSTRAINTS {
            return Err(self.at(t, format!("{} constraints: at most {MAX_CONSTRAINTS}", merged.len())));
        }
        merged
            .into_iter()
            .map(|(key, raw)| {
                let bad = |why: String| self.at(t, format!("constraints.{}: {why}", key.chars().take(64).collect::<String>()));
                let test = match raw {
                    RawConstraint::Flag(true) => LabelTest::Present,
                    RawConstraint::Flag(false) => LabelTest::Absent,
                    RawConstraint::Text(v) => match v.strip_prefix("!=") {
                        Some(rest) => LabelTest::NotEquals(rest.to_string()),
                        None => LabelTest::Equals(v.clone()),
                    },
                    RawConstraint::Other(v) => {
                        let shown: String = v.to_string().chars().take(64).collect();
                        return Err(bad(format!(
                            "{shown} is not a label test: \"value\", \"!=value\", true (the label is present) or false (absent)"
                        )));
                    }
                };
                // Keys and values follow the label rules, so a test can match a label at all.
                let value = match &test {
                    LabelTest::Equals(v) | LabelTest::NotEquals(v) => v.as_str(),
                    LabelTest::Present | LabelTest::Absent => "x",
                };
                check_label(key, value).map_err(|e| bad(e.to_string()))?;
                Ok(Constraint { key: key.clone(), test })
            })
            .collect()
    }
}
