//! Reading the ledger the tasks append to (see [`super::jobs`]): each attempt's span, and the
//! attempts of one subtask whose spans intersect — the subtask ran twice at once.

use std::collections::BTreeMap;

/// One subtask: (job id, task, rank).
pub type SubtaskKey = (String, String, u32);

/// What the ledger says about one attempt: from its first line to its last (ns since the epoch),
/// and whether it wrote `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub first_ns: u64,
    pub last_ns: u64,
    pub ended: bool,
}

/// Two attempts of one subtask that were alive at the same time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overlap {
    pub subtask: SubtaskKey,
    pub a: (u32, Span),
    pub b: (u32, Span),
}

/// The ledger, by subtask and attempt.
#[derive(Debug, Default)]
pub struct Ledger {
    pub attempts: BTreeMap<SubtaskKey, BTreeMap<u32, Span>>,
    /// Lines that are not records (a torn write would show here).
    pub malformed: usize,
}

impl Ledger {
    pub fn parse(text: &str) -> Ledger {
        let mut l = Ledger::default();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let parsed = match f.as_slice() {
                [what @ ("start" | "step" | "end"), job, task, rank, attempt, ns] => {
                    match (rank.parse::<u32>(), attempt.parse::<u32>(), ns.parse::<u64>()) {
                        (Ok(r), Ok(a), Ok(t)) => Some((*what, (job.to_string(), task.to_string(), r), a, t)),
                        _ => None,
                    }
                }
                _ => None,
            };
            let Some((what, key, attempt, t)) = parsed else {
                l.malformed += 1;
                continue;
            };
            let span = l.attempts.entry(key).or_default().entry(attempt).or_insert(Span {
                first_ns: t,
                last_ns: t,
                ended: false,
            });
            span.first_ns = span.first_ns.min(t);
            span.last_ns = span.last_ns.max(t);
            span.ended |= what == "end";
        }
        l
    }

    /// Every pair of attempts of one subtask whose spans intersect.
    pub fn overlaps(&self) -> Vec<Overlap> {
        let mut out = Vec::new();
        for (key, attempts) in &self.attempts {
            let list: Vec<(u32, Span)> = attempts.iter().map(|(a, s)| (*a, *s)).collect();
            for (i, a) in list.iter().enumerate() {
                for b in &list[i + 1..] {
                    if a.1.first_ns <= b.1.last_ns && b.1.first_ns <= a.1.last_ns {
                        out.push(Overlap { subtask: key.clone(), a: *a, b: *b });
                    }
                }
            }
        }
        out
    }

    /// Subtasks that more than one attempt ran to its end (not a violation by itself: a worker
    /// killed after the end and before its report makes a re-run right).
    pub fn completed_more_than_once(&self) -> usize {
        self.attempts.values().filter(|a| a.values().filter(|s| s.ended).count() > 1).count()
    }

    /// Attempts recorded in all.
    pub fn attempt_count(&self) -> usize {
        self.attempts.values().map(BTreeMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_attempts_are_found_and_sequential_ones_are_not() {
        let text = "start j t 0 1 100\nstep j t 0 1 200\nstart j t 0 2 150\nend j t 0 2 300\n\
                    start j t 1 1 100\nend j t 1 1 200\nstart j t 1 2 201\nend j t 1 2 300\ngarbage\n";
        let l = Ledger::parse(text);
        assert_eq!(l.malformed, 1);
        let o = l.overlaps();
        assert_eq!(o.len(), 1, "{o:?}");
        assert_eq!(o[0].subtask, ("j".to_string(), "t".to_string(), 0));
        assert_eq!((o[0].a.0, o[0].b.0), (1, 2));
        assert_eq!(l.completed_more_than_once(), 1);
        assert_eq!(l.attempt_count(), 4);
    }
}
