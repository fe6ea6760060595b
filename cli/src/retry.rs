//! Retrying a coordinator that sheds load (issue 35).
//!
//! A coordinator that falls behind refuses clients' calls at once with `RESOURCE_EXHAUSTED` and
//! says when to retry (`plexus_proto::rules::RETRY_PUSHBACK_METADATA`), so that its workers'
//! heartbeats keep up. Such a refusal is made before any work, so the call can be sent again as
//! it was. [`RetryShed`] sits under every call the CLI makes: it keeps the request's bytes, and
//! while the answer is such a refusal it waits (the pushback, doubled at each refusal, with
//! jitter, at most [`MAX_WAIT`]) and sends it again, for at most [`BUDGET`] in all; then the last
//! refusal is the answer the user sees. Any other answer, a `RESOURCE_EXHAUSTED` without the
//! pushback included (a full archive store is not load), is returned as it is.
//!
//! Only the request is buffered, which the CLI built in memory anyway; the upload of a working
//! dir (a client stream) is passed through without retry: the CLI asks `StatWorkingDir` first,
//! which is retried.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use tonic::body::Body;
use tonic::codegen::http;

/// How long one call keeps retrying a coordinator that sheds it, in all.
pub const BUDGET: Duration = Duration::from_secs(30);
/// The longest wait between two tries.
pub const MAX_WAIT: Duration = Duration::from_secs(4);
/// Calls not retried: a client stream, not buffered.
const STREAMED: [&str; 1] = ["/plexus.v1.JobService/UploadWorkingDir"];

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The retrying service around `S` (see the module documentation).
#[derive(Clone, Debug)]
pub struct RetryShed<S> {
    inner: S,
    budget: Duration,
}

impl<S> RetryShed<S> {
    pub fn new(inner: S) -> Self {
        RetryShed { inner, budget: BUDGET }
    }

    /// With another budget (tests).
    #[cfg(test)]
    pub fn with_budget(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }
}

/// The pushback of a shed refusal: `Some(wait)` when `resp` is a `RESOURCE_EXHAUSTED` that says
/// when to retry (a trailers-only answer: the status is in its headers).
pub fn shed_pushback<B>(resp: &http::Response<B>) -> Option<Duration> {
    let h = resp.headers();
    if h.get("grpc-status").and_then(|v| v.to_str().ok()) != Some("8") {
        return None;
    }
    let ms: u64 = h.get(plexus_proto::rules::RETRY_PUSHBACK_METADATA)?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_millis(ms))
}

/// `base` with ±25 % jitter from the clock's low bits (spread, not secret).
fn jittered(base: Duration) -> Duration {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let f = 0.75 + f64::from(nanos % 1000) / 2000.0;
    base.mul_f64(f)
}

impl<S> tower::Service<http::Request<Body>> for RetryShed<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
{
    type Response = http::Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        // The ready service takes this call; the clone waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let budget = self.budget;
        if STREAMED.contains(&req.uri().path()) {
            return Box::pin(async move { inner.call(req).await.map_err(Into::into) });
        }
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let bytes = Limited::new(body, plexus_proto::rules::MAX_MESSAGE + 1024).collect().await?.to_bytes();
            let started = Instant::now();
            let mut tries = 0u32;
            loop {
                let req = http::Request::from_parts(parts.clone(), Body::new(Full::new(bytes.clone())));
                if tries > 0 {
                    tower::ServiceExt::ready(&mut inner).await.map_err(Into::into)?;
                }
                let resp = inner.call(req).await.map_err(Into::into)?;
                let Some(pushback) = shed_pushback(&resp) else { return Ok(resp) };
                let wait = jittered(pushback.saturating_mul(1 << tries.min(8)).min(MAX_WAIT));
                if started.elapsed() + wait > budget {
                    return Ok(resp);
                }
                if tries == 0 {
                    eprintln!(
                        "the coordinator is shedding load (RESOURCE_EXHAUSTED); retrying for up to {} s",
                        budget.as_secs()
                    );
                }
                tries += 1;
                tokio::time::sleep(wait).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_proto::pb;
    use plexus_proto::pb::peer_service_server::{PeerService, PeerServiceServer};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use tonic::{Request, Response, Status};

    /// A service on a real socket that sheds the first `shed` unary calls (with or without the
    /// pushback), then answers. (The layer does not look at which service it carries; the small
    /// peer service keeps the test short.)
    struct Shedding {
        calls: Arc<AtomicU32>,
        shed: u32,
        pushback: bool,
    }

    #[tonic::async_trait]
    impl PeerService for Shedding {
        type FetchObjectStream = futures::stream::Empty<Result<pb::ObjectChunk, Status>>;

        async fn fetch_object(
            &self,
            _: Request<pb::FetchObjectRequest>,
        ) -> Result<Response<Self::FetchObjectStream>, Status> {
            Err(Status::unimplemented("not in this test"))
        }

        async fn read_log(&self, _: Request<pb::ReadLogRequest>) -> Result<Response<pb::ReadLogResponse>, Status> {
            Err(Status::unimplemented("not in this test"))
        }

        async fn push_object(
            &self,
            req: Request<pb::PushObjectRequest>,
        ) -> Result<Response<pb::PushObjectResponse>, Status> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            assert_eq!(req.get_ref().tag, 7, "every try carries the same request");
            if n < self.shed {
                let mut st = Status::resource_exhausted("the coordinator is overloaded");
                if self.pushback {
                    st.metadata_mut().insert(plexus_proto::rules::RETRY_PUSHBACK_METADATA, "20".parse().unwrap());
                }
                return Err(st);
            }
            Ok(Response::new(pb::PushObjectResponse { size: 1 }))
        }
    }

    type Retrying = pb::peer_service_client::PeerServiceClient<RetryShed<tonic::transport::Channel>>;

    async fn serve(shed: u32, pushback: bool, budget: Duration) -> (Retrying, Arc<AtomicU32>) {
        let calls = Arc::new(AtomicU32::new(0));
        let svc = PeerServiceServer::new(Shedding { calls: calls.clone(), shed, pushback });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let channel =
            tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
        (pb::peer_service_client::PeerServiceClient::new(RetryShed::new(channel).with_budget(budget)), calls)
    }

    fn push() -> pb::PushObjectRequest {
        pb::PushObjectRequest { tag: 7, ..Default::default() }
    }

    #[tokio::test]
    async fn a_shed_call_is_sent_again_until_answered() {
        let (mut c, calls) = serve(3, true, BUDGET).await;
        assert_eq!(c.push_object(push()).await.expect("answered after three refusals").into_inner().size, 1);
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn past_its_budget_the_refusal_is_the_answer() {
        let (mut c, calls) = serve(u32::MAX, true, Duration::from_millis(300)).await;
        let err = c.push_object(push()).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert!(err.message().contains("overloaded"), "{}", err.message());
        let n = calls.load(Ordering::SeqCst);
        assert!((2..=8).contains(&n), "{n} tries in 300 ms of 20 ms doubling waits");
    }

    #[tokio::test]
    async fn resource_exhausted_without_a_pushback_is_not_retried() {
        let (mut c, calls) = serve(1, false, BUDGET).await;
        let err = c.push_object(push()).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
