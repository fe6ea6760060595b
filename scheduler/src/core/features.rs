//! A recorded candidate's named features (`plexus explain`), kept compactly (issue 35): the
//! names are shared by the candidates of a decision — one allocation per decision rather than
//! one per candidate and feature — and each candidate keeps only its values. Kept as pairs of
//! name and value, 32 candidates of ~10 features took ~20 KB per placement record in memory,
//! which made the coordinator's memory grow ~45 KB per subtask placed. Stored and read as
//! before: a list of `[name, value]` pairs.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::placer::Candidate;

/// The named features of one candidate.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Features {
    names: Arc<[String]>,
    values: Vec<f64>,
}

impl Features {
    /// `pairs`, sharing the names of `shared` where they are the same (then `shared` is kept),
    /// else making them the new shared names.
    pub fn shared(pairs: Vec<(String, f64)>, shared: &mut Option<Arc<[String]>>) -> Features {
        let same =
            shared.as_ref().is_some_and(|s| s.len() == pairs.len() && s.iter().zip(&pairs).all(|(a, (b, _))| a == b));
        let values = pairs.iter().map(|(_, v)| *v).collect();
        if !same {
            *shared = Some(pairs.into_iter().map(|(n, _)| n).collect());
        }
        Features { names: shared.clone().unwrap_or_default(), values }
    }

    /// Each feature's name and value, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> + '_ {
        self.names.iter().map(String::as_str).zip(self.values.iter().copied())
    }

    /// The value of the feature `name`.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl From<Vec<(String, f64)>> for Features {
    fn from(pairs: Vec<(String, f64)>) -> Features {
        Features::shared(pairs, &mut None)
    }
}

impl Serialize for Features {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Features {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Features, D::Error> {
        Ok(Vec::<(String, f64)>::deserialize(d)?.into())
    }
}

/// A candidate's recorded features with its estimates and the samples behind them: the
/// estimates are added when the placer scored other features (the learned placer), and
/// `est_fetch_samples` / `est_compute_samples` (0: derived from other workers or pairs) always
/// go with them, so `plexus explain` shows how far to trust each.
pub(super) fn with_estimates(
    mut features: Vec<(String, f64)>,
    c: &Candidate,
    (fetch, compute): (Option<f64>, Option<f64>),
) -> Vec<(String, f64)> {
    let estimates = [
        ("est_fetch_ms", "est_fetch_samples", c.est_fetch_ms, fetch),
        ("est_compute_ms", "est_compute_samples", c.est_compute_ms, compute),
    ];
    for (name, samples_name, value, samples) in estimates {
        let Some(v) = value else { continue };
        if !features.iter().any(|(n, _)| n == name) {
            features.push((name.to_string(), v));
        }
        if let Some(s) = samples {
            features.push((samples_name.to_string(), s));
        }
    }
    features
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(names: &[&str]) -> Vec<(String, f64)> {
        names.iter().enumerate().map(|(i, n)| (n.to_string(), i as f64 + 0.5)).collect()
    }

    #[test]
    fn candidates_with_the_same_names_share_them_and_others_do_not() {
        let mut shared = None;
        let a = Features::shared(pairs(&["free_cpu", "assigned"]), &mut shared);
        let b = Features::shared(pairs(&["free_cpu", "assigned"]), &mut shared);
        let c = Features::shared(pairs(&["free_cpu", "est_fetch_ms"]), &mut shared);
        assert!(Arc::ptr_eq(&a.names, &b.names), "the same names are one allocation");
        assert!(!Arc::ptr_eq(&a.names, &c.names));
        assert_eq!(c.iter().collect::<Vec<_>>(), vec![("free_cpu", 0.5), ("est_fetch_ms", 1.5)]);
        assert_eq!(b.get("assigned"), Some(1.5));
        assert_eq!(b.get("missing"), None);
    }

    #[test]
    fn stored_as_the_pairs_they_always_were() {
        let f = Features::from(pairs(&["free_cpu", "assigned"]));
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(json, r#"[["free_cpu",0.5],["assigned",1.5]]"#);
        let back: Features = serde_json::from_str(&json).unwrap();
        assert_eq!(back, f);
        // What earlier coordinators stored reads the same.
        let old: Features = serde_json::from_str(r#"[["est_compute_ms",45.0]]"#).unwrap();
        assert_eq!(old.get("est_compute_ms"), Some(45.0));
        assert!(serde_json::from_str::<Features>(r#"[["a"]]"#).is_err(), "a pair without its value is refused");
    }
}
