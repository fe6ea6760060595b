//! The job's task graph: each task's replica count through chains of collectives, and the
//! dependency cycle check.

use std::collections::HashMap;

use plexus_proto::rules;

use crate::spec::model::TaskSpec;
use crate::spec::raw::RawTask;

/// Each task's replica count: as declared, or for a collective kind without `replicas`, its
/// input producer's (followed through chains of collectives; a cycle resolves to 1 and is
/// reported by the cycle check).
pub(super) fn declared_replicas<'a>(tasks: &'a [RawTask]) -> HashMap<&'a str, u32> {
    let by_name: HashMap<&'a str, &'a RawTask> = tasks.iter().map(|t| (t.name.as_str(), t)).collect();
    fn resolve(by_name: &HashMap<&str, &RawTask>, t: &RawTask, depth: usize) -> u32 {
        if depth > by_name.len() {
            return 1;
        }
        let collective = t.kind.as_deref().is_some_and(rules::is_collective);
        let producer = t.inputs.first().and_then(|i| i.split_once('/')).and_then(|(p, _)| by_name.get(p));
        match (t.replicas, collective, producer) {
            // A redistribute's gang is max(P, Q): its producer's replicas and its own.
            (r, true, Some(p)) if t.kind.as_deref() == Some("redistribute") => {
                let senders = resolve(by_name, p, depth + 1);
                r.unwrap_or(senders).max(senders)
            }
            (Some(r), _, _) => r,
            (None, _, _) if t.sweep.is_some() => sweep_len(t),
            (None, true, Some(p)) => resolve(by_name, p, depth + 1),
            _ => 1,
        }
    }
    tasks.iter().map(|t| (t.name.as_str(), resolve(&by_name, t, 0))).collect()
}

/// How many replicas a task's sweep declares, before it is checked (for the tasks that read its
/// outputs by rank): the product of its lists' lengths, or, for `zip`, the first list's.
fn sweep_len(t: &RawTask) -> u32 {
    let Some(raw) = &t.sweep else { return 1 };
    let lens = raw.values().map(|v| v.as_array().map_or(1, Vec::len) as u64);
    let n = match t.sweep_mode.as_deref() {
        Some("zip") => lens.take(1).sum::<u64>(),
        _ => lens.fold(1u64, u64::saturating_mul),
    };
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Finds a dependency cycle and returns it as task names, first name repeated at the end.
///
/// A depth-first search with an explicit stack: a valid job may be a chain of 10,000 tasks, and
/// recursion that deep overflows a thread's stack.
pub(super) fn find_cycle(tasks: &[TaskSpec]) -> Option<Vec<String>> {
    let index: HashMap<&str, usize> = tasks.iter().enumerate().map(|(i, t)| (t.name.as_str(), i)).collect();
    // 0 = unvisited, 1 = on the current path, 2 = done.
    let mut mark = vec![0u8; tasks.len()];
    // The current path: (task, index of the next dependency to look at).
    let mut path: Vec<(usize, usize)> = Vec::new();
    for root in 0..tasks.len() {
        if mark[root] != 0 {
            continue;
        }
        mark[root] = 1;
        path.push((root, 0));
        while let Some(&mut (i, ref mut next)) = path.last_mut() {
            let Some(dep) = tasks[i].after.get(*next) else {
                mark[i] = 2;
                path.pop();
                continue;
            };
            *next += 1;
            let j = index[dep.as_str()];
            match mark[j] {
                1 => {
                    let start = path.iter().position(|&(p, _)| p == j).unwrap_or(0);
                    // The path runs from dependents to dependencies; print it in run order.
                    let mut names: Vec<String> =
                        path[start..].iter().rev().map(|&(p, _)| tasks[p].name.clone()).collect();
                    names.push(names[0].clone());
                    return Some(names);
                }
                0 => {
                    mark[j] = 1;
                    path.push((j, 0));
                }
                _ => {}
            }
        }
    }
    None
}
