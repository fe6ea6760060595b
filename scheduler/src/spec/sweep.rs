//! Per-replica parameters (issue 32, item 5): a sweep as data.
//!
//! ```toml
//! sweep = { lr = [0.1, 0.3, 1.0], batch = [32, 64] }   # 6 replicas: every lr with every batch
//! sweep_mode = "zip"                                   # or pair the lists up, index by index
//! ```
//!
//! The lists expand into the task's replicas, keys in alphabetical order, the first key varying
//! slowest (`product`, the default), or index by index (`zip`, lists of one length). Replica r runs
//! with `PLEXUS_PARAM_<KEY>` set to its values (the key in upper case), and `plexus status
//! --subtasks` shows them.

use serde::{Deserialize, Serialize};

pub use plexus_proto::rules::{
    MAX_PARAM_KEY_LEN as MAX_SWEEP_KEY_LEN, MAX_PARAM_VALUE_LEN as MAX_SWEEP_VALUE_LEN, MAX_PARAMS as MAX_SWEEP_KEYS,
    param_env_name, param_key_ok as key_ok,
};

/// A task's sweep, expanded: one row of values per replica, in `keys` order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sweep {
    pub keys: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Sweep {
    /// Replica `rank`'s parameters, `(key, value)` in key order; empty past the rows.
    pub fn params(&self, rank: u32) -> Vec<(String, String)> {
        self.rows
            .get(rank as usize)
            .map(|row| self.keys.iter().cloned().zip(row.iter().cloned()).collect())
            .unwrap_or_default()
    }
}

/// How a sweep's lists combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepMode {
    /// Every combination, the first key varying slowest.
    Product,
    /// Index by index: lists of one length.
    Zip,
}

/// Expands lists of values (keys in order) into rows; `Err` says why not (lists of different
/// lengths for `zip`, more than `max` rows).
pub fn expand(lists: &[(String, Vec<String>)], mode: SweepMode, max: u32) -> Result<Vec<Vec<String>>, String> {
    match mode {
        SweepMode::Zip => {
            let n = lists.first().map_or(0, |(_, v)| v.len());
            if let Some((k, v)) = lists.iter().find(|(_, v)| v.len() != n) {
                return Err(format!(
                    "sweep_mode = \"zip\" pairs lists index by index, but {:?} has {n} values and {k:?} has {}",
                    lists[0].0,
                    v.len()
                ));
            }
            if n > max as usize {
                return Err(format!("the sweep expands to {n} replicas, more than {max}"));
            }
            Ok((0..n).map(|i| lists.iter().map(|(_, v)| v[i].clone()).collect()).collect())
        }
        SweepMode::Product => {
            let count = lists.iter().try_fold(1u64, |n, (_, v)| n.checked_mul(v.len() as u64)).unwrap_or(u64::MAX);
            if count > u64::from(max) {
                let sizes: Vec<String> = lists.iter().map(|(_, v)| v.len().to_string()).collect();
                return Err(format!(
                    "the sweep expands to {} replicas ({}), more than {max}",
                    if count == u64::MAX { "too many".to_string() } else { count.to_string() },
                    sizes.join(" x ")
                ));
            }
            let mut rows: Vec<Vec<String>> = vec![Vec::new()];
            for (_, values) in lists {
                rows = rows
                    .into_iter()
                    .flat_map(|row| {
                        values.iter().map(move |v| {
                            let mut r = row.clone();
                            r.push(v.clone());
                            r
                        })
                    })
                    .collect();
            }
            Ok(rows)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lists(spec: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        spec.iter().map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect())).collect()
    }

    #[test]
    fn product_varies_the_first_key_slowest_and_zip_pairs_by_index() {
        let l = lists(&[("batch", &["32", "64"]), ("lr", &["0.1", "0.3", "1.0"])]);
        let rows = expand(&l, SweepMode::Product, 100).unwrap();
        assert_eq!(rows.len(), 6);
        assert_eq!(rows[0], ["32", "0.1"]);
        assert_eq!(rows[2], ["32", "1.0"]);
        assert_eq!(rows[3], ["64", "0.1"]);
        let e = expand(&l, SweepMode::Zip, 100).unwrap_err();
        assert!(e.contains("\"batch\" has 2 values and \"lr\" has 3"), "{e}");
        let z = expand(&lists(&[("a", &["1", "2"]), ("b", &["x", "y"])]), SweepMode::Zip, 100).unwrap();
        assert_eq!(z, vec![vec!["1", "x"], vec!["2", "y"]]);
        assert!(expand(&l, SweepMode::Product, 5).unwrap_err().contains("expands to 6 replicas (2 x 3), more than 5"));
        let huge: Vec<(String, Vec<String>)> =
            (0..16).map(|i| (format!("k{i}"), vec!["v".to_string(); 1000])).collect();
        assert!(expand(&huge, SweepMode::Product, 100_000).unwrap_err().contains("too many"), "no overflow");
        let s = Sweep { keys: vec!["batch".into(), "lr".into()], rows };
        assert_eq!(s.params(4), vec![("batch".into(), "64".into()), ("lr".into(), "0.3".into())]);
        assert!(s.params(6).is_empty());
        assert_eq!(param_env_name("lr"), "PLEXUS_PARAM_LR");
        assert!(key_ok("lr_2") && !key_ok("2lr") && !key_ok("l-r") && !key_ok(""));
    }
}
