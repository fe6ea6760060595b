//! One tower service for the layers in front of the gRPC services that either let a call through
//! (perhaps noting something on it first) or answer it at once with a gRPC status, so it never
//! reaches a service: who leads (`ha::LeaderGate`), who calls (`auth::Auth`) and how far behind
//! the coordinator is (`shed::Shed`). Each is a [`Gate`]; [`GateLayer`] puts one in front.

use std::task::{Context, Poll};

use tonic::codegen::http;

/// What a layer decides of each call.
pub trait Gate: Clone {
    /// `Ok`: the call goes on (the gate may have added to its extensions); `Err`: it is answered
    /// with this status.
    fn admit<B>(&self, req: &mut http::Request<B>) -> Result<(), tonic::Status>;
}

/// The tower layer of a [`Gate`].
#[derive(Clone)]
pub struct GateLayer<G>(pub G);

impl<G: Gate, S> tower::Layer<S> for GateLayer<G> {
    type Service = Gated<G, S>;
    fn layer(&self, inner: S) -> Gated<G, S> {
        Gated { inner, gate: self.0.clone() }
    }
}

#[derive(Clone)]
pub struct Gated<G, S> {
    inner: S,
    gate: G,
}

impl<G, S, B, RB> tower::Service<http::Request<B>> for Gated<G, S>
where
    G: Gate,
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    RB: Default + Send + 'static,
{
    type Response = http::Response<RB>;
    type Error = S::Error;
    type Future = futures::future::Either<S::Future, futures::future::Ready<Result<http::Response<RB>, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        match self.gate.admit(&mut req) {
            Ok(()) => futures::future::Either::Left(self.inner.call(req)),
            Err(status) => futures::future::Either::Right(futures::future::ready(Ok(status.into_http()))),
        }
    }
}
