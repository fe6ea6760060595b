//! Who may read the HTTP side: with security on, a token of the API (read scope or more; a
//! worker's join token is refused), as an `Authorization: Bearer` header or the cookie `/login`
//! sets. Shared by the router ([`super`]) and the dashboard's pages.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use plexus_security::{Scope, Token};

use super::board::Board;
use crate::auth::Security;
use crate::engine::EngineHandle;
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
