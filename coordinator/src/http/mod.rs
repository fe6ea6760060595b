//! The coordinator's HTTP side (`--http`, default `127.0.0.1:8265`): `/metrics` in the
//! Prometheus text format, and the web dashboard (`crate::dashboard`). Plain HTTP; with
//! security on (no `--insecure`) every request but `/login` and the script needs a token of
//! the API (read scope or more; a worker's join token is refused), as the gRPC API does: an
//! `Authorization: Bearer` header, or the cookie `/login` sets.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use plexus_security::{Scope, Token};

use crate::auth::Security;
use crate::dashboard::{self, Board};
use crate::engine::{Cmd, EngineHandle};
use crate::error::Error;

/// The cookie the dashboard keeps a token in.
pub const TOKEN_COOKIE: &str = "plexus_token";

/// What every HTTP handler shares.
#[derive(Clone)]
pub struct Http {
    pub engine: EngineHandle,
    pub security: Option<Arc<Security>>,
    pub board: Arc<Board>,
    /// Whether this coordinator leads: a standby's pages and API say so and name the leader.
    pub role: Option<Arc<crate::ha::Role>>,
}

/// The content type of the Prometheus text format, version 0.0.4.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Binds `addr` and serves until `shutdown`; returns the bound address and the server task (the
/// learned placer's sampler for the dashboard runs beside it and stops with it).
pub async fn serve(
    addr: SocketAddr,
    engine: EngineHandle,
    security: Option<Arc<Security>>,
    role: Option<Arc<crate::ha::Role>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let state = Http { engine: engine.clone(), security, board: Arc::new(Board::default()), role };
    let guarded = Router::new()
        .route("/metrics", get(metrics))
        .route("/", get(dashboard::jobs_page))
        .route("/jobs/{id}", get(dashboard::job_page))
        .route("/jobs/{id}/explain/{task}/{rank}", get(dashboard::explain_page))
        .route("/jobs/{id}/logs/{task}/{rank}", get(dashboard::logs_page))
        .route("/workers", get(dashboard::workers_page))
        .route("/policy", get(dashboard::policy_page))
        .route("/api/jobs", get(dashboard::api_jobs))
        .route("/api/jobs/{id}", get(dashboard::api_job))
        .route("/api/workers", get(dashboard::api_workers))
        .route("/api/policy", get(dashboard::api_policy))
        .route_layer(middleware::from_fn_with_state(state.clone(), guard));
    let app = guarded
        .route("/login", get(dashboard::login))
        .route("/static/app.js", get(dashboard::app_js))
        .with_state(state.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let sampler = tokio::spawn(dashboard::sample(engine, state.board.clone(), stop_rx));
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app).with_graceful_shutdown(shutdown).await;
        let _ = stop_tx.send(true);
        let _ = sampler.await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "the HTTP server stopped");
        }
    });
    Ok((bound, task))
}

/// The token a request presents: its `Authorization: Bearer` header, else the cookie.
fn presented(headers: &HeaderMap) -> Result<Option<String>, Error> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let text = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| Error::Unauthenticated("the Authorization header is not \"Bearer <token>\"".into()))?;
        return Ok(Some(text.trim().to_string()));
    }
    for cookies in headers.get_all(header::COOKIE) {
        let Ok(cookies) = cookies.to_str() else { continue };
        for c in cookies.split(';') {
            if let Some(v) = c.trim().strip_prefix(TOKEN_COOKIE).and_then(|r| r.strip_prefix('=')) {
                return Ok(Some(v.to_string()));
            }
        }
    }
    Ok(None)
}

/// Refuses a request without a valid API token when security is on: the reason, for a 401.
pub fn check(http: &Http, headers: &HeaderMap) -> Result<(), Error> {
    let Some(security) = &http.security else { return Ok(()) };
    let text = presented(headers)?.ok_or_else(|| Error::Unauthenticated("this coordinator requires a token: send Authorization: Bearer <token> (plexus-coordinator token create --scope read)".into()))?;
    let token = Token::parse(&text).map_err(|e| Error::Unauthenticated(e.to_string()))?;
    match security.authenticate(&token, plexus_proto::now_ms())? {
        Scope::Worker => {
            Err(Error::PermissionDenied("a worker's join token cannot read the dashboard or metrics".into()))
        }
        _ => Ok(()),
    }
}

/// [`check`] as a response: `None` when the request may go on, else a 401 with the reason.
pub fn refusal(http: &Http, headers: &HeaderMap) -> Option<Response> {
    check(http, headers).err().map(|why| {
        (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], format!("{why}\n")).into_response()
    })
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
