//! `plexus explain`: a placement decision and every candidate the placer weighed, as text and
//! as JSON.

use std::collections::BTreeMap;

use plexus_proto::pb;
use serde::Serialize;

use super::format::{Table, age, dash, fields, non_empty, number, time, yes_no};
use crate::client::one_line;

/// A candidate's estimated fetch and compute, ms, from its features (issue 17).
fn estimates_of(c: &pb::CandidateScore) -> (Option<f64>, Option<f64>) {
    let get = |name: &str| c.features.iter().find(|f| f.name == name).map(|f| f.value);
    (get("est_fetch_ms"), get("est_compute_ms"))
}

/// How many candidates `plexus explain` shows without `-o wide`: the chosen one and the best
/// others.
const TOP: usize = 5;

/// `plexus explain`: the decision, then the chosen worker and the best of the others, each with
/// its score said in words against the chosen one's (`-o wide`: every candidate with every
/// feature, [`explain_wide`]).
pub fn explain_text(e: &pb::ExplainPlacementResponse, now_ms: u64, wide: bool) -> String {
    if wide || e.candidates.is_empty() {
        return explain_wide(e, now_ms);
    }
    let mut out = fields(&decision(e, now_ms));
    let chosen = e.candidates.iter().find(|c| !e.chosen_worker.is_empty() && c.worker_id == e.chosen_worker);
    // Whether the placer prefers a high score: the chosen one scored highest among the feasible.
    let high = chosen.is_none_or(|ch| e.candidates.iter().filter(|c| c.feasible).all(|c| c.score <= ch.score));
    let mut others: Vec<&pb::CandidateScore> = e
        .candidates
        .iter()
        .filter(|c| c.feasible && Some(c.worker_id.as_str()) != chosen.map(|c| c.worker_id.as_str()))
        .collect();
    others.sort_by(|a, b| if high { b.score.total_cmp(&a.score) } else { a.score.total_cmp(&b.score) });
    let shown: Vec<&pb::CandidateScore> = chosen.into_iter().chain(others.iter().copied()).take(TOP).collect();
    let names = super::format::short_names(shown.iter().map(|c| c.worker_id.as_str()));
    let mut t = Table::new(&["", "WORKER", "SCORE", "WHY"]);
    for (c, name) in shown.iter().zip(names) {
        let is_chosen = chosen.is_some_and(|ch| ch.worker_id == c.worker_id);
        t.row(vec![
            if is_chosen { "*" } else { "" }.to_string(),
            name,
            number(c.score),
            in_words(c, chosen, is_chosen, high),
        ]);
    }
    let feasible = e.candidates.iter().filter(|c| c.feasible).count();
    out.push('\n');
    out.push_str(&t.render());
    let omitted = if e.omitted > 0 { format!(" (and {} more not kept)", e.omitted) } else { String::new() };
    out.push_str(&format!(
        "{} candidate(s){omitted}, {feasible} able to run it; -o wide lists every one kept with its features{}\n",
        e.candidates.len(),
        if feasible < e.candidates.len() { " (and why the others could not)" } else { "" }
    ));
    out
}

/// A candidate's score in words: the chosen one's, with its estimate; another's against it.
fn in_words(c: &pb::CandidateScore, chosen: Option<&pb::CandidateScore>, is_chosen: bool, high: bool) -> String {
    let est = match estimates_of(c) {
        (Some(f), Some(x)) => format!("; est. {} ms (fetch {} + compute {})", number(f + x), number(f), number(x)),
        _ => String::new(),
    };
    let note = if c.note.is_empty() { String::new() } else { format!("; {}", one_line(&c.note)) };
    if is_chosen {
        let best = if high { "the highest score" } else { "the lowest score" };
        return format!("chosen: {best} of those able to run it{est}{note}");
    }
    let Some(ch) = chosen else { return format!("score {}{est}{note}", number(c.score)) };
    let gap = (c.score - ch.score).abs();
    let side = if high { "lower" } else { "higher" };
    let slower = match (estimates_of(c), estimates_of(ch)) {
        ((Some(f), Some(x)), (Some(cf), Some(cx))) if f + x > cf + cx => {
            format!(" (est. {} ms slower)", number(f + x - cf - cx))
        }
        _ => String::new(),
    };
    if gap == 0.0 {
        format!("as good by score: a tie the placer broke{slower}{note}")
    } else {
        format!("{} {side} than the chosen{slower}{note}", number(gap))
    }
}

/// The decision's `key: value` lines.
fn decision(e: &pb::ExplainPlacementResponse, now_ms: u64) -> Vec<(&'static str, String)> {
    let mut pairs = vec![
        ("placer", e.placer.clone()),
        ("attempt", e.attempt.to_string()),
        ("chosen", dash(non_empty(&e.chosen_worker))),
        ("exploratory", yes_no(e.exploratory).to_string()),
        ("decided", age(e.decided_at, now_ms)),
        ("reason", dash(non_empty(&one_line(&e.reason)))),
    ];
    if !e.collective.is_empty() {
        // A collective member: which algorithm ran and why.
        pairs.push(("collective", one_line(&e.collective)));
    }
    if !e.learner.is_empty() {
        // The learned placer's record now: its departures from fastest and the guard.
        pairs.push(("learner", one_line(&e.learner)));
    }
    pairs
}

/// `plexus explain -o wide`: the decision, then one row per candidate with the chosen one marked
/// `*`. When candidates carry estimates, EST MS is their fetch + compute (each also in FEATURES,
/// with the samples behind it).
pub fn explain_wide(e: &pb::ExplainPlacementResponse, now_ms: u64) -> String {
    let mut out = fields(&decision(e, now_ms));
    if e.candidates.is_empty() {
        out.push_str("\nno candidates recorded\n");
        return out;
    }
    let estimated = e.candidates.iter().any(|c| matches!(estimates_of(c), (Some(_), Some(_))));
    let mut header = vec!["", "WORKER", "FEASIBLE", "SCORE"];
    if estimated {
        header.push("EST MS");
    }
    header.extend(["FEATURES", "NOTE"]);
    let mut t = Table::new(&header);
    for c in &e.candidates {
        let chosen = !e.chosen_worker.is_empty() && c.worker_id == e.chosen_worker;
        let features: Vec<String> = c.features.iter().map(|f| format!("{}={}", f.name, number(f.value))).collect();
        let mut row = vec![
            if chosen { "*" } else { "" }.to_string(),
            c.worker_id.clone(),
            yes_no(c.feasible).to_string(),
            // An infeasible candidate was never scored in earnest.
            if c.feasible { number(c.score) } else { "-".to_string() },
        ];
        if estimated {
            row.push(match estimates_of(c) {
                (Some(f), Some(x)) => number(f + x),
                _ => "-".to_string(),
            });
        }
        row.extend([features.join(" "), one_line(&c.note)]);
        t.row(row);
    }
    out.push('\n');
    out.push_str(&t.render());
    out
}

#[derive(Debug, Serialize)]
pub struct ExplainView {
    pub placer: String,
    pub attempt: u32,
    pub chosen_worker: Option<String>,
    pub exploratory: bool,
    pub reason: Option<String>,
    pub decided_at_ms: Option<u64>,
    /// A collective member's latest attempt: which algorithm ran and why.
    pub collective: Option<String>,
    /// The learned placer's record (departures from fastest, the guard); null for a heuristic.
    pub learner: Option<String>,
    pub candidates: Vec<CandidateView>,
    /// Candidates considered and not kept (a decision keeps the chosen and the best 31).
    pub omitted: u32,
}

#[derive(Debug, Serialize)]
pub struct CandidateView {
    pub worker_id: String,
    pub chosen: bool,
    pub feasible: bool,
    pub score: f64,
    pub features: BTreeMap<String, f64>,
    /// Its estimated fetch and compute, ms (also in `features`); null where none was made.
    pub est_fetch_ms: Option<f64>,
    pub est_compute_ms: Option<f64>,
    pub note: Option<String>,
}

pub fn explain_view(e: &pb::ExplainPlacementResponse) -> ExplainView {
    ExplainView {
        placer: e.placer.clone(),
        attempt: e.attempt,
        chosen_worker: non_empty(&e.chosen_worker),
        exploratory: e.exploratory,
        reason: non_empty(&e.reason),
        decided_at_ms: time(e.decided_at),
        collective: non_empty(&e.collective),
        learner: non_empty(&e.learner),
        omitted: e.omitted,
        candidates: e
            .candidates
            .iter()
            .map(|c| CandidateView {
                worker_id: c.worker_id.clone(),
                chosen: !e.chosen_worker.is_empty() && c.worker_id == e.chosen_worker,
                feasible: c.feasible,
                score: c.score,
                features: c.features.iter().map(|f| (f.name.clone(), f.value)).collect(),
                est_fetch_ms: estimates_of(c).0,
                est_compute_ms: estimates_of(c).1,
                note: non_empty(&c.note),
            })
            .collect(),
    }
}
