//! The connection to etcd: its own runtime (so synchronous callers wait on it from any
//! thread), requests retried while etcd cannot be reached, writes fenced on the leader's
//! election key, and the start-up lock.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, Txn, TxnOp};

use super::url::EtcdUrl;
use crate::error::Error;
use crate::store::Pairs;

/// Log or snapshot entries per read while loading (at most [`PART`] bytes each).
const READ_PAGE: i64 = 24;
/// The largest response the client accepts: a page of parts, with room to spare.
const MAX_RESPONSE: usize = 64 << 20;
/// How long one etcd request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a write is retried while etcd cannot be reached.
const WRITE_RETRY: Duration = Duration::from_secs(4);
/// HTTP/2 pings to etcd on an idle connection: no more often than etcd accepts by default
/// (`--grpc-keepalive-min-time 5s`); more often, etcd closes the connection (a standby waiting
/// in its campaign lost it every few seconds).
const KEEPALIVE_EVERY: Duration = Duration::from_secs(10);
/// How long connecting to etcd may take at start.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The leader's right to write: its election key and the revision that key was created at.
#[derive(Clone, Debug)]
pub struct Fence {
    pub key: Vec<u8>,
    pub rev: i64,
}

/// A connection to etcd with its own runtime, so the synchronous callers (the engine thread,
/// the auth layer) can wait on it from any thread.
#[derive(Clone)]
pub struct Etcd {
    inner: Arc<Inner>,
}

struct Inner {
    rt: RuntimeBox,
    /// Every request but those that wait: each may take at most [`REQUEST_TIMEOUT`].
    client: Client,
    /// For the requests that wait as long as they must (a standby's campaign).
    waiting: Client,
    url: EtcdUrl,
    /// `Some` while this coordinator leads: the condition of every write.
    fence: RwLock<Option<Fence>>,
}

/// A runtime that is shut down in the background when dropped (dropping a runtime inside an
/// async context would panic).
struct RuntimeBox(Option<tokio::runtime::Runtime>);

impl Drop for RuntimeBox {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

pub(super) fn etcd_error(what: impl std::fmt::Display) -> impl FnOnce(etcd_client::Error) -> Error {
    move |e| Error::Etcd(format!("{what}: {e}"))
}

impl Etcd {
    /// Connects (checking that etcd answers), from any thread.
    pub fn connect(url: &EtcdUrl) -> Result<Etcd, Error> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("plexus-etcd")
            .enable_all()
            .build()
            .map_err(|e| Error::Io("starting the etcd client's runtime".into(), e))?;
        let endpoints: Vec<String> = url.endpoints.iter().map(|e| format!("http://{e}")).collect();
        let shown = url.to_string();
        let (client, waiting) = run_on(rt.handle(), async move {
            let options = ConnectOptions::new()
                .with_connect_timeout(CONNECT_TIMEOUT)
                .with_keep_alive(KEEPALIVE_EVERY, Duration::from_secs(2));
            let client = Client::connect(endpoints.clone(), Some(options.clone().with_timeout(REQUEST_TIMEOUT)))
                .await
                .map_err(etcd_error(format!("connecting to {shown}")))?;
            // Connecting is lazy: ask for something so an unreachable etcd is reported now.
            client
                .kv_client()
                .get("/", Some(GetOptions::new().with_count_only()))
                .await
                .map_err(etcd_error(format!("reaching {shown}")))?;
            let waiting = Client::connect(endpoints, Some(options))
                .await
                .map_err(etcd_error(format!("connecting to {shown}")))?;
            Ok::<_, Error>((client, waiting))
        })??;
        Ok(Etcd {
            inner: Arc::new(Inner {
                rt: RuntimeBox(Some(rt)),
                client,
                waiting,
                url: url.clone(),
                fence: RwLock::new(None),
            }),
        })
    }

    pub fn url(&self) -> &EtcdUrl {
        &self.inner.url
    }

    pub(super) fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// A client without a request timeout, for calls that wait (the election's campaign).
    pub(super) fn waiting_client(&self) -> Client {
        self.inner.waiting.clone()
    }

    pub fn handle(&self) -> tokio::runtime::Handle {
        self.inner.rt.0.as_ref().expect("the runtime lives as long as the connection").handle().clone()
    }

    /// `P` + `rest`.
    pub fn key(&self, rest: &str) -> Vec<u8> {
        format!("{}{rest}", self.inner.url.prefix).into_bytes()
    }

    /// Runs `f` on the connection's runtime and waits for it, from any thread.
    pub fn block<T: Send + 'static>(
        &self,
        f: impl std::future::Future<Output = Result<T, Error>> + Send + 'static,
    ) -> Result<T, Error> {
        run_on(&self.handle(), f)?
    }

    /// From now on every write is conditional on `fence` (`None`: unconditional, before any
    /// leadership: the security set-up under its lock, administrative commands).
    pub fn set_fence(&self, fence: Option<Fence>) {
        *self.inner.fence.write().unwrap_or_else(|p| p.into_inner()) = fence;
    }

    pub fn fence(&self) -> Option<Fence> {
        self.inner.fence.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Runs `ops` in one transaction, under the fence when there is one. A failure to reach
    /// etcd is retried ([`retrying`]): every write of the store is idempotent (a put of a given
    /// value under a given key, or a delete), so a retry of one that did land changes nothing. A
    /// fenced refusal is never retried.
    pub fn write(&self, ops: Vec<TxnOp>) -> Result<etcd_client::TxnResponse, Error> {
        let fence = self.fence();
        let kv = self.inner.client.kv_client();
        self.block(async move {
            retrying(|| {
                let (mut kv, fence, ops) = (kv.clone(), fence.clone(), ops.clone());
                async move { write_async(&mut kv, fence, ops).await }
            })
            .await
        })
    }

    /// Every key-value pair in `[from, end)`, in key order, read a page at a time.
    pub fn range(&self, from: Vec<u8>, end: Vec<u8>) -> Result<Pairs, Error> {
        let kv = self.inner.client.kv_client().max_decoding_message_size(MAX_RESPONSE);
        self.block(async move { retrying(|| range_async(kv.clone(), from.clone(), end.clone())).await })
    }
}

/// Runs `f` again while etcd cannot be reached, for at most [`WRITE_RETRY`] (a member killed, an
/// election inside etcd); any other outcome is returned as it is.
async fn retrying<T, F, Fut>(mut f: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let start = Instant::now();
    let mut pause = Duration::from_millis(50);
    loop {
        match f().await {
            Err(Error::Etcd(e)) if start.elapsed() + pause < WRITE_RETRY => {
                tracing::debug!(error = e, "etcd request failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            r => return r,
        }
    }
}

/// The reading of [`Etcd::range`], one attempt.
async fn range_async(mut kv: etcd_client::KvClient, from: Vec<u8>, end: Vec<u8>) -> Result<Pairs, Error> {
    let mut out = Vec::new();
    let mut start = from;
    loop {
        let opts = GetOptions::new().with_range(end.clone()).with_limit(READ_PAGE);
        let mut r = kv.get(start, Some(opts)).await.map_err(etcd_error("reading from etcd"))?;
        let more = r.more();
        let kvs = r.take_kvs();
        let Some(last) = kvs.last() else { break };
        let mut next = last.key().to_vec();
        next.push(0);
        out.extend(kvs.into_iter().map(|p| p.into_key_value()));
        if !more {
            break;
        }
        start = next;
    }
    Ok(out)
}

impl Etcd {
    pub fn get(&self, key: Vec<u8>) -> Result<Option<Vec<u8>>, Error> {
        let kv = self.inner.client.kv_client().max_decoding_message_size(MAX_RESPONSE);
        self.block(async move {
            retrying(|| {
                let (mut kv, key) = (kv.clone(), key.clone());
                async move {
                    let mut r = kv.get(key, None).await.map_err(etcd_error("reading from etcd"))?;
                    Ok(r.take_kvs().into_iter().next().map(|p| p.into_key_value().1))
                }
            })
            .await
        })
    }
    /// Runs `f` holding etcd's lock `name` (on a lease of its own), so that coordinators that
    /// start together make the cluster's CA once.
    pub fn locked<T>(&self, name: &str, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        let client = self.client();
        let lock_name = self.key(&format!("/lock/{name}"));
        let (key, lease) = self.block(async move {
            let mut c = client;
            let lease = c.lease_grant(10, None).await.map_err(etcd_error("taking a lease for a lock"))?.id();
            let key = tokio::time::timeout(
                Duration::from_secs(30),
                c.lock(lock_name, Some(etcd_client::LockOptions::new().with_lease(lease))),
            )
            .await
            .map_err(|_| Error::Etcd("waited 30 s for etcd's start-up lock; another coordinator holds it".into()))?
            .map_err(etcd_error("taking etcd's start-up lock"))?
            .key()
            .to_vec();
            Ok((key, lease))
        })?;
        let out = f();
        let client = self.client();
        let _ = self.block(async move {
            let mut c = client;
            let _ = c.unlock(key).await;
            let _ = c.lease_revoke(lease).await;
            Ok(())
        });
        out
    }

    /// Checks `P/meta/version` against this binary's schema, writing it on a new store.
    pub fn check_version(&self) -> Result<(), Error> {
        let key = self.key("/meta/version");
        match self.get(key.clone())? {
            None => {
                self.write(vec![TxnOp::put(key, plexus_migrations::CURRENT.to_string(), None)])?;
                Ok(())
            }
            Some(v) => {
                let v: u32 = std::str::from_utf8(&v)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| Error::Corrupt { key: "meta/version".into(), reason: "not a number".into() })?;
                if v > plexus_migrations::CURRENT {
                    return Err(Error::Invalid(format!(
                        "the etcd store {} holds schema version {v}, newer than this binary's {}: run a newer plexus-coordinator",
                        self.inner.url,
                        plexus_migrations::CURRENT
                    )));
                }
                // Every version since the etcd store exists is the current one (v2); a later
                // migration rewrites the records of a loaded snapshot here.
                Ok(())
            }
        }
    }
}

/// Runs `f` on `rt` and waits for it from a synchronous caller (any thread, even one of another
/// runtime's workers, which a plain `block_on` would refuse).
fn run_on<T: Send + 'static>(
    rt: &tokio::runtime::Handle,
    f: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, Error> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(f.await);
    });
    rx.recv().map_err(|_| Error::Etcd("the etcd client's runtime stopped".into()))
}

async fn write_async(
    kv: &mut etcd_client::KvClient,
    fence: Option<Fence>,
    ops: Vec<TxnOp>,
) -> Result<etcd_client::TxnResponse, Error> {
    let mut txn = Txn::new();
    if let Some(f) = &fence {
        txn = txn.when(vec![Compare::create_revision(f.key.clone(), CompareOp::Equal, f.rev)]);
    }
    let r = kv.txn(txn.and_then(ops)).await.map_err(etcd_error("writing to etcd"))?;
    if !r.succeeded() {
        return Err(Error::Fenced);
    }
    Ok(r)
}

/// The end of the range of keys that start with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"ab"), b"ac");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }
}
