//! The learned placer's page, `/policy`, and its JSON, `/api/policy`: decisions, training
//! steps, exploration, the learning curve from the first training step, and the anchored
//! learner's record against `fastest` (its departures, what they gained, the guard).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::html;
use plexus_scheduler::placer::LearningStats;
use serde_json::{Value, json};

use super::Http as Dash;
use super::board::Sample;
use super::dashboard::{page, unavailable};
use crate::engine::Cmd;

fn policy_json(placer: &str, curve: &[Sample], now: Option<&LearningStats>) -> Value {
    let last = curve.last();
    // Decisions per second and exploration over the last minute of samples.
    let window =
        curve.iter().rev().find(|s| last.is_some_and(|l| l.at_ms.saturating_sub(s.at_ms) >= 60_000)).or(curve.first());
    let (rate, explore) = match (window, last) {
        (Some(a), Some(b)) if b.at_ms > a.at_ms => {
            let n = b.decisions.saturating_sub(a.decisions);
            (
                n as f64 * 1000.0 / (b.at_ms - a.at_ms) as f64,
                if n == 0 { 0.0 } else { b.exploratory.saturating_sub(a.exploratory) as f64 / n as f64 },
            )
        }
        _ => (0.0, 0.0),
    };
    let anchor = now.and_then(|l| l.anchor.as_ref()).map(|a| {
        json!({
            "decisions": a.decisions,
            "departures": a.departures,
            "departure_share": if a.decisions == 0 { 0.0 } else { a.departures as f64 / a.decisions as f64 },
            "judged": a.judged,
            "gain_ms": a.gain_ms,
            "gain_share": if a.anchor_ms > 0.0 { a.gain_ms / a.anchor_ms } else { 0.0 },
            "explored": a.explored,
            "withheld": a.withheld,
            "probes": a.probes,
            "fallbacks": a.fallbacks,
            "holding": a.holding,
        })
    });
    json!({
        "placer": placer,
        "decisions": now.map_or(last.map_or(0, |s| s.decisions), |l| l.decisions),
        "training_steps": now.map_or(last.map_or(0, |s| s.training_steps), |l| l.training_steps),
        "step_every": now.map_or(0, |l| l.step_every),
        "decisions_per_s": rate,
        "exploration": explore,
        "loss": now.and_then(|l| l.loss).or(last.and_then(|s| s.loss)),
        "curve": now.map(|l| l.curve.iter().map(|(s, v)| json!([s, v])).collect::<Vec<_>>()).unwrap_or_default(),
        "anchor": anchor,
    })
}

pub async fn api_policy(State(d): State<Dash>) -> Response {
    let (placer, now) = match d.engine.call(|reply| Cmd::Learning { reply }).await {
        Ok(v) => v,
        Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    };
    axum::Json(policy_json(placer, &d.board.curve(), now.as_ref())).into_response()
}

/// The learning curve's points in the chart's 640 × 220 box (x: training step, y: loss, 0 at
/// the bottom); one point is drawn as a short flat line, so a curve shows from its first step.
pub fn curve_points(curve: &[(u64, f64)]) -> String {
    if curve.is_empty() {
        return String::new();
    }
    let (x0, x1) = (curve[0].0 as f64, curve[curve.len() - 1].0 as f64);
    let y1 = curve.iter().map(|c| c.1).filter(|v| v.is_finite()).fold(0.0, f64::max);
    let y = |v: f64| 210.0 - 200.0 * if y1 > 0.0 && v.is_finite() { v / y1 } else { 0.0 };
    if curve.len() == 1 {
        return format!("10.0,{0:.1} 630.0,{0:.1}", y(curve[0].1));
    }
    curve
        .iter()
        .map(|&(s, v)| format!("{:.1},{:.1}", 10.0 + 620.0 * (s as f64 - x0) / (x1 - x0).max(1.0), y(v)))
        .collect::<Vec<_>>()
        .join(" ")
}

pub async fn policy_page(State(d): State<Dash>) -> Response {
    let (placer, now) = match d.engine.call(|reply| Cmd::Learning { reply }).await {
        Ok(v) => v,
        Err(e) => return unavailable(e),
    };
    let v = policy_json(placer, &d.board.curve(), now.as_ref());
    let points = now.as_ref().map(|l| curve_points(&l.curve)).unwrap_or_default();
    let no_step = format!("no training step yet (one runs every {} experiences)", v["step_every"]);
    let body = html! {
        h2 { "Learned placer" }
        @if !crate::learned::is_learned(placer) {
            p #not-learning { "This coordinator places with " b { (placer) } ", a heuristic: start it with " code { "--placer rl" } " to place with the learned policy." }
        } @else {
            table #policy { tbody {
                tr { th { "Placer" } td #placer { (placer) } }
                tr { th { "Decisions" } td #decisions { (v["decisions"]) } }
                tr { th { "Decisions per second (last minute)" } td #rate { (format!("{:.2}", v["decisions_per_s"].as_f64().unwrap_or(0.0))) } }
                tr { th { "Training steps" } td #steps { (v["training_steps"]) } }
                tr { th { "Exploration rate (last minute)" } td #explore { (format!("{:.3}", v["exploration"].as_f64().unwrap_or(0.0))) } }
                tr { th { "Latest training loss" } td #loss data-none=(no_step) { (v["loss"].as_f64().map(|l| format!("{l:.5}")).unwrap_or_else(|| no_step.clone())) } }
            } }
            (anchor_table(&v["anchor"]))
            h3 { "Learning curve: training loss by training step, from the first" }
            svg #curve xmlns="http://www.w3.org/2000/svg" width="640" height="220" viewBox="0 0 640 220" { rect width="640" height="220" fill="#fff" stroke="#e3e6ec" {} polyline #curve-line fill="none" stroke="#1f6feb" stroke-width="2" points=(points) {} }
        }
    };
    Html(page("Learned placer", "Learned placer", "policy", body).into_string()).into_response()
}

/// The anchored learner's record against `fastest` (`rl`); for `rl-seed`, that it has none.
fn anchor_table(a: &Value) -> maud::Markup {
    html! {
        h3 { "Against fastest (the anchor)" }
        @if a.is_null() {
            p #no-anchor { "This learner decides alone (the seed's configuration): no anchor, no guard." }
        } @else {
            table #anchor { tbody {
                tr { th { "Departures from fastest" } td #departures { (departures_text(a)) } }
                tr { th { "What the departures gained" } td #gain { (gain_text(a)) } }
                tr { th { "Exploration (within the budget)" } td #explored { (a["explored"]) } }
                tr { th { "Proposals kept as controls (at random)" } td #withheld { (a["withheld"]) } }
                tr { th { "Probes (once per worker and kind of work it had not run, within the budget)" } td #probes { (a["probes"]) } }
                tr { th { "Guard" } td #guard { (guard_text(a)) } }
                tr { th { "Guard fall-backs" } td #fallbacks { (a["fallbacks"]) } }
            } }
        }
    }
}

pub fn departures_text(a: &Value) -> String {
    format!(
        "{} of {} decisions ({:.1} %)",
        a["departures"],
        a["decisions"],
        a["departure_share"].as_f64().unwrap_or(0.0) * 100.0
    )
}

pub fn gain_text(a: &Value) -> String {
    match a["judged"].as_u64().unwrap_or(0) {
        0 => "none judged yet".into(),
        n => format!(
            "{:+.0} ms over {n} judged ({:+.1} % of fastest's estimated time for them)",
            a["gain_ms"].as_f64().unwrap_or(0.0),
            a["gain_share"].as_f64().unwrap_or(0.0) * 100.0
        ),
    }
}

pub fn guard_text(a: &Value) -> String {
    match a["holding"].as_str() {
        Some(why) => format!("holding the learner to fastest: {why}"),
        None => "trusts the learner".into(),
    }
}
