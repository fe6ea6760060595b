//! A task's `sweep = { key = [values] }` and `sweep_mode`, checked and expanded into one row of
//! parameters per replica.

use super::Validator;
use crate::error::SpecError;
use crate::spec::model::MAX_REPLICAS;
use crate::spec::raw::RawTask;
use crate::spec::sweep::{
    MAX_SWEEP_KEY_LEN, MAX_SWEEP_KEYS, MAX_SWEEP_VALUE_LEN, Sweep, SweepMode, expand, key_ok, param_env_name,
};

impl Validator<'_> {
    /// The task's sweep, expanded; `None` when it has none.
    pub(super) fn sweep(&self, t: &RawTask) -> Result<Option<Sweep>, SpecError> {
        let at = |msg: String| self.at(t, msg);
        let Some(raw) = &t.sweep else {
            if t.sweep_mode.is_some() {
                return Err(at("sweep_mode without a sweep".into()));
            }
            return Ok(None);
        };
        let mode = match t.sweep_mode.as_deref() {
            None | Some("product") => SweepMode::Product,
            Some("zip") => SweepMode::Zip,
            Some(other) => {
                let shown: String = other.chars().take(64).collect();
                return Err(at(format!("sweep_mode = {shown:?}: expected \"product\" (the default) or \"zip\"")));
            }
        };
        if raw.is_empty() {
            return Err(at("sweep = {} names no parameter".into()));
        }
        if raw.len() > MAX_SWEEP_KEYS {
            return Err(at(format!("sweep has {} keys, at most {MAX_SWEEP_KEYS}", raw.len())));
        }
        let mut lists: Vec<(String, Vec<String>)> = Vec::with_capacity(raw.len());
        for (key, values) in raw {
            let shown: String = key.chars().take(64).collect();
            if !key_ok(key) {
                return Err(at(format!(
                    "sweep key {shown:?}: 1 to {MAX_SWEEP_KEY_LEN} letters, digits and '_', starting with a letter"
                )));
            }
            if let Some((other, _)) = lists.iter().find(|(k, _)| param_env_name(k) == param_env_name(key)) {
                return Err(at(format!(
                    "sweep keys {other:?} and {shown:?} are both {} to the task",
                    param_env_name(key)
                )));
            }
            let serde_json::Value::Array(values) = values else {
                return Err(at(format!("sweep.{shown}: expected a list of values, e.g. [0.1, 0.3]")));
            };
            if values.is_empty() {
                return Err(at(format!("sweep.{shown} is an empty list: the sweep would run nothing")));
            }
            let texts = values
                .iter()
                .map(|v| match v {
                    serde_json::Value::String(s) if s.len() <= MAX_SWEEP_VALUE_LEN && !s.contains('\0') => {
                        Ok(s.clone())
                    }
                    serde_json::Value::String(_) => {
                        Err(format!("sweep.{shown}: a value longer than {MAX_SWEEP_VALUE_LEN} bytes or holding a NUL"))
                    }
                    serde_json::Value::Number(n) => Ok(n.to_string()),
                    serde_json::Value::Bool(b) => Ok(b.to_string()),
                    other => Err(format!(
                        "sweep.{shown}: {} is not a string, number or boolean",
                        other.to_string().chars().take(64).collect::<String>()
                    )),
                })
                .collect::<Result<Vec<String>, String>>()
                .map_err(at)?;
            lists.push((key.clone(), texts));
        }
        let rows = expand(&lists, mode, MAX_REPLICAS).map_err(at)?;
        if let Some(r) = t.replicas
            && r as usize != rows.len()
        {
            return Err(at(format!(
                "replicas = {r}, but the sweep expands to {} (leave replicas out: a sweep sets it)",
                rows.len()
            )));
        }
        Ok(Some(Sweep { keys: lists.into_iter().map(|(k, _)| k).collect(), rows }))
    }
}
