//! The coordinator's HTTP side (`--http`, default `127.0.0.1:8265`): `/metrics` in the
//! Prometheus text format, and the web dashboard ([`dashboard`]); [`access`] decides who may
//! read them. Plain HTTP; with security on (no `--insecure`) every request but `/login` and the
//! script needs a token of the API (read scope or more; a worker's join token is refused), as the gRPC API does: an
//! `Authorization: Bearer` header, or the cookie `/login` sets.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

pub mod access;
mod actions;
pub mod board;
pub mod dashboard;
pub mod policy;
pub mod workers;

pub use access::{Http, TOKEN_COOKIE, check, refusal};
use board::Board;

use crate::auth::Security;
use crate::engine::{Cmd, EngineHandle};

/// The content type of the Prometheus text format, version 0.0.4.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Binds `addr` and serves until `shutdown`; returns the bound address and the server task (the
/// learned placer's sampler for the dashboard runs beside it and stops with it).
pub async fn serve(
    addr: SocketAddr,
    engine: EngineHandle,
    security: Option<Arc<Security>>,
    role: Option<Arc<crate::ha::Role>>,
    working_dirs: Option<Arc<crate::working_dirs::WorkingDirs>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let form_key = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    let state =
        Http { engine: engine.clone(), security, board: Arc::new(Board::default()), role, working_dirs, form_key };
    let guarded = Router::new()
        .route("/metrics", get(metrics))
        .route("/", get(dashboard::jobs_page))
        .route("/jobs/{id}", get(dashboard::job_page))
        .route("/jobs/{id}/explain/{task}/{rank}", get(dashboard::explain_page))
        .route("/jobs/{id}/logs/{task}/{rank}", get(dashboard::logs_page))
        .route("/workers", get(workers::workers_page))
        .route("/cluster", get(dashboard::cluster_page))
        .route("/policy", get(policy::policy_page))
        .route("/api/jobs", get(dashboard::api_jobs))
        .route("/api/jobs/{id}", get(dashboard::api_job))
        .route("/api/workers", get(workers::api_workers))
        .route("/api/policy", get(policy::api_policy))
        .route("/jobs/{id}/cancel", axum::routing::post(actions::cancel))
        .route("/jobs/{id}/resubmit", axum::routing::post(actions::resubmit))
        .route_layer(middleware::from_fn_with_state(state.clone(), guard));
    let app = guarded
        .route("/login", get(dashboard::login))
        .route("/static/app.js", get(dashboard::app_js))
        .with_state(state.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let sampler = tokio::spawn(board::sample(engine.clone(), state.board.clone(), stop_rx.clone()));
    let usage = tokio::spawn(board::sample_usage(engine, state.board.clone(), stop_rx));
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app).with_graceful_shutdown(shutdown).await;
        let _ = stop_tx.send(true);
        let _ = sampler.await;
        let _ = usage.await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "the HTTP server stopped");
        }
    });
    Ok((bound, task))
}

/// Every guarded route: pages answer a sign-in form without a token, the rest a plain 401.
/// A standby (HA, etcd) has no engine to show: every guarded route answers 503 naming the leader.
async fn guard(State(http): State<Http>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let machine = path == "/metrics" || path.starts_with("/api/");
    match check(&http, req.headers()) {
        Ok(()) => match http.role.as_ref().filter(|r| !r.is_leading()) {
            None => next.run(req).await,
            Some(role) => {
                let why = role.refusal().to_string();
                if machine {
                    (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response()
                } else {
                    dashboard::standby_page(&why, role.leader().as_deref())
                }
            }
        },
        Err(why) => {
            if machine {
                (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], format!("{why}\n")).into_response()
            } else {
                dashboard::login_form(&why.to_string())
            }
        }
    }
}

async fn metrics(State(http): State<Http>) -> Response {
    match http.engine.call(|reply| Cmd::Metrics { reply }).await {
        Ok(text) => ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text).into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}
