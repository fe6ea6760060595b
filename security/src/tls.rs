//! The TLS settings of every gRPC connection, and the bearer token on client calls.
//!
//! Certificates are checked against fixed names, not the host a client dialled: the cluster CA
//! signs nothing but this cluster's coordinator and workers, so the name only has to tell the
//! two apart. Every coordinator certificate holds [`COORDINATOR_NAME`], every worker certificate
//! [`WORKER_NAME`] (as Consul checks `server.<dc>.consul`). A client can therefore reach the
//! coordinator by any address — a container name, a NAT'd IP — without it being in the
//! certificate.

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

use crate::{Error, Issued, Token};

// Re-exported so callers keep reaching the names through the TLS settings that check them.
pub use crate::names::{COORDINATOR_NAME, WORKER_NAME};
/// How long a TLS handshake may take on a server before the connection is dropped, so a client
/// that opens a connection and says nothing holds nothing for long.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Connects `endpoint` within `limit`, TLS handshake and HTTP/2 set-up included: a connection
/// that failed is [`Error::Transport`], one that did not come up in time
/// [`Error::ConnectTimedOut`]. tonic's `connect_timeout` bounds the TCP connect only, so a
/// server whose kernel accepts connections but that never answers (a stopped process, a hung
/// host) would hold the caller for ever.
pub async fn connect_within(
    endpoint: &tonic::transport::Endpoint,
    limit: std::time::Duration,
) -> Result<tonic::transport::Channel, Error> {
    match tokio::time::timeout(limit, endpoint.connect()).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(Error::ConnectTimedOut(limit)),
    }
}

/// A client's settings: trust only `ca_pem`, expect `server_name`, and present `identity` (a
/// worker's or the coordinator's certificate) when given.
pub fn client(ca_pem: &str, server_name: &str, identity: Option<&Issued>) -> ClientTlsConfig {
    let mut c = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem)).domain_name(server_name);
    if let Some(id) = identity {
        c = c.identity(Identity::from_pem(&id.cert_pem, &id.key_pem));
    }
    c
}

/// A server's settings: present `identity`, and ask clients for a certificate of the CA
/// `ca_pem`. With `clients_optional` (the coordinator, which CLI users reach with a token and
/// no certificate) a client without one is let through to the per-call checks; a client with a
/// certificate of another CA never is. Without it (a worker's `PeerService`) every client must
/// present one.
pub fn server(identity: &Issued, ca_pem: &str, clients_optional: bool) -> ServerTlsConfig {
    ServerTlsConfig::new()
        .identity(Identity::from_pem(&identity.cert_pem, &identity.key_pem))
        .client_ca_root(Certificate::from_pem(ca_pem))
        .client_auth_optional(clients_optional)
        .timeout(HANDSHAKE_TIMEOUT)
}

/// Adds `authorization: Bearer <token>` to every call of a client (nothing without a token).
#[derive(Clone, Debug, Default)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Bearer {
    pub fn new(token: Option<&Token>) -> Bearer {
        Bearer(token.map(|t| format!("Bearer {}", t.expose()).parse().expect("a token is ASCII")))
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// The token of a call's `authorization` value (`Bearer <token>`): `Ok(None)` without one, an
/// error naming the problem for a malformed one.
pub fn bearer_of(header: Option<&[u8]>) -> Result<Option<Token>, Error> {
    let Some(value) = header else { return Ok(None) };
    let text = std::str::from_utf8(value).map_err(|_| Error::Authorization("is not text"))?;
    let token = text
        .strip_prefix("Bearer ")
        .or_else(|| text.strip_prefix("bearer "))
        .ok_or(Error::Authorization("must read `Bearer <token>`"))?;
    Token::parse(token).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_header_gives_its_token_and_a_malformed_one_says_what_is_wrong() {
        let token = Token::generate();
        let header = format!("Bearer {}", token.expose());
        assert_eq!(bearer_of(Some(header.as_bytes())).unwrap().map(|t| t.id), Some(token.id.clone()));
        assert!(bearer_of(None).unwrap().is_none());
        let err = |h: &[u8]| bearer_of(Some(h)).unwrap_err().to_string();
        assert_eq!(err(b"Bearer \xff"), "the authorization header is not text");
        assert_eq!(err(b"Basic dXNlcg=="), "the authorization header must read `Bearer <token>`");
        assert!(err(b"Bearer hunter2").starts_with("this is not a Plexus token"), "{}", err(b"Bearer hunter2"));
    }
}
