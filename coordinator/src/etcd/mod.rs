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
//!
//! # Files
//! - [`url`]: the `etcd://` URL.
//! - [`client`]: the connection: retries, fenced writes, the start-up lock, the schema check.
//! - [`election`]: leases, the leader election and its keep-alive, for [`crate::ha`].
//! - [`frame`]: how records are framed, compressed and cut into parts.
//! - [`store`]: [`EtcdStore`], the engine's log of rounds and its snapshots.
//! - [`kv`]: the small namespaces, chunked when large.
//! - [`copy`]: a sled store copied into etcd.

pub mod client;
pub mod copy;
pub mod election;
pub mod frame;
pub mod kv;
pub mod store;
pub mod url;

pub use client::{Etcd, Fence, prefix_end};
pub use copy::{Copied, copy_sled};
pub use election::{LeaseId, LeaseRenewal};
pub use frame::{PART, decode_items, encode_items};
pub use store::{EtcdStore, SNAPSHOT_AFTER_BYTES, SNAPSHOT_AFTER_ENTRIES};
pub use url::EtcdUrl;
