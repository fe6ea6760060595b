//! A receiving peer in its own process, for tests and benchmarks that put the two ends of a
//! channel in different network namespaces (`plexus-rail-peer`, and `rails --serve` in the
//! benchmark, are thin wrappers around [`serve`]).
//!
//! Protocol on stdout, one line each: `READY <addr>,<addr>,…` once bound, then for every
//! message `GOT <sender> <tag> <len> <crc32c>` (the CRC only with `verify`, else 0). It stops
//! when its standard input closes, so it never outlives the process that started it.

use std::io::Write;
use std::net::IpAddr;

use tokio::io::AsyncReadExt;

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
}

impl PeerOpts {
    /// Parses `--rail ADDR` (repeatable), `--port N`, `--tag N`, `--verify`, `--quiet`.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<PeerOpts> {
        let mut o = PeerOpts {
            rails: vec![],
            port: 0,
            tag: 0,
            verify: false,
            quiet: false,
        };
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            let mut val = |name: &str| {
                it.next()
                    .ok_or_else(|| Error::Usage(format!("{name} needs a value")))
            };
            let bad = |name: &str, e: &dyn std::fmt::Display| Error::Usage(format!("{name}: {e}"));
            match a.as_str() {
                "--rail" => o
                    .rails
                    .push(val("--rail")?.parse().map_err(|e| bad("--rail", &e))?),
                "--port" => o.port = val("--port")?.parse().map_err(|e| bad("--port", &e))?,
                "--tag" => o.tag = val("--tag")?.parse().map_err(|e| bad("--tag", &e))?,
                "--verify" => o.verify = true,
                "--quiet" => o.quiet = true,
                other => {
                    return Err(Error::Usage(format!(
                        "unknown argument {other:?} (--rail ADDR… --port N --tag N --verify --quiet)"
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

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
