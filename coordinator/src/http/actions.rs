//! What the dashboard can change: cancel a job, resubmit one (`POST /jobs/{id}/cancel`,
//! `/resubmit`), for a viewer whose token has the submit scope. Each POST must come from a page
//! of this dashboard ([`super::access::same_site`]: its form token, and no other site's origin),
//! so another site cannot make a signed-in browser act.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use plexus_proto::JobId;
use plexus_security::Scope;

use super::access::{Http, same_site, scope};
use crate::engine::Cmd;
use crate::error::Error;

/// The form token a POST brought (`token=...` of a form body).
fn form_field(body: &str) -> &str {
    body.split('&').find_map(|kv| kv.strip_prefix("token=")).unwrap_or_default()
}

/// Refuses what may not go on: another site's request, a viewer without the submit scope, a
/// malformed job id (the status and why). The job id, when it may.
fn allowed(http: &Http, headers: &HeaderMap, id: &str, body: &str) -> Result<JobId, (StatusCode, String)> {
    let refuse = |code: StatusCode, why: String| (code, format!("{why}\n"));
    same_site(http, headers, form_field(body)).map_err(|e| refuse(StatusCode::FORBIDDEN, e.to_string()))?;
    match scope(http, headers) {
        Ok(Scope::Submit | Scope::Admin) => {}
        Ok(s) => {
            return Err(refuse(
                StatusCode::FORBIDDEN,
                format!("a {} token cannot change jobs: sign in with a submit or admin token", s.as_str()),
            ));
        }
        Err(e) => return Err(refuse(StatusCode::UNAUTHORIZED, e.to_string())),
    }
    id.parse().map_err(|e| refuse(StatusCode::NOT_FOUND, format!("{id:?} is not a job id: {e}")))
}

/// `POST /jobs/{id}/cancel`: cancels the job, then back to its page.
pub async fn cancel(State(http): State<Http>, Path(id): Path<String>, headers: HeaderMap, body: String) -> Response {
    let job = match allowed(&http, &headers, &id, &body) {
        Ok(j) => j,
        Err(r) => return r.into_response(),
    };
    match http.engine.call(|reply| Cmd::Cancel { job, reply }).await {
        Ok(Ok(_)) => Redirect::to(&format!("/jobs/{job}")).into_response(),
        Ok(Err(e)) => (StatusCode::CONFLICT, format!("{e}\n")).into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}

/// `POST /jobs/{id}/resubmit`: the same job file again as a new job (its working dir held while
/// the engine takes it, as `plexus resubmit` does), then to the new job's page.
pub async fn resubmit(State(http): State<Http>, Path(id): Path<String>, headers: HeaderMap, body: String) -> Response {
    let job = match allowed(&http, &headers, &id, &body) {
        Ok(j) => j,
        Err(r) => return r.into_response(),
    };
    let new = JobId::random();
    let result: Result<u32, Error> = async {
        let _held = crate::working_dirs::hold_again(http.working_dirs.as_deref(), &http.engine, job).await?;
        Ok(http.engine.call(|reply| Cmd::Resubmit { job, id: new, reply }).await??)
    }
    .await;
    match result {
        Ok(_) => Redirect::to(&format!("/jobs/{new}")).into_response(),
        Err(e) => (StatusCode::CONFLICT, format!("{e}\n")).into_response(),
    }
}
