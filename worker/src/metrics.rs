//! The worker's Prometheus metrics (issue 18), served as text at `/metrics` on `--metrics`
//! (default `127.0.0.1:0`: loopback, any free port, logged at start; `none` turns it off).
//! Unauthenticated — it holds counts and rail addresses, no job ids or secrets — so it binds
//! loopback unless told otherwise.
//!
//! What the runner counts as it works ([`Counters`]: cache hits, fetches, evictions, attempts,
//! collectives) and what the data plane, the cache and the GPU sampler already keep are read
//! at each scrape into a fresh registry, so a scrape costs nothing between scrapes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use crate::cache::Cache;
use crate::node::GpuSampler;

/// The collective kinds counted, in [`Counters::collectives`]' order.
pub const COLLECTIVE_KINDS: [&str; 4] = ["allreduce", "reduce", "alltoall", "redistribute"];

/// What the runner counts as it works.
#[derive(Debug, Default)]
pub struct Counters {
    /// Inputs found in the cache.
    pub cache_hits: AtomicU64,
    /// Inputs fetched from a peer, their bytes, and the fetches that failed on every holder.
    pub fetches: AtomicU64,
    pub fetched_bytes: AtomicU64,
    pub fetch_failures: AtomicU64,
    /// Fetched copies refused because they did not match their digest.
    pub digest_mismatches: AtomicU64,
    /// Microseconds spent fetching.
    pub fetch_us: AtomicU64,
    /// Bytes evicted from the cache to make room.
    pub evicted_bytes: AtomicU64,
    /// Attempts ended: succeeded, failed, cancelled.
    pub attempts: [AtomicU64; 3],
    /// Per collective kind: runs, bytes sent in, microseconds.
    pub collectives: [[AtomicU64; 3]; 4],
}

impl Counters {
    /// A collective run of `kind` that moved `bytes` in `us` microseconds.
    pub fn collective(&self, kind: &str, bytes: u64, us: u64) {
        if let Some(k) = COLLECTIVE_KINDS.iter().position(|n| *n == kind) {
            self.collectives[k][0].fetch_add(1, Relaxed);
            self.collectives[k][1].fetch_add(bytes, Relaxed);
            self.collectives[k][2].fetch_add(us, Relaxed);
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RailLabel {
    rail: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabel {
    gpu: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
}

/// Everything a scrape reads.
#[derive(Clone)]
pub struct Sources {
    pub counters: Arc<Counters>,
    pub rails: Arc<plexus_dataplane::Endpoint>,
    pub cache: Cache,
    pub gpus: Arc<GpuSampler>,
}

fn counter(r: &mut Registry, name: &str, help: &str, unit: Option<Unit>, v: u64) {
    let c: Counter = Counter::default();
    c.inc_by(v);
    match unit {
        Some(u) => r.register_with_unit(name, help, u, c),
        None => r.register(name, help, c),
    }
}

fn seconds_counter(r: &mut Registry, name: &str, help: &str, us: u64) {
    let c: Counter<f64, AtomicU64> = Counter::default();
    c.inc_by(us as f64 / 1e6);
    r.register_with_unit(name, help, Unit::Seconds, c);
}

impl Sources {
    /// The metrics now, in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut r = Registry::default();
        self.register_rails(&mut r);
        self.register_inputs_and_cache(&mut r);
        self.register_work(&mut r);
        let build: Family<BuildLabels, Gauge> = Family::default();
        build.get_or_create(&BuildLabels { version: env!("CARGO_PKG_VERSION").to_string() }).set(1);
        r.register("plexus_build_info", "The worker's build: always 1, with its version as a label", build);
        let mut text = String::new();
        let _ = encode(&mut text, &r);
        text
    }

    /// The data plane's counters, per rail and in all.
    fn register_rails(&self, r: &mut Registry) {
        let stats = self.rails.stats();
        let addrs = self.rails.local_addrs();
        let per_rail = |f: &dyn Fn(&plexus_dataplane::RailStats) -> u64| {
            let fam: Family<RailLabel, Counter> = Family::default();
            for (addr, s) in addrs.iter().zip(&stats.rails) {
                fam.get_or_create(&RailLabel { rail: addr.to_string() }).inc_by(f(s));
            }
            fam
        };
        r.register_with_unit(
            "plexus_rail_sent",
            "Payload bytes written on each rail, resends included",
            Unit::Bytes,
            per_rail(&|s| s.bytes_sent),
        );
        r.register_with_unit(
            "plexus_rail_received",
            "Payload bytes received on each rail",
            Unit::Bytes,
            per_rail(&|s| s.bytes_received),
        );
        r.register(
            "plexus_rail_failures",
            "Connections of each rail declared dead, and connection attempts that failed",
            per_rail(&|s| s.failures),
        );
        counter(
            r,
            "plexus_rail_segments_resent",
            "Segments sent again after a rail failure, a checksum failure or a busy reply",
            None,
            stats.resent,
        );
        counter(
            r,
            "plexus_rail_segments_corrupt",
            "Segments received whose checksum did not match",
            None,
            stats.corrupt_received,
        );
        counter(
            r,
            "plexus_rail_handshake_failures",
            "Rail connections dropped for failing the rail handshake",
            None,
            self.rails.handshake_failures(),
        );
        let open: Gauge = Gauge::default();
        open.set(i64::try_from(stats.open_bytes).unwrap_or(i64::MAX));
        r.register_with_unit("plexus_rail_open", "Bytes held for incoming messages not taken yet", Unit::Bytes, open);
    }

    /// Inputs fetched or found in the cache, and the cache's size.
    fn register_inputs_and_cache(&self, r: &mut Registry) {
        let c = &self.counters;
        counter(r, "plexus_cache_hits", "Inputs found in the object cache", None, c.cache_hits.load(Relaxed));
        counter(r, "plexus_fetches", "Inputs fetched from a peer", None, c.fetches.load(Relaxed));
        counter(r, "plexus_fetch_failures", "Inputs no holder could serve", None, c.fetch_failures.load(Relaxed));
        counter(
            r,
            "plexus_digest_mismatches",
            "Fetched copies of inputs refused because they did not match their digest",
            None,
            c.digest_mismatches.load(Relaxed),
        );
        counter(
            r,
            "plexus_fetched",
            "Bytes of inputs fetched from peers",
            Some(Unit::Bytes),
            c.fetched_bytes.load(Relaxed),
        );
        seconds_counter(r, "plexus_fetch", "Time spent fetching inputs", c.fetch_us.load(Relaxed));
        counter(
            r,
            "plexus_cache_evicted",
            "Bytes evicted from the object cache to make room",
            Some(Unit::Bytes),
            c.evicted_bytes.load(Relaxed),
        );
        let used: Gauge = Gauge::default();
        used.set(i64::try_from(self.cache.used()).unwrap_or(i64::MAX));
        r.register_with_unit("plexus_cache_used", "Bytes in the object cache", Unit::Bytes, used);
        let cap: Gauge = Gauge::default();
        cap.set(i64::try_from(self.cache.capacity()).unwrap_or(i64::MAX));
        r.register_with_unit("plexus_cache_capacity", "The object cache's bound", Unit::Bytes, cap);
    }

    /// The work this worker ran: attempts by result, collective members by kind, GPU load.
    fn register_work(&self, r: &mut Registry) {
        let c = &self.counters;
        let attempts: Family<ResultLabel, Counter> = Family::default();
        for (n, name) in ["succeeded", "failed", "cancelled"].iter().enumerate() {
            attempts.get_or_create(&ResultLabel { result: name.to_string() }).inc_by(c.attempts[n].load(Relaxed));
        }
        r.register("plexus_attempts", "Attempts this worker ran to their end, by result", attempts);

        let runs: Family<KindLabel, Counter> = Family::default();
        let bytes: Family<KindLabel, Counter> = Family::default();
        let secs: Family<KindLabel, Counter<f64, AtomicU64>> = Family::default();
        for (k, kind) in COLLECTIVE_KINDS.iter().enumerate() {
            let l = KindLabel { kind: kind.to_string() };
            runs.get_or_create(&l).inc_by(c.collectives[k][0].load(Relaxed));
            bytes.get_or_create(&l).inc_by(c.collectives[k][1].load(Relaxed));
            secs.get_or_create(&l).inc_by(c.collectives[k][2].load(Relaxed) as f64 / 1e6);
        }
        r.register("plexus_collectives", "Collective members this worker ran, by kind", runs);
        r.register_with_unit("plexus_collective", "Bytes each collective member put in, by kind", Unit::Bytes, bytes);
        r.register_with_unit(
            "plexus_collective_duration",
            "Time collective members took, by kind",
            Unit::Seconds,
            secs,
        );

        let gpus: Family<GpuLabel, Gauge<f64, AtomicU64>> = Family::default();
        for g in self.gpus.latest() {
            gpus.get_or_create(&GpuLabel { gpu: g.index.to_string() }).set(g.utilisation);
        }
        r.register("plexus_gpu_utilisation_ratio", "Each offered GPU's utilisation (0..1), from nvidia-smi", gpus);
    }
}

async fn metrics(State(s): State<Sources>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], s.render())
}

/// Binds `addr` and serves `/metrics` until `stop`; the bound address and the task.
pub async fn serve(
    addr: SocketAddr,
    sources: Sources,
    stop: tokio_util::sync::CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new().route("/metrics", get(metrics)).with_state(sources);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(async move { stop.cancelled().await }).await {
            tracing::warn!(error = %e, "the metrics server stopped");
        }
    });
    Ok((bound, task))
}
