//! The lines a coordinator prints on stdout once it serves, parsed in one place: every launcher
//! (`plexus up`, the e2e harness, the benchmarks) learns the coordinator's addresses from them.

use std::net::SocketAddr;

/// Printed once the gRPC listener is bound: `plexus-coordinator listening on IP:PORT`.
pub const LISTENING: &str = "plexus-coordinator listening on ";
/// Printed after [`LISTENING`] once the HTTP side (dashboard, /metrics) is bound.
pub const HTTP: &str = "plexus-coordinator http on ";

/// What one line of a coordinator's stdout announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    /// The gRPC address.
    Listening(SocketAddr),
    /// The HTTP side's address.
    Http(SocketAddr),
    /// A ready line whose address does not parse.
    Malformed,
    /// Any other line.
    Other,
}

pub fn parse(line: &str) -> Line {
    let line = line.trim();
    if let Some(addr) = line.strip_prefix(LISTENING) {
        return addr.parse().map_or(Line::Malformed, Line::Listening);
    }
    match line.strip_prefix(HTTP) {
        Some(addr) => addr.parse().map_or(Line::Malformed, Line::Http),
        None => Line::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_lines_name_their_address() {
        let a: SocketAddr = "127.0.0.1:4242".parse().unwrap();
        assert_eq!(parse("plexus-coordinator listening on 127.0.0.1:4242\n"), Line::Listening(a));
        assert_eq!(parse("plexus-coordinator http on 127.0.0.1:4242"), Line::Http(a));
        assert_eq!(parse("plexus-coordinator listening on [::1]:7"), Line::Listening("[::1]:7".parse().unwrap()));
        assert_eq!(parse("plexus-coordinator listening on nowhere"), Line::Malformed);
        assert_eq!(parse("applied: 1 -> 2"), Line::Other);
    }
}
