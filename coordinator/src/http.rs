//! The coordinator's HTTP side (`--http`, default `127.0.0.1:8265`): `/metrics` in the
//! Prometheus text format. Plain HTTP; with security on (no `--insecure`) every request needs
//! `Authorization: Bearer <token>` with a token of the API (read scope or more; a worker's
//! join token is refused), as the gRPC API does.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use plexus_security::{Scope, Token};

use crate::auth::Security;
use crate::engine::{Cmd, EngineHandle};

#[derive(Clone)]
struct Http {
    engine: EngineHandle,
    security: Option<Arc<Security>>,
}

/// The content type of the Prometheus text format, version 0.0.4.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Binds `addr` and serves until `shutdown`; returns the bound address and the server task.
pub async fn serve(
    addr: SocketAddr,
    engine: EngineHandle,
    security: Option<Arc<Security>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new().route("/metrics", get(metrics)).with_state(Http { engine, security });
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
            tracing::warn!(error = %e, "the HTTP server stopped");
        }
    });
    Ok((bound, task))
}

/// Refuses a request without a valid API token when security is on.
fn authorise(http: &Http, headers: &HeaderMap) -> Result<(), Response> {
    let Some(security) = &http.security else { return Ok(()) };
    let refuse = |why: String| (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], why).into_response();
    let value = headers.get(header::AUTHORIZATION).ok_or_else(|| refuse("this coordinator requires a token: send Authorization: Bearer <token> (plexus-coordinator token create --scope read)\n".into()))?;
    let text = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).ok_or_else(|| refuse("the Authorization header is not \"Bearer <token>\"\n".into()))?;
    let token = Token::parse(text).map_err(|e| refuse(format!("{e}\n")))?;
    match security.authenticate(&token, plexus_proto::now_ms()) {
        Ok(Scope::Worker) => Err(refuse("a worker's join token cannot read metrics\n".into())),
        Ok(_) => Ok(()),
        Err(status) => Err(refuse(format!("{}\n", status.message()))),
    }
}

async fn metrics(State(http): State<Http>, headers: HeaderMap) -> Response {
    if let Err(refused) = authorise(&http, &headers) {
        return refused;
    }
    match http.engine.call(|reply| Cmd::Metrics { reply }).await {
        Ok(text) => ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text).into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}
