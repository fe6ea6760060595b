//! Where a task's inputs come from and what fetching them costs: the holders of an object, the
//! memory tier between two nodes, the fetch estimate a placer sees, and caching a fetched copy.
//! The event loop calls these as methods; only this file imports its parent.

use super::{Node, Sim};
use crate::cache::Pin;
use crate::config::Tier;
use crate::estimates;

impl Sim<'_> {
    /// The fetch estimate of task `g` on node `n`. Exact: what `start` would charge for the
    /// fetches if the task ran here now (eviction aside): the simulator knows the tiers, every
    /// copy and the engines. Measured: the coordinator's estimator over `sources` (each
    /// input's first holders), inputs the node holds in any memory counting as resident.
    pub(super) fn est_fetch_ms(&self, g: usize, n: &Node, sources: &[Vec<usize>]) -> Option<f64> {
        match &self.measured {
            None => Some(
                self.inputs[g]
                    .iter()
                    .filter(|&&o| !n.cache.contains(o))
                    .map(|&o| self.fetch_cost(o, n.spec.index))
                    .sum::<u64>() as f64
                    / 1e3,
            ),
            Some(m) => {
                let i = n.spec.index;
                let held = |o: usize| self.objects[o].home == i || self.objects[o].holders.binary_search(&i).is_ok();
                m.fetch_ms(
                    i,
                    self.inputs[g].iter().zip(sources).map(|(&o, s)| (self.objects[o].bytes, s.as_slice(), held(o))),
                )
            }
        }
    }

    /// The first [`estimates::RANKED_HOLDERS`] nodes holding a copy of `o` (in fast memory, or
    /// its home), in index order.
    pub(super) fn sources(&self, o: usize) -> Vec<usize> {
        let obj = &self.objects[o];
        let mut v = obj.holders.clone();
        if let Err(i) = v.binary_search(&obj.home) {
            v.insert(i, obj.home);
        }
        v.truncate(estimates::RANKED_HOLDERS);
        v
    }

    pub(super) fn tier(&self, to: usize, from: usize) -> &Tier {
        let tiers = &self.config.cluster.tiers;
        if to == from {
            &tiers.local
        } else if self.nodes[to].spec.rack == self.nodes[from].spec.rack {
            &tiers.rack
        } else {
            &tiers.remote
        }
    }

    /// The cheapest way to bring object `o` to node `n`, which does not hold it in fast memory.
    pub(super) fn fetch_cost(&self, o: usize, n: usize) -> u64 {
        self.fetch_source(o, n).0
    }

    /// [`Sim::fetch_cost`] and the node it comes from: the home copy, or the first holder in
    /// index order that is strictly cheaper.
    pub(super) fn fetch_source(&self, o: usize, n: usize) -> (u64, usize) {
        let obj = &self.objects[o];
        let mut best = (self.transfer_us(obj.bytes, n, obj.home), obj.home);
        for &h in &obj.holders {
            let c = self.transfer_us(obj.bytes, n, h);
            if c < best.0 {
                best = (c, h);
            }
        }
        best
    }

    /// Microseconds to move `bytes` from node `from` to node `to`; with shared links
    /// (`Hidden::shared_links`), `from`'s link is shared with the fetches reading from it now.
    fn transfer_us(&self, bytes: u64, to: usize, from: usize) -> u64 {
        let tier = self.tier(to, from);
        let sharers = if self.config.hidden.shared_links && to != from { self.nodes[from].sending } else { 0 };
        if sharers == 0 {
            tier.transfer_us(bytes)
        } else {
            tier.latency_us + (bytes as f64 * (sharers + 1) as f64 * 1e6 / tier.bytes_per_s).ceil() as u64
        }
    }

    /// Inserts `o` pinned into node `n`'s fast memory; returns the bytes evicted.
    pub(super) fn cache_insert(&mut self, n: usize, o: usize, pinned: &mut Vec<usize>) -> u64 {
        let Some(evicted) = self.nodes[n].cache.insert(o, self.objects[o].bytes, Pin::Pinned) else { return 0 };
        let mut bytes = 0;
        for (v, b) in evicted {
            bytes += b;
            let h = &mut self.objects[v].holders;
            if let Ok(i) = h.binary_search(&n) {
                h.remove(i);
            }
        }
        if let Err(i) = self.objects[o].holders.binary_search(&n) {
            self.objects[o].holders.insert(i, n);
        }
        pinned.push(o);
        bytes
    }
}
