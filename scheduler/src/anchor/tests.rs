use rand::SeedableRng;
use rand::rngs::StdRng;

use super::*;

/// A feasible candidate estimated at `est` ms (None: no estimate).
fn cand(n: u8, est: Option<f64>) -> Candidate {
    Candidate { est_fetch_ms: est.map(|_| 0.0), est_compute_ms: est, ..Candidate::example(n) }
}

fn no_explore() -> AnchorConfig {
    AnchorConfig { epsilon: 0.0, ..AnchorConfig::default() }
}

#[test]
fn an_untrained_learner_follows_the_anchor_whatever_it_scores() {
    let c = vec![cand(1, Some(100.0)), cand(2, Some(110.0))];
    let mut g = Guard::new(no_explore());
    let mut rng = StdRng::seed_from_u64(1);
    let d = g.decide(1, &c, 0, &[0.0, 5.0], false, &mut rng);
    assert_eq!((d.chosen, d.kind), (0, Kind::Followed));
    assert!(d.reason.contains("not finished a training step"), "{}", d.reason);
    // Trained, it departs: worker 2 is within the 25 % slack and its Q-value beats the margin.
    let d = g.decide(2, &c, 0, &[0.0, 5.0], true, &mut rng);
    assert_eq!((d.chosen, d.kind), (1, Kind::Departed));
    assert!(d.reason.contains("departed from fastest"), "{}", d.reason);
    assert_eq!(g.stats().departures, 1);
}

#[test]
fn departures_stay_within_the_slack_and_over_the_margin() {
    let mut g = Guard::new(no_explore());
    let mut rng = StdRng::seed_from_u64(1);
    // 130 ms is over 1.25 × 100 ms: no departure, however high its Q-value.
    let c = vec![cand(1, Some(100.0)), cand(2, Some(130.0))];
    assert_eq!(g.decide(1, &c, 0, &[0.0, 50.0], true, &mut rng).kind, Kind::Followed);
    // Within the slack but under the margin (2 % of max(|q|, 1)).
    let c = vec![cand(1, Some(100.0)), cand(2, Some(120.0))];
    assert_eq!(g.decide(2, &c, 0, &[10.0, 10.1], true, &mut rng).kind, Kind::Followed);
    assert_eq!(g.decide(3, &c, 0, &[10.0, 10.3], true, &mut rng).kind, Kind::Departed);
    // An infeasible candidate is never chosen, whatever its score.
    let mut c = vec![cand(1, Some(100.0)), cand(2, Some(100.0))];
    c[1].feasible = false;
    assert_eq!(g.decide(4, &c, 0, &[0.0, f64::NEG_INFINITY], true, &mut rng).chosen, 0);
}

#[test]
fn without_estimates_the_anchor_decides_alone() {
    let c = vec![cand(1, None), cand(2, Some(10.0))];
    let mut g = Guard::new(AnchorConfig { epsilon: 1.0, ..AnchorConfig::default() });
    let mut rng = StdRng::seed_from_u64(1);
    for id in 0..20 {
        let d = g.decide(id, &c, 1, &[9.0, 0.0], true, &mut rng);
        assert_eq!((d.chosen, d.kind), (1, Kind::Followed), "{}", d.reason);
    }
}

#[test]
fn exploration_picks_only_near_candidates() {
    // Worker 3 is over the slack: exploring never reaches it.
    let c = vec![cand(1, Some(100.0)), cand(2, Some(120.0)), cand(3, Some(400.0))];
    let mut g = Guard::new(AnchorConfig { epsilon: 1.0, ..AnchorConfig::default() });
    let mut rng = StdRng::seed_from_u64(7);
    for id in 0..200 {
        let d = g.decide(id, &c, 0, &[1.0, 0.0, 0.0], true, &mut rng);
        assert_eq!((d.chosen, d.kind), (1, Kind::Explored));
    }
    assert_eq!(g.stats().explored, 200);
}

/// Runs `n` decisions where the learner would depart to worker 2 (estimated 110 ms, fastest's
/// 100 ms): each departure takes `took` ms, each decision held to fastest's choice its estimate.
fn departures(g: &mut Guard, from: u64, n: u64, took: f64) -> Vec<Kind> {
    let c = vec![cand(1, Some(100.0)), cand(2, Some(110.0))];
    let mut rng = StdRng::seed_from_u64(1);
    (from..from + n)
        .map(|id| {
            let d = g.decide(id, &c, 0, &[0.0, 5.0], true, &mut rng);
            g.observe(id, if d.kind == Kind::Departed { took } else { 100.0 }, true);
            d.kind
        })
        .collect()
}

#[test]
fn the_guard_falls_back_when_departures_measure_worse_and_tries_again_after_the_cooldown() {
    let cfg = AnchorConfig { epsilon: 0.0, min_judged: 8, window: 32, cooldown: 20, ..AnchorConfig::default() };
    let mut g = Guard::new(cfg);
    // Departures that took 90 ms where fastest's choice was estimated at 100: they gain.
    assert!(departures(&mut g, 0, 40, 90.0).iter().all(|k| *k == Kind::Departed));
    let s = g.stats();
    assert_eq!((s.judged, s.fallbacks, s.holding), (40, 0, None));
    assert!((s.gain_ms - 400.0).abs() < 1e-6, "{}", s.gain_ms);
    // Then they take 150 ms: once the window's sum is over the anchor's, it falls back.
    let kinds = departures(&mut g, 40, 60, 150.0);
    let pattern: String = kinds
        .iter()
        .map(|k| match k {
            Kind::Departed => 'D',
            Kind::Followed => 'F',
            Kind::Explored => 'E',
            Kind::Withheld => 'W',
            Kind::Probed => 'P',
        })
        .collect();
    // The window (32 judged) held +10 ms × 32 in hand: the sixth 150 ms departure tips it. Then
    // 20 decisions as fastest, a fresh window, and 8 losing departures (min_judged) tip it again.
    let expect = format!("{}{}{}{}{}", "D".repeat(6), "F".repeat(20), "D".repeat(8), "F".repeat(20), "D".repeat(6));
    assert_eq!(pattern, expect);
    assert_eq!((g.stats().fallbacks, g.stats().holding), (2, None));
    // Two more losing departures complete the fresh window's eight: held again.
    assert_eq!(departures(&mut g, 100, 2, 150.0), [Kind::Departed, Kind::Departed]);
    let s = g.stats();
    assert_eq!(s.fallbacks, 3);
    let why = s.holding.expect("holding now");
    assert!(why.contains("longer than fastest's choices were estimated"), "{why}");
    // Held decisions say so.
    let c = vec![cand(1, Some(100.0)), cand(2, Some(110.0))];
    let d = g.decide(1000, &c, 0, &[0.0, 5.0], true, &mut StdRng::seed_from_u64(1));
    assert_eq!(d.kind, Kind::Followed);
    assert!(d.reason.contains("guard holds"), "{}", d.reason);
}

#[test]
fn the_guard_judges_against_calibrated_estimates() {
    // Every followed choice took twice its estimate: a departure that took 180 ms where fastest's
    // choice was estimated at 100 gained (expected 200).
    let mut g = Guard::new(no_explore());
    let c = vec![cand(1, Some(100.0)), cand(2, Some(110.0))];
    let mut rng = StdRng::seed_from_u64(1);
    for id in 0..10 {
        assert_eq!(g.decide(id, &c, 0, &[5.0, 0.0], true, &mut rng).kind, Kind::Followed);
        g.observe(id, 200.0, true);
    }
    assert!((g.calibration() - 2.0).abs() < 1e-9);
    departures(&mut g, 10, 20, 180.0);
    let s = g.stats();
    assert_eq!((s.judged, s.fallbacks), (20, 0));
    assert!((s.gain_ms - 20.0 * 20.0).abs() < 1e-6, "{}", s.gain_ms);
    // A failed attempt or an unknown decision is not judged.
    g.observe(12345, 1.0, true);
    departures(&mut g, 30, 1, f64::NAN);
    assert_eq!(g.stats().judged, 20);
}

/// Proposals (the learned correction's) are departures that a random tenth of the time are
/// kept as controls; they are judged against what the controls took, not against the followed
/// decisions' calibration, which is biased against them (they go where the anchor's estimate is
/// wrong).
#[test]
fn proposals_are_judged_against_random_controls() {
    let c = vec![cand(1, Some(100.0)), cand(2, Some(200.0))];
    let mut rng = StdRng::seed_from_u64(3);
    let mut g = Guard::new(no_explore());
    // Followed decisions run as estimated: calibration 1.
    for id in 0..10 {
        assert_eq!(g.decide(id, &c, 0, &[0.0, 0.0], true, &mut rng).kind, Kind::Followed);
        g.observe(id, 100.0, true);
    }
    // Where the learner proposes worker 2 (estimated 200 ms, outside the slack), fastest's
    // choice really takes 400 ms and the proposal 250 ms: a gain the calibration of 1 would read
    // as a 150 % loss.
    let mut kinds = Vec::new();
    for id in 10..210 {
        let d = g.decide_with(id, &c, 0, &[0.0, 0.0], true, Some((1, "corrected".into())), &mut rng);
        g.observe(id, if d.chosen == 0 { 400.0 } else { 250.0 }, true);
        kinds.push(d.kind);
    }
    let withheld = kinds.iter().filter(|k| **k == Kind::Withheld).count();
    assert!((10..=35).contains(&withheld), "{withheld} controls of 200");
    assert!(kinds.iter().all(|k| matches!(k, Kind::Departed | Kind::Withheld)), "the guard never held it back");
    let s = g.stats();
    assert_eq!(s.fallbacks, 0);
    assert!(s.judged > 0 && s.judged < s.departures, "departures before the eighth control are not judged");
    assert!((s.gain_ms / s.judged as f64 - 150.0).abs() < 1e-6, "{}", s.gain_ms / s.judged as f64);
    // A proposal that really loses against the controls is held back.
    let mut g2 = Guard::new(no_explore());
    let mut held = false;
    for id in 0..400 {
        let d = g2.decide_with(id, &c, 0, &[0.0, 0.0], true, Some((1, "corrected".into())), &mut rng);
        held |= d.reason.contains("holds the learner back");
        g2.observe(id, if d.chosen == 0 { 100.0 } else { 250.0 }, true);
    }
    assert!(held && g2.stats().fallbacks > 0);
}

#[test]
fn probes_are_counted_apart_not_judged_and_not_held_back() {
    let cfg = AnchorConfig { epsilon: 0.0, min_judged: 8, window: 32, cooldown: 50, ..AnchorConfig::default() };
    let mut g = Guard::new(cfg);
    // Losing departures make the guard hold the learner back.
    departures(&mut g, 0, 8, 150.0);
    assert!(g.stats().holding.is_some());
    let judged = g.stats().judged;
    let p = g.probe(1, "a class not learnt".into());
    assert_eq!((p.chosen, p.kind), (1, Kind::Probed));
    assert!(p.reason.starts_with("probe: a class not learnt"), "{}", p.reason);
    // A probe's outcome, however long, is not judged.
    g.observe(8, 1e6, true);
    let s = g.stats();
    assert_eq!((s.probes, s.judged, s.departures, s.decisions), (1, judged, 8, 9));
}
