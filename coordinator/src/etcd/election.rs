//! What leader election needs of etcd ([`crate::ha`] uses it, and knows no etcd client): leases,
//! keys on a lease, the campaign that yields the leader's [`Fence`], who leads now, and the
//! stream that renews a lease.

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper, PutOptions};

use super::client::{Etcd, Fence, etcd_error};
use crate::error::Error;

/// An etcd lease, by its id.
pub type LeaseId = i64;

impl Etcd {
    /// A new lease of `ttl_s` seconds.
    pub async fn grant_lease(&self, ttl_s: i64) -> Result<LeaseId, Error> {
        Ok(self.client().lease_grant(ttl_s, None).await.map_err(etcd_error("granting a lease"))?.id())
    }

    /// Gives `lease` back: every key on it is deleted now.
    pub async fn revoke_lease(&self, lease: LeaseId) -> Result<(), Error> {
        self.client().lease_revoke(lease).await.map_err(etcd_error("revoking a lease"))?;
        Ok(())
    }

    /// Writes `key` on `lease` (it goes when the lease does), unfenced.
    pub async fn put_on_lease(&self, key: Vec<u8>, value: Vec<u8>, lease: LeaseId) -> Result<(), Error> {
        self.client()
            .put(key, value, Some(PutOptions::new().with_lease(lease)))
            .await
            .map_err(etcd_error("writing a key on a lease"))?;
        Ok(())
    }

    /// Campaigns in `election` with `value` (this coordinator's URL) on `lease`, waiting as long
    /// as another leads; once elected, the [`Fence`] every later write is conditional on.
    pub async fn campaign(&self, election: Vec<u8>, value: String, lease: LeaseId) -> Result<Fence, Error> {
        let mut r = self.waiting_client().campaign(election, value, lease).await.map_err(etcd_error("campaigning"))?;
        let leader = r.take_leader().ok_or_else(|| Error::Etcd("the election answered without a leader key".into()))?;
        Ok(Fence { key: leader.key().to_vec(), rev: leader.rev() })
    }

    /// The value (URL) of whoever leads `election` now; `None` when no one does.
    pub async fn leader(&self, election: Vec<u8>) -> Result<Option<String>, Error> {
        match self.client().leader(election).await {
            Ok(mut r) => Ok(r.take_kv().map(|kv| String::from_utf8_lossy(&kv.into_key_value().1).into_owned())),
            Err(e) if e.to_string().contains("no leader") => Ok(None),
            Err(e) => Err(etcd_error("asking who leads")(e)),
        }
    }

    /// Opens the stream that renews `lease`.
    pub async fn renewal(&self, lease: LeaseId) -> Result<LeaseRenewal, Error> {
        let (keeper, responses) =
            self.client().lease_keep_alive(lease).await.map_err(etcd_error("opening a lease keep-alive"))?;
        Ok(LeaseRenewal { keeper, responses })
    }
}

/// A lease's keep-alive stream.
pub struct LeaseRenewal {
    keeper: LeaseKeeper,
    responses: LeaseKeepAliveStream,
}

impl LeaseRenewal {
    /// Renews the lease once, waiting at most `within` for etcd's answer: the lease's remaining
    /// TTL in seconds (0 or less: it has expired).
    pub async fn renew(&mut self, within: std::time::Duration) -> Result<i64, Error> {
        self.keeper.keep_alive().await.map_err(etcd_error("renewing a lease"))?;
        match tokio::time::timeout(within, self.responses.message()).await {
            Ok(Ok(Some(r))) => Ok(r.ttl()),
            Ok(Ok(None)) => Err(Error::Etcd("the lease keep-alive stream ended".into())),
            Ok(Err(e)) => Err(etcd_error("renewing a lease")(e)),
            Err(_) => Err(Error::Etcd(format!("no answer to a lease renewal within {within:?}"))),
        }
    }
}
