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
    /// Working dirs' archives, held while a job is resubmitted from the dashboard.
    pub working_dirs: Option<Arc<crate::working_dirs::WorkingDirs>>,
    /// A secret of this process: a page's form token is a hash of it and the viewer's token.
    pub form_key: String,
}

/// The scope of the token a request presents (`Admin` with security off: there is no token and
/// the HTTP side is reachable only where it was bound).
pub fn scope(http: &Http, headers: &HeaderMap) -> Result<Scope, Error> {
    let Some(security) = &http.security else { return Ok(Scope::Admin) };
    let text = presented(headers)?.ok_or_else(|| Error::Unauthenticated("no token".into()))?;
    let token = Token::parse(&text).map_err(|e| Error::Unauthenticated(e.to_string()))?;
    security.authenticate(&token, plexus_proto::now_ms())
}

/// The token a form of a page served to this viewer carries, and that a POST must bring back: a
/// keyed hash of the viewer's token (another site can neither read the page nor make it).
pub fn form_token(http: &Http, headers: &HeaderMap) -> String {
    let presented = presented(headers).ok().flatten().unwrap_or_default();
    let keyed = format!("{}\n{presented}", http.form_key);
    plexus_proto::Digest::of(keyed.as_bytes()).to_string()[..32].to_string()
}

/// Refuses a request that changes something unless it comes from a page of this dashboard: a
/// browser's `Sec-Fetch-Site: cross-site`, an `Origin` that is not this host, or a form token
/// (`form`) that is not the viewer's.
pub fn same_site(http: &Http, headers: &HeaderMap, form: &str) -> Result<(), Error> {
    let header = |h: &str| headers.get(h).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    if header("sec-fetch-site") == "cross-site" {
        return Err(Error::PermissionDenied("a request from another site".into()));
    }
    let origin = header("origin");
    if !origin.is_empty() && origin != "null" && origin.split_once("://").map(|(_, h)| h) != Some(&header("host")) {
        return Err(Error::PermissionDenied(format!("a request from another origin ({origin})")));
    }
    let want = form_token(http, headers);
    // Compared in time that does not depend on where they differ.
    let differ = form.len() != want.len() || form.bytes().zip(want.bytes()).fold(0u8, |d, (a, b)| d | (a ^ b)) != 0;
    if differ {
        return Err(Error::PermissionDenied("the form's token is not this page's: reload the page".into()));
    }
    Ok(())
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
