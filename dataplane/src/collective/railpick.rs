//! Every rail, or the fastest alone: an `auto` communicator's choice, per size of call, of the
//! rails its messages go on, from how long its own calls took each way (issue 30: "two rails
//! never slower than one").
//!
//! Striping pays when the rails add bandwidth faster than they add cost. On a host whose cores
//! are busy (more ranks than cores, say), a second rail's connections add work for the same
//! cores, and measured on the rail rig with 8 ranks on 2 cores a ring over both rails took
//! 1358 ms where the fast rail alone took 722. No model of the host predicts that reliably, so
//! the communicator measures: the first call of a size class (a power of two of bytes) warms
//! the connections, the next [`EXPLORE`] calls alternate between the fastest rail alone and
//! every rail, and from then on each call goes the way whose recent calls (the last
//! [`KEEP`]) have the lower median, trying the other way once every [`PROBE`] calls so that a
//! change (load that ends, a rail that recovers) is seen.
//!
//! The choice is each rank's own: a receiver takes a message's segments on whichever rails they
//! come, so ranks that choose differently still agree on every result.

use std::collections::HashMap;
use std::sync::Mutex;

/// Calls of a size class that alternate the two ways after the first.
pub const EXPLORE: u64 = 6;
/// Samples kept per way and class.
pub const KEEP: usize = 5;
/// Once decided, one call in this many goes the other way.
pub const PROBE: u64 = 32;
/// Size classes remembered (powers of two: no more than 64 can exist).
const CLASSES: usize = 64;

/// Which rails a call's messages go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rails {
    /// Every rail, striped by the rail scheduler.
    Every,
    /// The fastest rail as measured (rail 0 before any measurement).
    Fastest,
}

#[derive(Default)]
struct Class {
    calls: u64,
    every: Vec<f64>,
    fastest: Vec<f64>,
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some(s[s.len() / 2])
}

impl Class {
    fn samples(&mut self, r: Rails) -> &mut Vec<f64> {
        match r {
            Rails::Every => &mut self.every,
            Rails::Fastest => &mut self.fastest,
        }
    }

    /// The way with the lower median so far (every rail on a tie or without samples).
    fn better(&self) -> Rails {
        match (median(&self.every), median(&self.fastest)) {
            (Some(e), Some(f)) if f < e => Rails::Fastest,
            _ => Rails::Every,
        }
    }
}

/// The per-class choices of one communicator.
#[derive(Default)]
pub struct RailPicker {
    classes: Mutex<HashMap<u32, Class>>,
}

fn class_of(bytes: u64) -> u32 {
    64 - bytes.max(1).leading_zeros()
}

fn other(r: Rails) -> Rails {
    match r {
        Rails::Every => Rails::Fastest,
        Rails::Fastest => Rails::Every,
    }
}

impl RailPicker {
    /// The rails for the next call of `bytes`.
    pub fn pick(&self, bytes: u64) -> Rails {
        let mut classes = self.classes.lock().expect("rail picker lock");
        if classes.len() >= CLASSES && !classes.contains_key(&class_of(bytes)) {
            return Rails::Every;
        }
        let c = classes.entry(class_of(bytes)).or_default();
        let k = c.calls;
        c.calls += 1;
        match k {
            0 => Rails::Every,
            k if k <= EXPLORE => {
                if k % 2 == 1 {
                    Rails::Fastest
                } else {
                    Rails::Every
                }
            }
            k if k % PROBE == 0 => other(c.better()),
            _ => c.better(),
        }
    }

    /// A call of `bytes` that went on `rails` took `secs` (a call that failed is not recorded).
    /// The first call of a class is left out: it pays for connections and the first rates.
    pub fn record(&self, bytes: u64, rails: Rails, secs: f64) {
        let mut classes = self.classes.lock().expect("rail picker lock");
        let Some(c) = classes.get_mut(&class_of(bytes)) else { return };
        if c.calls <= 1 || !secs.is_finite() {
            return;
        }
        let s = c.samples(rails);
        s.push(secs);
        if s.len() > KEEP {
            s.remove(0);
        }
    }

    /// The way calls of `bytes` go now (after exploring), for a line of `explain`.
    pub fn settled(&self, bytes: u64) -> Option<Rails> {
        let classes = self.classes.lock().expect("rail picker lock");
        classes.get(&class_of(bytes)).filter(|c| c.calls > EXPLORE + 1).map(Class::better)
    }
}

/// The rates that send a message on the fastest of `rates` alone (rail 0 where none is
/// measured): that rail's rate, every other 0.
pub fn fastest_only(rates: &[Option<f64>]) -> Vec<f64> {
    let best = rates
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.filter(|r| r.is_finite() && *r > 0.0).map(|r| (i, r)))
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
    let mut out = vec![0.0; rates.len().max(1)];
    match best {
        Some((i, r)) => out[i] = r,
        None => out[0] = 1.0,
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `calls` calls of `bytes` where a call on every rail takes `every` s and on the
    /// fastest alone `fastest` s; the ways taken.
    fn run(p: &RailPicker, bytes: u64, calls: usize, every: f64, fastest: f64) -> Vec<Rails> {
        (0..calls)
            .map(|_| {
                let r = p.pick(bytes);
                p.record(bytes, r, if r == Rails::Every { every } else { fastest });
                r
            })
            .collect()
    }

    #[test]
    fn explores_then_keeps_the_faster_way_and_probes_the_other() {
        let p = RailPicker::default();
        let ways = run(&p, 64 << 20, 70, 1.3, 0.7);
        use Rails::*;
        assert_eq!(ways[..7], [Every, Fastest, Every, Fastest, Every, Fastest, Every]);
        assert!(ways[7..32].iter().all(|&w| w == Fastest), "{ways:?}");
        assert_eq!(ways[32], Every, "a probe of the other way");
        assert_eq!(ways[64], Every);
        assert_eq!(ways.iter().filter(|&&w| w == Every).count(), 4 + 2);
        assert_eq!(p.settled(64 << 20), Some(Fastest));
        // Striping that pays stays on.
        let p = RailPicker::default();
        let ways = run(&p, 64 << 20, 40, 0.6, 1.0);
        assert!(ways[7..32].iter().all(|&w| w == Every), "{ways:?}");
        assert_eq!(ways[32], Fastest);
    }

    #[test]
    fn size_classes_decide_apart_and_follow_a_change() {
        let p = RailPicker::default();
        run(&p, 1 << 20, 10, 1.0, 2.0);
        run(&p, (1 << 26) + 5, 10, 2.0, 1.0);
        assert_eq!(p.settled(1 << 20), Some(Rails::Every));
        assert_eq!(p.settled(1 << 26), Some(Rails::Fastest), "same class: 64 MiB to 128 MiB - 1");
        assert_eq!(p.settled(1 << 10), None, "no calls yet");
        // The fastest rail gets slow: KEEP samples later, probes included, every rail wins.
        let ways = run(&p, 1 << 26, 32 * (KEEP + 1), 2.0, 3.0);
        assert_eq!(p.settled(1 << 26), Some(Rails::Every), "{ways:?}");
    }

    #[test]
    fn the_fastest_rail_alone() {
        assert_eq!(fastest_only(&[Some(2.0), Some(5.0), None]), vec![0.0, 5.0, 0.0]);
        assert_eq!(fastest_only(&[None, None]), vec![1.0, 0.0]);
        assert_eq!(fastest_only(&[Some(f64::NAN), Some(0.0)]), vec![1.0, 0.0]);
        assert_eq!(fastest_only(&[]), vec![1.0]);
    }
}
