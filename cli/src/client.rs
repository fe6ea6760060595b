//! Connecting to the coordinator, and turning every failure into the one line the user sees.
//!
//! Two kinds of failure matter to a user: the coordinator said no (a `tonic::Status` it sent,
//! shown by its message alone), and the coordinator could not be reached (shown with the URL and
//! the underlying cause). Everything else is rendered from the anyhow chain, on one line.

use std::error::Error as _;
use std::fmt;
use std::time::Duration;

use plexus_proto::pb::job_service_client::JobServiceClient;
use tonic::transport::{Channel, Endpoint};

/// How long to wait for a TCP connection to the coordinator before giving up.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

// Responses such as a large job with every subtask, or a 1 MiB log tail of each stream, can
// exceed tonic's 4 MiB default: the clients use the one message-size policy of the cluster.
use plexus_proto::rules::MAX_MESSAGE;

pub type Client = JobServiceClient<Channel>;

/// The coordinator did not answer at all.
#[derive(Debug)]
pub struct Unreachable {
    pub url: String,
    pub cause: String,
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot reach the coordinator at {}: {}", self.url, self.cause)
    }
}

impl std::error::Error for Unreachable {}

/// Adds `http://` to a bare `host:port`, the form people type most; an empty value (an
/// exported but empty `PLEXUS_COORDINATOR`) means the default.
pub fn normalise_url(url: &str) -> String {
    let url = url.trim();
    if url.is_empty() {
        crate::args::DEFAULT_COORDINATOR.to_string()
    } else if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    }
}

/// Connects eagerly, so an unreachable coordinator is reported as such before any call.
pub async fn connect(url: &str) -> anyhow::Result<Client> {
    let url = normalise_url(url);
    let endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| anyhow::anyhow!("invalid coordinator URL {url:?}: {e}"))?
        .connect_timeout(CONNECT_TIMEOUT);
    let channel = endpoint.connect().await.map_err(|e| Unreachable { url: url.clone(), cause: root_cause(&e) })?;
    Ok(JobServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE))
}

/// The innermost error of a chain: tonic's outer layers only say "transport error", the useful
/// part ("Connection refused (os error 111)", "timeout expired") is at the bottom.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// Collapses a possibly multi-line message (a TOML parse error, say) into one line.
pub fn one_line(s: &str) -> String {
    s.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// The single stderr line for a failed command. `url` is the coordinator the command talked to,
/// named when the connection failed in the middle of a call.
pub fn render_error(err: &anyhow::Error, url: &str) -> String {
    if let Some(status) = err.downcast_ref::<tonic::Status>() {
        return format!("error: {}", status_text(status, url));
    }
    format!("error: {}", one_line(&format!("{err:#}")))
}

fn status_text(status: &tonic::Status, url: &str) -> String {
    let message = one_line(status.message());
    // A status the coordinator sent has no source; one with a source was made by tonic on this
    // side from a transport failure (connection refused or reset after the channel was up).
    if status.source().is_some() {
        let cause = status.source().map(root_cause).filter(|c| !c.is_empty()).unwrap_or(message);
        return Unreachable { url: url.to_string(), cause }.to_string();
    }
    if message.is_empty() {
        format!("the coordinator answered {:?} without a message", status.code())
    } else {
        message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://127.0.0.1:50051";

    #[test]
    fn status_renders_as_its_message_on_one_line() {
        let err = anyhow::Error::from(tonic::Status::invalid_argument("job file x.toml: unknown task \"b\""));
        let line = render_error(&err, URL);
        assert_eq!(line, "error: job file x.toml: unknown task \"b\"");
        assert!(!line.contains('\n'));
        assert!(!line.contains("InvalidArgument"), "no debug form: {line}");
    }

    #[test]
    fn multi_line_status_becomes_one_line() {
        let msg = "TOML parse error at line 1, column 5\n  |\n1 | a =\n  |     ^\ninvalid string\n";
        let line = render_error(&tonic::Status::invalid_argument(msg).into(), URL);
        assert!(!line.contains('\n'), "{line}");
        assert!(line.starts_with("error: TOML parse error at line 1, column 5 "), "{line}");
        assert!(line.ends_with("invalid string"), "{line}");
    }

    #[test]
    fn empty_status_message_names_the_code() {
        let line = render_error(&tonic::Status::not_found("").into(), URL);
        assert_eq!(line, "error: the coordinator answered NotFound without a message");
    }

    #[test]
    fn transport_status_is_unreachable() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused (os error 111)");
        let status = tonic::Status::from_error(Box::new(io));
        let line = render_error(&status.into(), URL);
        assert_eq!(line, format!("error: cannot reach the coordinator at {URL}: Connection refused (os error 111)"));
    }

    #[test]
    fn unreachable_and_context_chains_render_on_one_line() {
        let err = anyhow::Error::from(Unreachable { url: URL.into(), cause: "timeout expired".into() });
        assert_eq!(render_error(&err, URL), format!("error: cannot reach the coordinator at {URL}: timeout expired"));
        let err = anyhow::anyhow!("No such file or directory (os error 2)").context("cannot read job file \"a.toml\"");
        assert_eq!(render_error(&err, URL), "error: cannot read job file \"a.toml\": No such file or directory (os error 2)");
    }

    #[test]
    fn urls_get_a_scheme() {
        assert_eq!(normalise_url("127.0.0.1:7000"), "http://127.0.0.1:7000");
        assert_eq!(normalise_url(" http://h:1 "), "http://h:1");
        assert_eq!(normalise_url("https://h:1"), "https://h:1");
        assert_eq!(normalise_url(""), crate::args::DEFAULT_COORDINATOR);
    }

    #[tokio::test]
    async fn bad_url_is_a_clear_error() {
        let err = connect("http://exa mple:1").await.unwrap_err();
        assert!(render_error(&err, URL).starts_with("error: invalid coordinator URL"), "{err:#}");
    }

    #[tokio::test]
    async fn refused_connection_is_unreachable() {
        // A port that was just free: nothing listens there, so the connection is refused at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}");
        let err = connect(&url).await.unwrap_err();
        let line = render_error(&err, &url);
        assert!(line.starts_with(&format!("error: cannot reach the coordinator at {url}: ")), "{line}");
    }
}
