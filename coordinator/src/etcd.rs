//! State in etcd (issue 19): the only module that knows etcd.
//!
//! Layout under the prefix `P` of `--store etcd://host:port,…/P` (default `/plexus`):
//!
//! - `P/meta/version`: the schema version of the records (`plexus_migrations::CURRENT`).
//! - `P/state/log/<seq, 16 hex>`: the engine's committed rounds, an append-only log. A round is
//!   its changed records (the v2 keys of `plexus-migrations` and their JSON values, or a
//!   deletion), framed ([`encode_items`]) and lz4-compressed, then cut into parts of at most
//!   [`PART`] bytes, one entry each: every entry is one transaction, well inside etcd's request
//!   limit (1.5 MiB) and its 128 operations. Each entry names its round (the seq of its first
//!   part) and whether it is the last; a round counts only once its last part is there, so a
//!   leader that dies half-way through a 10,000-subtask submission leaves nothing acknowledged.
//! - `P/state/snap/<seq>/<part>` and `P/state/snapshot`: every record as of log entry `seq`,
//!   compressed and cut the same way, written in the background once the log since the last
//!   snapshot passes [`SNAPSHOT_AFTER_BYTES`] or [`SNAPSHOT_AFTER_ENTRIES`]; the pointer
//!   `P/state/snapshot` is written last, in one transaction that also deletes the log up to
//!   `seq` and the older snapshots. etcd's own history is then compacted up to the previous
//!   snapshot's revision, so the database stays bounded.
//! - `P/kv/<space>/<key>`: the small namespaces ([`crate::store::Spaces`]: security, policy,
//!   queues, estimates), one etcd key per record; a value over [`PART`] bytes (a large network's
//!   weights) is stored in parts under `P/chunks/<space>/…` with a pointer written last.
//! - `P/election`: the leader election (etcd's election API; each candidate's value is its
//!   advertised URL); `P/members/<id>`: each running coordinator, on its lease.
//!
//! **Fencing.** Once a coordinator leads, every write it makes is a transaction whose condition
//! is that its election key still exists with the revision it was created at ([`Fence`]). That
//! key lives on the leader's lease: when the lease expires (a paused or partitioned leader), the
//! key is gone and every later write of the old leader is refused ([`Error::Fenced`]), whatever
//! its own clock believes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, Txn, TxnOp};

use plexus_scheduler::core::Snapshot;

use crate::error::Error;
use crate::store::{Batch, Kv, Pairs, SharedKv, Spaces, Store};

/// The largest value or log part written in one request: etcd refuses requests over 1.5 MiB
/// by default, and a part travels with its key and the fencing condition.
pub const PART: usize = 1 << 20;
/// A snapshot is written once the log since the last one holds this many bytes…
pub const SNAPSHOT_AFTER_BYTES: u64 = 32 << 20;
/// … or this many entries (each costs a little at load).
pub const SNAPSHOT_AFTER_ENTRIES: u64 = 20_000;
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
/// The largest decompressed round or snapshot accepted (a damaged size field must not
/// allocate without bound).
const MAX_DECOMPRESSED: usize = 4 << 30;

/// `etcd://h1:2379,h2:2379[/prefix]`, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct EtcdUrl {
    pub endpoints: Vec<String>,
    /// Without a trailing `/`; default `/plexus`.
    pub prefix: String,
}

impl std::fmt::Display for EtcdUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "etcd://{}{}", self.endpoints.join(","), self.prefix)
    }
}

impl std::str::FromStr for EtcdUrl {
    type Err = Error;

    fn from_str(s: &str) -> Result<EtcdUrl, Error> {
        let rest = s.strip_prefix("etcd://").ok_or_else(|| {
            Error::Invalid(format!("{s:?} is not an etcd URL: write etcd://host:port[,host:port…][/prefix]"))
        })?;
        let (hosts, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/').to_string()),
            None => (rest, String::new()),
        };
        let prefix = if prefix.is_empty() { "/plexus".to_string() } else { prefix };
        if prefix.len() > 200 || prefix.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(Error::Invalid(format!(
                "the etcd key prefix {prefix:?} must be at most 200 characters, without spaces or control characters"
            )));
        }
        let mut endpoints = Vec::new();
        for h in hosts.split(',') {
            let h = h.trim();
            let Some((host, port)) = h.rsplit_once(':') else {
                return Err(Error::Invalid(format!(
                    "etcd endpoint {h:?} in {s:?} has no port: write host:port (etcd's client port is usually 2379)"
                )));
            };
            if host.is_empty() || port.parse::<u16>().is_err() {
                return Err(Error::Invalid(format!("etcd endpoint {h:?} in {s:?} is not host:port")));
            }
            endpoints.push(h.to_string());
        }
        Ok(EtcdUrl { endpoints, prefix })
    }
}

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

fn etcd_error(what: impl std::fmt::Display) -> impl FnOnce(etcd_client::Error) -> Error {
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

    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// A client without a request timeout, for calls that wait (the election's campaign).
    pub fn waiting_client(&self) -> Client {
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

    /// The namespaces of [`Spaces`], in `P/kv/…`.
    pub fn spaces(&self) -> Spaces {
        let kv = |name: &str| -> SharedKv { Arc::new(EtcdKv { etcd: self.clone(), space: name.to_string() }) };
        Spaces { security: kv("security"), policy: kv("policy"), queues: kv("queues") }
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

/// One namespace of [`Spaces`] in etcd.
struct EtcdKv {
    etcd: Etcd,
    space: String,
}

/// The first byte of a stored value: the value follows…
const INLINE: u8 = 0;
/// … or it is in parts: generation (u64 BE), parts (u32 BE), length (u64 BE).
const CHUNKED: u8 = 1;

impl EtcdKv {
    fn data_key(&self, key: &[u8]) -> Vec<u8> {
        let mut k = self.etcd.key(&format!("/kv/{}/", self.space));
        k.extend_from_slice(key);
        k
    }

    /// Where the parts of one generation of `key`'s value live.
    fn chunk_prefix(&self, key: &[u8], generation: Option<u64>) -> Vec<u8> {
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        let mut p = self.etcd.key(&format!("/chunks/{}/{hex}/", self.space));
        if let Some(g) = generation {
            p.extend_from_slice(format!("{g:016x}/").as_bytes());
        }
        p
    }

    fn decode(&self, key: &[u8], stored: Vec<u8>) -> Result<Vec<u8>, Error> {
        let corrupt = |reason: &str| Error::Corrupt {
            key: format!("{}/{}", self.space, String::from_utf8_lossy(key)),
            reason: reason.into(),
        };
        match stored.split_first() {
            Some((&INLINE, rest)) => Ok(rest.to_vec()),
            Some((&CHUNKED, rest)) if rest.len() == 20 => {
                let generation = u64::from_be_bytes(rest[0..8].try_into().expect("8 bytes"));
                let parts = u32::from_be_bytes(rest[8..12].try_into().expect("4 bytes")) as usize;
                let len = u64::from_be_bytes(rest[12..20].try_into().expect("8 bytes")) as usize;
                if len > MAX_DECOMPRESSED || parts > len / PART + 1 {
                    return Err(corrupt("implausible chunked value"));
                }
                let prefix = self.chunk_prefix(key, Some(generation));
                let chunks = self.etcd.range(prefix.clone(), prefix_end(&prefix))?;
                if chunks.len() != parts {
                    return Err(corrupt("parts missing"));
                }
                let value: Vec<u8> = chunks.into_iter().flat_map(|(_, v)| v).collect();
                if value.len() != len {
                    return Err(corrupt("parts do not add up"));
                }
                Ok(value)
            }
            _ => Err(corrupt("unknown value encoding")),
        }
    }
}

impl Kv for EtcdKv {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.etcd.get(self.data_key(key))?.map(|v| self.decode(key, v)).transpose()
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        // Parts of earlier generations go with the write that replaces them.
        let all_chunks = self.chunk_prefix(key, None);
        let mut ops = Vec::new();
        let header = if value.len() < PART {
            let mut v = Vec::with_capacity(value.len() + 1);
            v.push(INLINE);
            v.extend_from_slice(value);
            ops.push(TxnOp::delete(all_chunks.clone(), Some(DeleteOptions::new().with_range(prefix_end(&all_chunks)))));
            v
        } else {
            let generation = plexus_proto::now_ms() << 16 | (rand::random::<u16>() as u64);
            let prefix = self.chunk_prefix(key, Some(generation));
            let parts = value.chunks(PART).count();
            for (i, part) in value.chunks(PART).enumerate() {
                let mut k = prefix.clone();
                k.extend_from_slice(format!("{i:08x}").as_bytes());
                self.etcd.write(vec![TxnOp::put(k, part.to_vec(), None)])?;
            }
            // Older generations: everything under the key's chunk prefix before this one.
            ops.push(TxnOp::delete(all_chunks.clone(), Some(DeleteOptions::new().with_range(prefix.clone()))));
            let mut v = vec![CHUNKED];
            v.extend_from_slice(&generation.to_be_bytes());
            v.extend_from_slice(&(parts as u32).to_be_bytes());
            v.extend_from_slice(&(value.len() as u64).to_be_bytes());
            v
        };
        ops.push(TxnOp::put(self.data_key(key), header, None));
        self.etcd.write(ops).map(|_| ())
    }

    fn put_many(&self, items: &[(Vec<u8>, Vec<u8>)]) -> Result<(), Error> {
        // Small values: two operations a key (the value, and the delete of any chunks an
        // earlier large value left), up to 60 keys and 1 MiB of values a transaction, inside
        // etcd's 128 operations and 1.5 MiB. Large ones go alone, through `put`.
        let (small, large): (Vec<_>, Vec<_>) = items.iter().partition(|(_, v)| v.len() < PART);
        let mut ops = Vec::new();
        let mut bytes = 0;
        for (key, value) in small {
            if !ops.is_empty() && (ops.len() >= 120 || bytes + key.len() + value.len() > PART) {
                self.etcd.write(std::mem::take(&mut ops))?;
                bytes = 0;
            }
            let chunks = self.chunk_prefix(key, None);
            ops.push(TxnOp::delete(chunks.clone(), Some(DeleteOptions::new().with_range(prefix_end(&chunks)))));
            let mut v = Vec::with_capacity(value.len() + 1);
            v.push(INLINE);
            v.extend_from_slice(value);
            ops.push(TxnOp::put(self.data_key(key), v, None));
            bytes += value.len() + key.len();
        }
        if !ops.is_empty() {
            self.etcd.write(ops)?;
        }
        large.into_iter().try_for_each(|(k, v)| self.put(k, v))
    }

    fn remove(&self, keys: &[Vec<u8>]) -> Result<(), Error> {
        // Two operations a key, inside etcd's 128 a transaction.
        for batch in keys.chunks(60) {
            let mut ops = Vec::new();
            for key in batch {
                let chunks = self.chunk_prefix(key, None);
                ops.push(TxnOp::delete(self.data_key(key), None));
                ops.push(TxnOp::delete(chunks.clone(), Some(DeleteOptions::new().with_range(prefix_end(&chunks)))));
            }
            self.etcd.write(ops)?;
        }
        Ok(())
    }

    fn scan(&self, prefix: &[u8]) -> Result<Pairs, Error> {
        let from = self.data_key(prefix);
        let base = self.data_key(b"").len();
        self.etcd
            .range(from.clone(), prefix_end(&from))?
            .into_iter()
            .map(|(k, v)| {
                let key = k[base..].to_vec();
                let value = self.decode(&key, v)?;
                Ok((key, value))
            })
            .collect()
    }
}

/// Records as a round or a snapshot holds them: a key and its value, or `None` for a deletion.
pub type Items = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// Records framed one after the other: key length (u32 BE), key, then 0 (deleted) or 1 and the
/// value's length (u32 BE) and the value.
pub fn encode_items<'a>(items: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in items {
        out.extend_from_slice(&(k.len() as u32).to_be_bytes());
        out.extend_from_slice(k);
        match v {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                out.extend_from_slice(&(v.len() as u32).to_be_bytes());
                out.extend_from_slice(v);
            }
        }
    }
    out
}

/// The records of [`encode_items`], or what is wrong with them (`what`: where they were read,
/// which names them in the error).
pub fn decode_items(mut b: &[u8], what: &str) -> Result<Items, Error> {
    let damaged = |reason: String| Error::Corrupt { key: what.to_string(), reason };
    let take = |b: &mut &[u8], n: usize| -> Result<Vec<u8>, Error> {
        if b.len() < n {
            return Err(damaged(format!("truncated: {n} bytes wanted, {} left", b.len())));
        }
        let (head, rest) = b.split_at(n);
        *b = rest;
        Ok(head.to_vec())
    };
    let len = |b: &mut &[u8]| -> Result<usize, Error> {
        Ok(u32::from_be_bytes(take(b, 4)?.try_into().expect("4 bytes")) as usize)
    };
    let mut out = Vec::new();
    while !b.is_empty() {
        let n = len(&mut b)?;
        let k = take(&mut b, n)?;
        match take(&mut b, 1)?[0] {
            0 => out.push((k, None)),
            1 => {
                let n = len(&mut b)?;
                out.push((k, Some(take(&mut b, n)?)));
            }
            t => return Err(damaged(format!("unknown record tag {t}"))),
        }
    }
    Ok(out)
}

fn compress(raw: &[u8]) -> Vec<u8> {
    lz4_flex::compress_prepend_size(raw)
}

/// The bytes [`compress`] made, or what is wrong with them (`what`: where they were read).
fn decompress(bytes: &[u8], what: &str) -> Result<Vec<u8>, Error> {
    let damaged = |reason: String| Error::Corrupt { key: what.to_string(), reason };
    let claimed = bytes
        .get(..4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
        .ok_or_else(|| damaged("no size".into()))?;
    // lz4 expands at most 255-fold; a larger claim is damage, not data.
    if claimed > MAX_DECOMPRESSED || claimed > bytes.len().saturating_mul(255) {
        return Err(damaged(format!("implausible decompressed size {claimed}")));
    }
    lz4_flex::decompress_size_prepended(bytes).map_err(|e| damaged(e.to_string()))
}

/// A log entry's header: format (1), round (u64 BE: the seq of its first part), last (0/1).
const ENTRY_HEADER: usize = 10;
const ENTRY_FORMAT: u8 = 1;

/// The engine's state in etcd: see the module's documentation.
pub struct EtcdStore {
    etcd: Etcd,
    /// The largest log or snapshot part ([`PART`]; smaller in tests).
    part: usize,
    state: Mutex<StateLog>,
    estimates: EtcdKv,
}

/// Everything the store keeps in memory: the records as committed (for snapshots), where the log
/// stands, and the snapshot being written.
struct StateLog {
    records: BTreeMap<Vec<u8>, Arc<[u8]>>,
    /// The seq of the next log entry.
    next_seq: u64,
    /// Log since the last snapshot.
    log_bytes: u64,
    log_entries: u64,
    /// The snapshot being written in the background, if any.
    snapshotting: Option<std::thread::JoinHandle<()>>,
    /// The etcd revision of the last snapshot's pointer: history up to it may be compacted once
    /// the next snapshot is written.
    last_snapshot_revision: Arc<Mutex<i64>>,
    loaded: bool,
}

/// What [`EtcdStore::read`] found: the records as of the last complete round, and where the
/// log stands.
struct Loaded {
    records: BTreeMap<Vec<u8>, Arc<[u8]>>,
    next_seq: u64,
    log_bytes: u64,
    log_entries: u64,
}

impl StateLog {
    /// Continues from what was read.
    fn take(&mut self, l: Loaded) {
        self.records = l.records;
        self.next_seq = l.next_seq;
        self.log_bytes = l.log_bytes;
        self.log_entries = l.log_entries;
        self.loaded = true;
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct SnapshotPointer {
    seq: u64,
    parts: u32,
    records: u64,
    bytes: u64,
    at_ms: u64,
}

impl EtcdStore {
    pub fn new(etcd: Etcd) -> EtcdStore {
        let estimates = EtcdKv { etcd: etcd.clone(), space: "estimates".into() };
        EtcdStore {
            etcd,
            part: PART,
            estimates,
            state: Mutex::new(StateLog {
                records: BTreeMap::new(),
                next_seq: 1,
                log_bytes: 0,
                log_entries: 0,
                snapshotting: None,
                last_snapshot_revision: Arc::new(Mutex::new(0)),
                loaded: false,
            }),
        }
    }

    /// Cuts log rounds and snapshots into parts of at most `part` bytes (tests use small ones).
    pub fn with_part(mut self, part: usize) -> EtcdStore {
        self.part = part.clamp(64, PART);
        self
    }

    fn log_key(&self, seq: u64) -> Vec<u8> {
        self.etcd.key(&format!("/state/log/{seq:016x}"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StateLog> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the snapshot and the log after it: the records as of the last complete round.
    fn read(&self) -> Result<Loaded, Error> {
        let corrupt = |key: &str, reason: String| Error::Corrupt { key: key.to_string(), reason };
        let mut records: BTreeMap<Vec<u8>, Arc<[u8]>> = BTreeMap::new();
        let mut after = 0u64;
        if let Some(p) = self.etcd.get(self.etcd.key("/state/snapshot"))? {
            let p: SnapshotPointer =
                serde_json::from_slice(&p).map_err(|e| corrupt("state/snapshot", e.to_string()))?;
            let prefix = self.etcd.key(&format!("/state/snap/{:016x}/", p.seq));
            let parts = self.etcd.range(prefix.clone(), prefix_end(&prefix))?;
            if parts.len() != p.parts as usize {
                return Err(corrupt("state/snapshot", format!("{} of its {} parts are there", parts.len(), p.parts)));
            }
            let bytes: Vec<u8> = parts.into_iter().flat_map(|(_, v)| v).collect();
            for (k, v) in decode_items(&decompress(&bytes, "state/snapshot")?, "state/snapshot")? {
                if let Some(v) = v {
                    records.insert(k, v.into());
                }
            }
            after = p.seq;
        }
        let from = self.log_key(after + 1);
        let end = prefix_end(&self.etcd.key("/state/log/"));
        let entries = self.etcd.range(from, end)?;
        let (mut last_seq, mut bytes, mut count) = (after, 0u64, 0u64);
        // The parts of the round being read: (its round id, the compressed bytes so far).
        let mut pending: Option<(u64, Vec<u8>)> = None;
        let prefix_len = self.etcd.key("/state/log/").len();
        for (k, v) in entries {
            let name = String::from_utf8_lossy(&k[prefix_len..]).into_owned();
            let seq =
                u64::from_str_radix(&name, 16).map_err(|e| corrupt(&format!("state/log/{name}"), e.to_string()))?;
            last_seq = last_seq.max(seq);
            bytes += v.len() as u64;
            count += 1;
            if v.len() < ENTRY_HEADER || v[0] != ENTRY_FORMAT {
                return Err(corrupt(&format!("state/log/{name}"), "not a log entry of this format".into()));
            }
            let round = u64::from_be_bytes(v[1..9].try_into().expect("8 bytes"));
            let last = v[9] == 1;
            match &mut pending {
                Some((r, buf)) if *r == round => buf.extend_from_slice(&v[ENTRY_HEADER..]),
                _ => {
                    // A round left half-written by a leader that died is dropped: it was never
                    // acknowledged.
                    if let Some((r, _)) = &pending {
                        tracing::warn!(round = r, "dropping a round whose last part was never written");
                    }
                    pending = Some((round, v[ENTRY_HEADER..].to_vec()));
                }
            }
            if last {
                let (r, buf) = pending.take().expect("set above");
                let what = format!("state/log round {r:x}");
                for (k, v) in decode_items(&decompress(&buf, &what)?, &what)? {
                    match v {
                        Some(v) => records.insert(k, v.into()),
                        None => records.remove(&k),
                    };
                }
            }
        }
        if let Some((r, _)) = pending {
            tracing::warn!(round = r, "dropping the last round: its last part was never written");
        }
        Ok(Loaded { records, next_seq: last_seq + 1, log_bytes: bytes, log_entries: count })
    }

    /// Writes a snapshot of `records` as of log entry `seq`, then the pointer (deleting the log
    /// it covers and older snapshots), then compacts etcd's history up to the previous one.
    fn write_snapshot(
        etcd: &Etcd,
        records: BTreeMap<Vec<u8>, Arc<[u8]>>,
        seq: u64,
        part_size: usize,
        last_revision: &Mutex<i64>,
    ) -> Result<(), Error> {
        let t = Instant::now();
        let raw = encode_items(records.iter().map(|(k, v)| (k.as_slice(), Some(&v[..]))));
        let bytes = compress(&raw);
        let prefix = etcd.key(&format!("/state/snap/{seq:016x}/"));
        let parts = bytes.chunks(part_size).count().max(1);
        for (i, part) in bytes.chunks(part_size).enumerate() {
            let mut k = prefix.clone();
            k.extend_from_slice(format!("{i:08x}").as_bytes());
            etcd.write(vec![TxnOp::put(k, part.to_vec(), None)])?;
        }
        let pointer = SnapshotPointer {
            seq,
            parts: parts as u32,
            records: records.len() as u64,
            bytes: bytes.len() as u64,
            at_ms: plexus_proto::now_ms(),
        };
        let log_from = etcd.key("/state/log/");
        let log_to = etcd.key(&format!("/state/log/{:016x}", seq + 1));
        let snaps = etcd.key("/state/snap/");
        let r = etcd.write(vec![
            TxnOp::put(etcd.key("/state/snapshot"), serde_json::to_vec(&pointer).expect("plain struct"), None),
            TxnOp::delete(log_from, Some(DeleteOptions::new().with_range(log_to))),
            TxnOp::delete(snaps, Some(DeleteOptions::new().with_range(prefix))),
        ])?;
        let revision = r.header().map(|h| h.revision()).unwrap_or(0);
        let previous = std::mem::replace(&mut *last_revision.lock().unwrap_or_else(|p| p.into_inner()), revision);
        if previous > 0 {
            let client = etcd.client();
            // Compaction is housekeeping: a failure (another compaction got there first) is
            // only logged.
            if let Err(e) = etcd.block(async move {
                let mut c = client;
                c.compact(previous, None).await.map_err(etcd_error("compacting etcd's history"))
            }) {
                tracing::debug!(error = %e, "etcd compaction");
            }
        }
        tracing::info!(
            seq,
            records = records.len(),
            raw = raw.len(),
            compressed = bytes.len(),
            parts,
            ms = t.elapsed().as_millis() as u64,
            "snapshot written to etcd"
        );
        Ok(())
    }

    /// Starts a snapshot in the background when the log has grown enough and none is running.
    fn maybe_snapshot(&self, st: &mut StateLog) {
        if st.log_bytes < SNAPSHOT_AFTER_BYTES && st.log_entries < SNAPSHOT_AFTER_ENTRIES {
            return;
        }
        if st.snapshotting.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        if let Some(h) = st.snapshotting.take() {
            let _ = h.join();
        }
        let records = st.records.clone();
        let seq = st.next_seq - 1;
        let etcd = self.etcd.clone();
        let last_revision = st.last_snapshot_revision.clone();
        let part = self.part;
        st.log_bytes = 0;
        st.log_entries = 0;
        st.snapshotting = std::thread::Builder::new()
            .name("plexus-snapshot".into())
            .spawn(move || {
                if let Err(e) = EtcdStore::write_snapshot(&etcd, records, seq, part, &last_revision) {
                    tracing::warn!(error = %e, seq, "writing a snapshot to etcd failed; the log keeps everything and the next one tries again");
                }
            })
            .map_err(|e| tracing::warn!(error = %e, "cannot start the snapshot thread"))
            .ok();
    }

    /// Writes a snapshot now and waits for it (tests, and `migrate`).
    pub fn snapshot_now(&self) -> Result<(), Error> {
        let (records, seq, last) = {
            let mut st = self.lock();
            if let Some(h) = st.snapshotting.take() {
                let _ = h.join();
            }
            st.log_bytes = 0;
            st.log_entries = 0;
            (st.records.clone(), st.next_seq - 1, st.last_snapshot_revision.clone())
        };
        EtcdStore::write_snapshot(&self.etcd, records, seq, self.part, &last)
    }

    /// Log entries and bytes since the last snapshot (what a load would read after it).
    pub fn log_size(&self) -> (u64, u64) {
        let st = self.lock();
        (st.log_entries, st.log_bytes)
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        if let Some(h) = self.lock().snapshotting.take() {
            let _ = h.join();
        }
    }
}

impl Store for EtcdStore {
    fn load(&self) -> Result<Snapshot, Error> {
        let loaded = self.read()?;
        let snap = crate::store::decode_records(loaded.records.iter().map(|(k, v)| Ok((k.clone(), v.to_vec()))))?;
        self.lock().take(loaded);
        Ok(snap)
    }

    fn commit(&self, batch: Batch) -> Result<(), Error> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut st = self.lock();
        if !st.loaded {
            // Appending without knowing the log's end could overwrite entries.
            st.take(self.read()?);
        }
        let items = batch.into_items();
        let raw = encode_items(items.iter().map(|(k, v)| (k.as_slice(), v.as_deref())));
        let bytes = compress(&raw);
        let round = st.next_seq;
        let parts: Vec<&[u8]> = bytes.chunks(self.part).collect();
        let n = parts.len();
        for (i, part) in parts.into_iter().enumerate() {
            let seq = round + i as u64;
            let mut v = Vec::with_capacity(ENTRY_HEADER + part.len());
            v.push(ENTRY_FORMAT);
            v.extend_from_slice(&round.to_be_bytes());
            v.push(u8::from(i + 1 == n));
            v.extend_from_slice(part);
            st.log_bytes += v.len() as u64;
            st.log_entries += 1;
            self.etcd.write(vec![TxnOp::put(self.log_key(seq), v, None)])?;
            st.next_seq = seq + 1;
        }
        for (k, v) in items {
            match v {
                Some(v) => st.records.insert(k, v.into()),
                None => st.records.remove(&k),
            };
        }
        self.maybe_snapshot(&mut st);
        Ok(())
    }

    fn load_estimates(&self) -> Result<Option<Vec<u8>>, Error> {
        self.estimates.get(b"cluster")
    }

    fn save_estimates(&self, bytes: &[u8]) -> Result<(), Error> {
        self.estimates.put(b"cluster", bytes)
    }
}

/// What [`copy_sled`] copied.
#[derive(Debug, Default)]
pub struct Copied {
    pub records: usize,
    pub security: usize,
    pub policy: usize,
    pub queues: usize,
    pub estimates: bool,
}

impl std::fmt::Display for Copied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} state records, {} security records, {} policy records, {} queue shares, {}",
            self.records,
            self.security,
            self.policy,
            self.queues,
            if self.estimates { "the measured speeds" } else { "no measured speeds" }
        )
    }
}

/// Copies a sled store (already migrated) into the etcd store at `to`, which must hold no state
/// yet (`plexus-coordinator migrate --to etcd://…`): the records as one snapshot, then every
/// namespace record by record.
pub fn copy_sled(from: &crate::store::SledStore, to: &EtcdUrl) -> Result<Copied, Error> {
    let etcd = Etcd::connect(to)?;
    etcd.locked("init", || {
        let log = etcd.key("/state/");
        if !etcd.range(log.clone(), prefix_end(&log))?.is_empty()
            || etcd.get(etcd.key("/kv/security/meta/cluster"))?.is_some()
        {
            return Err(Error::Invalid(format!(
                "{to} already holds a Plexus cluster's state; copy into an empty prefix (etcd://…/another-prefix)"
            )));
        }
        etcd.check_version()?;
        let mut copied = Copied::default();
        let store = EtcdStore::new(etcd.clone());
        let mut batch = Batch::default();
        for (k, v) in from.raw_state()? {
            batch.raw(k, v);
            copied.records += 1;
        }
        store.commit(batch)?;
        store.snapshot_now()?;
        let (src, dst) = (from.spaces()?, etcd.spaces());
        for (name, a, b, n) in [
            ("security", &src.security, &dst.security, &mut copied.security),
            ("policy", &src.policy, &dst.policy, &mut copied.policy),
            ("queues", &src.queues, &dst.queues, &mut copied.queues),
        ] {
            for (k, v) in a.scan(b"")? {
                b.put(&k, &v).map_err(|e| Error::Etcd(format!("copying the {name} records: {e}")))?;
                *n += 1;
            }
        }
        if let Some(e) = from.load_estimates()? {
            store.save_estimates(&e)?;
            copied.estimates = true;
        }
        Ok(copied)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_bad_ones_are_named() {
        let u: EtcdUrl = "etcd://h1:2379,h2:2379/pfx".parse().unwrap();
        assert_eq!(u.endpoints, vec!["h1:2379", "h2:2379"]);
        assert_eq!(u.prefix, "/pfx");
        let d: EtcdUrl = "etcd://127.0.0.1:2379".parse().unwrap();
        assert_eq!(d.prefix, "/plexus");
        assert_eq!(d.to_string(), "etcd://127.0.0.1:2379/plexus");
        for bad in ["http://h:1", "etcd://h", "etcd://:1", "etcd://h:x", "etcd://h:1/a b"] {
            assert!(bad.parse::<EtcdUrl>().is_err(), "{bad}");
        }
    }

    #[test]
    fn records_round_trip_and_damage_is_an_error() {
        let items: Vec<(Vec<u8>, Option<Vec<u8>>)> =
            vec![(b"a".to_vec(), Some(b"1".to_vec())), (b"b".to_vec(), None), (vec![], Some(vec![]))];
        let raw = encode_items(items.iter().map(|(k, v)| (k.as_slice(), v.as_deref())));
        assert_eq!(decode_items(&raw, "t").unwrap(), items);
        assert!(decode_items(&raw[..raw.len() - 1], "t").is_err());
        let mut bad = raw.clone();
        bad[4 + 1] = 7;
        assert!(decode_items(&bad, "t").unwrap_err().to_string().contains("tag"));
        let huge = [0xff, 0xff, 0xff, 0xff, 1];
        assert!(decode_items(&huge, "t").unwrap_err().to_string().contains("truncated"));
        let c = compress(&raw);
        assert_eq!(decompress(&c, "t").unwrap(), raw);
        let mut lie = c.clone();
        lie[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decompress(&lie, "t").unwrap_err().to_string().contains("implausible"));
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"ab"), b"ac");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }
}
