//! A receiving peer in its own process, for tests and benchmarks that put the two ends of a
//! channel in different network namespaces (`plexus-rail-peer`, and `rails --serve` in the
//! benchmark, are thin wrappers around [`serve`]).
//!
//! Protocol on stdout, one line each: `READY <addr>,<addr>,…` once bound, then for every
//! message `GOT <sender> <tag> <len> <crc32c>` (the CRC only with `verify`, else 0). It stops
//! when its standard input closes, so it never outlives the process that started it.
//!
//! With `--rail-key-env NAME` it requires the authenticated rail handshake (see
//! [`auth`](crate::auth)) under the key in the environment variable `NAME` (64 hex digits):
//! the environment, unlike the command line, is not readable by other users.

use std::io::Write;
use std::net::IpAddr;

use tokio::io::AsyncReadExt;

use crate::auth::{RailAuth, RailKey};
use crate::endpoint::{Endpoint, EndpointConfig};
use crate::error::{Error, Result};

/// What the peer does.
#[derive(Clone, Debug)]
pub struct PeerOpts {
    pub rails: Vec<IpAddr>,
    pub port: u16,
    /// Receive messages with this tag.
    pub tag: u64,
    /// Compute and print each whole message's CRC-32C (costs a pass over the data).
    pub verify: bool,
    /// Print nothing per message (benchmarks: nobody reads the lines).
    pub quiet: bool,
    /// The endpoint's rail authentication (`--rail-key-env`; default open).
    pub auth: RailAuth,
}

impl PeerOpts {
    /// Parses `--rail ADDR` (repeatable), `--port N`, `--tag N`, `--verify`, `--quiet`,
    /// `--rail-key-env NAME`.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<PeerOpts> {
        let mut o = PeerOpts { rails: vec![], port: 0, tag: 0, verify: false, quiet: false, auth: RailAuth::Open };
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            let mut val = |name: &str| it.next().ok_or_else(|| Error::Usage(format!("{name} needs a value")));
            let bad = |name: &str, e: &dyn std::fmt::Display| Error::Usage(format!("{name}: {e}"));
            match a.as_str() {
                "--rail" => o.rails.push(val("--rail")?.parse().map_err(|e| bad("--rail", &e))?),
                "--port" => o.port = val("--port")?.parse().map_err(|e| bad("--port", &e))?,
                "--tag" => o.tag = val("--tag")?.parse().map_err(|e| bad("--tag", &e))?,
                "--verify" => o.verify = true,
                "--quiet" => o.quiet = true,
                "--rail-key-env" => {
                    let name = val("--rail-key-env")?;
                    let hex = std::env::var(&name).map_err(|e| bad("--rail-key-env", &format!("{name}: {e}")))?;
                    o.auth =
                        RailAuth::Key(key_from_hex(&hex).map_err(|e| bad("--rail-key-env", &format!("{name}: {e}")))?);
                }
                other => {
                    return Err(Error::Usage(format!(
                        "unknown argument {other:?} (--rail ADDR… --port N --tag N --verify --quiet --rail-key-env NAME)"
                    )));
                }
            }
        }
        Ok(o)
    }
}

/// Runs the peer until its standard input closes.
pub async fn serve(opts: PeerOpts) -> Result<()> {
    let ep = Endpoint::bind(EndpointConfig {
        rails: opts.rails.clone(),
        port: opts.port,
        auth: opts.auth.clone(),
        ..Default::default()
    })
    .await?;
    let addrs: Vec<String> = ep.local_addrs().iter().map(|a| a.to_string()).collect();
    say(&format!("READY {}", addrs.join(",")));
    let mut stdin = tokio::io::stdin();
    let mut sink = [0u8; 64];
    loop {
        tokio::select! {
            r = ep.recv_any(opts.tag) => {
                let (from, data) = r?;
                if opts.quiet {
                    continue;
                }
                let crc = if opts.verify { crate::wire::checksum(&data) } else { 0 };
                say(&format!("GOT {from} {} {} {crc}", opts.tag, data.len()));
            }
            n = stdin.read(&mut sink) => {
                if n.unwrap_or(0) == 0 {
                    break;
                }
            }
        }
    }
    ep.shutdown().await;
    Ok(())
}

/// A rail key written as 64 hex digits.
fn key_from_hex(hex: &str) -> Result<RailKey> {
    let bytes = hex::decode(hex.trim()).map_err(|_| Error::Usage("a rail key is written as 64 hex digits".into()))?;
    RailKey::from_bytes(&bytes)
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_comes_from_the_environment_as_hex() {
        let k = key_from_hex(&"0f".repeat(32)).unwrap();
        assert_eq!(k.as_bytes(), &[0x0f; 32]);
        assert!(matches!(key_from_hex(&"0f".repeat(31)), Err(Error::BadRailKey(31))));
        assert!(key_from_hex("zz").is_err());
        assert!(key_from_hex("abc").is_err());
        let e = PeerOpts::parse(["--rail-key-env".into(), "PLEXUS_TEST_NO_SUCH_VAR".into()]).unwrap_err().to_string();
        assert!(e.contains("PLEXUS_TEST_NO_SUCH_VAR"), "{e}");
        assert!(matches!(PeerOpts::parse([]).unwrap().auth, RailAuth::Open));
    }
}
