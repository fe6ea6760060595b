//! What the data plane's integration tests share.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use plexus_dataplane::{Endpoint, EndpointConfig};

/// How long one rank of a test may take before the test calls it hung.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Runs `f(rank, x)` on every rank at once (each `x` a rank's communicator or exchanger);
/// returns the results in rank order, or panics naming a rank that hung.
pub async fn on_all<X, T, F, Fut>(xs: &[Arc<X>], f: F) -> Vec<T>
where
    X: Send + Sync + 'static,
    T: Send + 'static,
    F: Fn(usize, Arc<X>) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let handles: Vec<_> = xs.iter().enumerate().map(|(r, x)| tokio::spawn(f(r, x.clone()))).collect();
    let mut out = Vec::new();
    for (r, h) in handles.into_iter().enumerate() {
        out.push(tokio::time::timeout(DEADLINE, h).await.unwrap_or_else(|_| panic!("rank {r} hung")).unwrap());
    }
    out
}

/// `n` endpoints on loopback with 64 KiB segments, so modest messages span many segments.
pub async fn endpoints(n: usize) -> Vec<Arc<Endpoint>> {
    let mut eps = Vec::new();
    for _ in 0..n {
        eps.push(Arc::new(Endpoint::bind(EndpointConfig { seg_max: 64 << 10, ..Default::default() }).await.unwrap()));
    }
    eps
}
