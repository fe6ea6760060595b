//! Receiver-aware striping for an exchange (issue 30): the rates each of its messages can expect
//! on each rail, from both ends' measured rail rates and how many messages share each end at
//! once, which the transport stripes the message by
//! ([`Endpoint::send_at_rates`](crate::Endpoint::send_at_rates), [`crate::striping::shares`]).
//!
//! Whose rates: this rank's own, as its endpoint measures them now
//! ([`Endpoint::rail_rates`](crate::Endpoint::rail_rates)); every other rank's as it told them
//! in the last `auto` call's agreement round (`meter::agree`), or, before any such round, taken
//! to be like this rank's (a cluster's nodes are alike unless they said otherwise). Rail rates
//! are measured on the way out; a NIC moves as much in as out, so they stand for the receiving
//! side too.
//!
//! How many share: along a schedule's steps every step is a matching (each rank sends one
//! message and receives one; a step's last segments overlap the next step's first at most);
//! sending everything at once, a rank sends as many messages as its row of the table has
//! non-empty entries (itself left out) and a receiver takes as many as its column has.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::schedule::ComTable;
use crate::endpoint::Endpoint;
use crate::error::Result;
use crate::striping::shares;

/// Every rank's rail rates as last agreed, and whether messages are striped by them at all.
#[derive(Debug)]
pub(crate) struct GroupRails {
    on: bool,
    agreed: Mutex<Option<Vec<Vec<Option<f64>>>>>,
}

/// How many messages share each end of the messages of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sharing {
    /// Messages this rank sends at once.
    pub(crate) sending: usize,
    /// Messages each rank receives at once, in rank order.
    pub(crate) receiving: Vec<usize>,
}

impl Sharing {
    /// For a call of `table` run by rank `me`: every message at once (`direct`), or along steps.
    pub(crate) fn of(table: &ComTable, me: usize, direct: bool) -> Sharing {
        let n = table.n();
        if !direct {
            return Sharing { sending: 1, receiving: vec![1; n] };
        }
        let sending = (0..n).filter(|&j| j != me && table.get(me, j) > 0).count();
        let receiving = (0..n).map(|j| (0..n).filter(|&i| i != j && table.get(i, j) > 0).count()).collect();
        Sharing { sending, receiving }
    }
}

impl GroupRails {
    pub(crate) fn new(on: bool) -> GroupRails {
        GroupRails { on, agreed: Mutex::new(None) }
    }

    /// Every rank's rates as an agreement round gave them, in rank order.
    pub(crate) fn set_agreed(&self, rails: Vec<Vec<Option<f64>>>) {
        *self.agreed.lock().expect("rails lock") = Some(rails);
    }

    /// The rates a message from this rank (whose rails measure `own` now) to rank `to` can
    /// expect, or `None` to leave it to the rail scheduler: striping by shares is off, or a rate
    /// at either end is not measured yet.
    pub(crate) fn message_rates(&self, own: &[Option<f64>], to: usize, sharing: &Sharing) -> Option<Vec<f64>> {
        if !self.on {
            return None;
        }
        let agreed = self.agreed.lock().expect("rails lock");
        let receiver = agreed.as_ref().and_then(|a| a.get(to)).map_or(own, Vec::as_slice);
        shares::message_rates(own, sharing.sending, receiver, sharing.receiving.get(to).copied().unwrap_or(1))
    }

    /// Sends `data` to rank `to` (at `addrs`) under `tag`: striped by the shares of the rates
    /// the message can expect at both ends where they are known, by the rail scheduler
    /// otherwise. `handed`, when given, is dropped once no more than the message's last segment
    /// per rail is unacknowledged; the future ends when the message is acknowledged.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send(
        &self,
        ep: Arc<Endpoint>,
        addrs: Vec<SocketAddr>,
        to: usize,
        tag: u64,
        data: Bytes,
        sharing: &Sharing,
        handed: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let rates = self.message_rates(&ep.rail_rates(), to, sharing);
        async move { ep.send_striped(&addrs, tag, data, rates, handed).await }
    }

    /// A line for what an exchange ran: how its messages were striped.
    pub(crate) fn describe(&self, own: &[Option<f64>]) -> String {
        if !self.on {
            return "rails: the rail scheduler's own striping".into();
        }
        let rates: Vec<String> = own.iter().map(|r| r.map_or("?".into(), |r| format!("{:.1}", r / 1e6))).collect();
        let whose = if self.agreed.lock().expect("rails lock").is_some() {
            "every rank's as agreed"
        } else {
            "the others' taken to be like this rank's"
        };
        format!(
            "rails: each message striped by shares of both ends' measured rail rates (this rank's {} MB/s; {whose}), a rail whose share is under {} KiB left out",
            rates.join(" / "),
            shares::MIN_SHARE >> 10
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharing_counts_messages_at_once() {
        // Rank 0 sends to 1 and 2 (not 3, not counting itself); rank 3 receives from 1 and 2.
        let rows = vec![vec![5, 1, 1, 0], vec![1, 0, 0, 1], vec![0, 1, 0, 1], vec![1, 0, 0, 0]];
        let t = ComTable::from_rows(&rows).unwrap();
        let d = Sharing::of(&t, 0, true);
        assert_eq!(d, Sharing { sending: 2, receiving: vec![2, 2, 1, 2] });
        assert_eq!(Sharing::of(&t, 0, false), Sharing { sending: 1, receiving: vec![1; 4] });
    }

    #[test]
    fn a_receivers_agreed_rates_bound_the_message() {
        let own = [Some(250e6), Some(250e6)];
        let g = GroupRails::new(true);
        let steps = Sharing { sending: 1, receiving: vec![1, 1, 3] };
        // Nothing agreed: the receiver is taken to be like this rank.
        assert_eq!(g.message_rates(&own, 1, &steps), Some(vec![250e6, 250e6]));
        assert_eq!(g.message_rates(&own, 2, &steps), Some(vec![250e6 / 3.0, 250e6 / 3.0]));
        g.set_agreed(vec![own.to_vec(), vec![Some(250e6), Some(25e6)], vec![Some(100e6), None]]);
        assert_eq!(g.message_rates(&own, 1, &steps), Some(vec![250e6, 25e6]));
        assert_eq!(g.message_rates(&own, 2, &steps), None, "rank 2's second rail is not measured");
        assert_eq!(g.message_rates(&[Some(1.0), None], 1, &steps), None, "nor this rank's");
        assert!(g.describe(&own).contains("250.0 / 250.0 MB/s; every rank's as agreed"));
        let off = GroupRails::new(false);
        assert_eq!(off.message_rates(&own, 1, &steps), None);
        assert!(off.describe(&own).contains("scheduler"));
    }
}
