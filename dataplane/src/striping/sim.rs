//! A discrete-event simulation of the seed's model, for testing schedulers without a network:
//! a backlogged sender cuts segments and asks the scheduler for a rail, waits while the chosen
//! rail's queue holds `queue_max` segments, and each rail sends its queue FCFS, one segment at
//! a time, at its own rate. The peer acknowledges a segment `ack_delay` after it was sent.

use std::collections::VecDeque;
use std::time::Duration;

use super::rail::{RailScheduler, RailView};

pub struct SimConfig {
    /// Bytes/s per rail.
    pub rates: Vec<f64>,
    pub seg: u64,
    pub queue_max: usize,
    pub segments: usize,
    pub ack_delay: f64,
    /// At this fraction of the segments, rail `.1`'s rate becomes `.2`.
    pub change: Option<(f64, usize, f64)>,
    /// Seed 000's send timer: a rail's queue moves into its NIC (one segment of room) only at
    /// the timer's ticks, every this many seconds; `None`: the moment the NIC has room (what the
    /// data plane does).
    pub timer: Option<f64>,
}

#[derive(Debug)]
pub struct SimResult {
    pub secs: f64,
    pub bytes: Vec<u64>,
    /// Goodput before and after the rate change (bytes/s), if there was one.
    pub phases: Option<(f64, f64)>,
}

impl SimResult {
    pub fn goodput(&self) -> f64 {
        self.bytes.iter().sum::<u64>() as f64 / self.secs
    }
}

fn d(secs: f64) -> Duration {
    Duration::from_secs_f64(secs)
}

pub fn run(s: &mut dyn RailScheduler, cfg: &SimConfig) -> SimResult {
    let m = cfg.rates.len();
    let mut rates = cfg.rates.clone();
    let mut queue: Vec<VecDeque<f64>> = vec![VecDeque::new(); m];
    // Per rail: (segment start, finish) of the segment in service.
    let mut busy: Vec<Option<(f64, f64)>> = vec![None; m];
    let mut bytes = vec![0u64; m];
    let (mut issued, mut done) = (0usize, 0usize);
    let mut t = 0.0;
    let mut blocked: Option<usize> = None;
    let change_at = cfg.change.map(|(f, _, _)| (f * cfg.segments as f64) as usize);
    let mut change_time = None;
    let mut done_at_change = 0;
    let start_service = |i: usize,
                         t: f64,
                         queue: &mut Vec<VecDeque<f64>>,
                         busy: &mut Vec<Option<(f64, f64)>>,
                         rates: &[f64],
                         s: &mut dyn RailScheduler| {
        if busy[i].is_none()
            && let Some(entered) = queue[i].pop_front()
        {
            // With a send timer the segment waits for the next tick.
            let t = cfg.timer.map_or(t, |p| (t / p).ceil() * p);
            s.departed(i, d(entered), d(t));
            busy[i] = Some((t, t + cfg.seg as f64 / rates[i]));
        }
    };
    while done < cfg.segments {
        // The sender issues as long as it is not blocked.
        while issued < cfg.segments {
            let a = match blocked.take() {
                Some(a) => a,
                None => {
                    let views: Vec<RailView> = queue
                        .iter()
                        .zip(&busy)
                        .map(|(q, b)| RailView {
                            up: true,
                            queued: q.len(),
                            queued_bytes: q.len() as u64 * cfg.seg,
                            in_flight_bytes: if b.is_some() { cfg.seg } else { 0 },
                        })
                        .collect();
                    s.pick(&views, cfg.seg, d(t))
                }
            };
            if queue[a].len() >= cfg.queue_max {
                blocked = Some(a);
                break;
            }
            queue[a].push_back(t);
            issued += 1;
            start_service(a, t, &mut queue, &mut busy, &rates, s);
        }
        // Advance to the next completion.
        let (i, (started, fin)) = busy
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.map(|b| (i, b)))
            .min_by(|a, b| a.1.1.total_cmp(&b.1.1))
            .expect("something in service");
        t = fin;
        busy[i] = None;
        bytes[i] += cfg.seg;
        done += 1;
        s.delivered(i, cfg.seg, d(started), d(t + cfg.ack_delay));
        if Some(done) == change_at {
            let (_, rail, rate) = cfg.change.unwrap();
            rates[rail] = rate;
            change_time = Some(t);
            done_at_change = done;
        }
        start_service(i, t, &mut queue, &mut busy, &rates, s);
    }
    let phases = change_time.map(|ct| {
        let seg = cfg.seg as f64;
        (done_at_change as f64 * seg / ct, (done - done_at_change) as f64 * seg / (t - ct))
    });
    SimResult { secs: t, bytes, phases }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;

    const MB: f64 = 1e6;

    fn params(rails: usize, bandwidth: f64) -> SchedulerParams {
        SchedulerParams { rails, seg_max: 1 << 20, queue_max: 8, bandwidth, k: 8, seed: 42 }
    }

    fn sim(rates: &[f64], change: Option<(f64, usize, f64)>) -> SimConfig {
        SimConfig {
            rates: rates.to_vec(),
            seg: 1 << 20,
            queue_max: 8,
            segments: 6000,
            ack_delay: 0.001,
            change,
            timer: None,
        }
    }

    fn table(rates: &[f64], change: Option<(f64, usize, f64)>) -> Vec<(SchedulerKind, f64, SimResult)> {
        let bw = rates.iter().cloned().fold(0.0, f64::max);
        SchedulerKind::ALL
            .into_iter()
            .map(|k| {
                let mut s = build(k, &params(rates.len(), bw));
                let r = run(s.as_mut(), &sim(rates, change));
                let share = r.goodput() / rates.iter().sum::<f64>();
                eprintln!(
                    "{rates:?} {change:?} {k:>18}: goodput {:7.1} MB/s = {share:.3} of sum, bytes {:?}, phases {:?}",
                    r.goodput() / MB,
                    r.bytes.iter().map(|b| b >> 20).collect::<Vec<_>>(),
                    r.phases.map(|(a, b)| (a / MB, b / MB))
                );
                (k, share, r)
            })
            .collect()
    }

    #[test]
    fn simulated_heterogeneous_rails() {
        let two = table(&[250.0 * MB, 62.5 * MB], None);
        let three = table(&[187.5 * MB, 93.75 * MB, 31.25 * MB], None);
        let dynamic = table(&[250.0 * MB, 62.5 * MB], Some((0.5, 0, 62.5 * MB)));
        for t in [&two, &three] {
            let share = |k| t.iter().find(|r| r.0 == k).unwrap().1;
            // Round-robin is held to m × the slowest rail; weighted fills every rail.
            assert!(share(SchedulerKind::Weighted) > 0.95);
            assert!(share(SchedulerKind::Weighted) > 1.3 * share(SchedulerKind::RoundRobin));
        }
        let _ = dynamic;
    }

    /// Seed 000's send timer (10 ms – 1 s) measured against draining at once, on the rig's two
    /// rails (2 Gbit/s + 500 Mbit/s), 1 MiB segments, `weighted`: with a tick per segment of
    /// room the timer caps each rail at one segment per tick, so it only takes goodput away.
    #[test]
    fn the_seeds_send_timer_only_costs_goodput() {
        let rates = [250.0 * MB, 62.5 * MB];
        let goodput = |timer: Option<f64>| {
            let mut s = build(SchedulerKind::Weighted, &params(2, 250.0 * MB));
            let r = run(s.as_mut(), &SimConfig { timer, segments: 2000, ..sim(&rates, None) });
            r.goodput() / rates.iter().sum::<f64>()
        };
        let at_once = goodput(None);
        let ticks = [0.001, 0.01, 0.1].map(|p| (p, goodput(Some(p))));
        eprintln!("send timer: none {at_once:.3} of Σ rates; {ticks:?}");
        assert!(at_once > 0.95, "{at_once}");
        assert!(ticks[0].1 < 0.95 * at_once && ticks[1].1 < 0.6 && ticks[2].1 < 0.1, "{ticks:?}");
    }
}
