//! Gangs: `min_members`, `gang_timeout` and `gang` resolved into each task's [`GangSpec`].

use plexus_proto::ids::check_task_name;

use super::Validator;
use crate::error::SpecError;
use crate::spec::model::{DEFAULT_GANG_TIMEOUT_MS, GangSpec, TaskSpec};
use crate::spec::raw::RawTask;

impl Validator<'_> {
    /// Resolves `min_members`, `gang_timeout` and `gang` into each task's [`GangSpec`]: tasks
    /// naming one gang must become ready together (the same `after`), and agree on what they
    /// both set; `min_members` counts over all of them. Collectives are gangs of all their
    /// members and take none of these fields.
    pub(super) fn gangs(&self, raw: &[RawTask], tasks: &mut [TaskSpec]) -> Result<(), SpecError> {
        // Gang name → the indices of its tasks, in file order.
        let mut members: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, t) in raw.iter().enumerate() {
            let at = |msg: String| self.err(self.task_line(&t.name, 0), format!("task {:?}: {msg}", t.name));
            let asks = t.min_members.is_some() || t.gang_timeout.is_some() || t.gang.is_some();
            if tasks[i].collective.is_some() {
                if asks {
                    return Err(at("a collective is already a gang of all its members; `min_members`, `gang_timeout` and `gang` are not for it".into()));
                }
                let n = tasks[i].replicas;
                tasks[i].gang =
                    Some(GangSpec { name: tasks[i].name.clone(), min_members: n, timeout_ms: DEFAULT_GANG_TIMEOUT_MS });
                continue;
            }
            if !asks {
                continue;
            }
            let name = t.gang.clone().unwrap_or_else(|| t.name.clone());
            check_task_name(&name).map_err(|e| at(format!("gang {name:?}: {e}")))?;
            match members.iter_mut().find(|(n, _)| *n == name) {
                Some((_, v)) => v.push(i),
                None => members.push((name, vec![i])),
            }
        }
        for (name, idx) in members {
            let first = &raw[idx[0]];
            let line = self.task_line(&first.name, 0);
            let at = |msg: String| self.err(line, format!("gang {name:?}: {msg}"));
            if let Some(other) = tasks.iter().find(|t| t.name == name && !idx.iter().any(|&i| tasks[i].name == t.name))
            {
                return Err(at(format!(
                    "is also the name of task {:?}, which is not in it; name the gang differently",
                    other.name
                )));
            }
            let after = |i: usize| tasks[i].after.iter().collect::<std::collections::BTreeSet<_>>();
            if let Some(&odd) = idx.iter().find(|&&i| after(i) != after(idx[0])) {
                return Err(at(format!(
                    "its tasks do not become ready together: {:?} waits for {:?}, {:?} for {:?} (give them the same `after` and inputs)",
                    tasks[idx[0]].name, tasks[idx[0]].after, tasks[odd].name, tasks[odd].after
                )));
            }
            let total: u32 = idx.iter().map(|&i| tasks[i].replicas).sum();
            let mut min = None;
            let mut timeout = None;
            for &i in &idx {
                let t = &raw[i];
                if let Some(k) = t.min_members {
                    if min.is_some_and(|m| m != k) {
                        return Err(at(format!("its tasks set different min_members ({} and {k})", min.unwrap_or(0))));
                    }
                    min = Some(k);
                }
                if let Some(d) = &t.gang_timeout {
                    let ms = self.duration_ms(t, "gang_timeout", d)?;
                    if ms == 0 || ms > 24 * 3_600_000 {
                        return Err(at(format!("gang_timeout must be between 1 ms and a day, not {ms} ms")));
                    }
                    if timeout.is_some_and(|m| m != ms) {
                        return Err(at("its tasks set different gang_timeout".into()));
                    }
                    timeout = Some(ms);
                }
            }
            let min_members = min.unwrap_or(total);
            if min_members < 1 || min_members > total {
                return Err(at(format!(
                    "min_members = {min_members} is out of range (1..={total}, the gang's replicas)"
                )));
            }
            let gang =
                GangSpec { name: name.clone(), min_members, timeout_ms: timeout.unwrap_or(DEFAULT_GANG_TIMEOUT_MS) };
            for &i in &idx {
                tasks[i].gang = Some(gang.clone());
            }
        }
        Ok(())
    }
}
