//! The rail Q-learning scheduler's parameters (seed 000: the rail rate, `k`, `queue_max`),
//! settable on a running worker: the file `<data-dir>/rail-tuning`, read every
//! [`POLL`], each line `key = value`:
//!
//! ```text
//! rate = 2gbit        # one rail's rate: bytes/s, or with a kbit/mbit/gbit suffix bits/s
//! k = 16              # states per rail, 8..=32
//! queue_max = 32      # the scheduler's queue scale, ≥ 1
//! ```
//!
//! A key left out (or the file removed) returns to the default: the rate measured from the
//! rails' acknowledgements, `k` and `queue_max` as configured. Every Q-learning scheduler of
//! the worker's data plane takes the values at its next decision
//! ([`plexus_dataplane::striping::QTuning`]). A file that does not parse changes nothing and is
//! logged with the reason.

use std::path::PathBuf;
use std::time::Duration;

use plexus_dataplane::striping::QTuning;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How often the file is read.
pub const POLL: Duration = Duration::from_secs(2);
/// The most bytes of the file read (three short lines; the rest is ignored as an error).
const MAX_BYTES: u64 = 4096;

/// What the file sets: (rate in bytes/s, k, queue_max), `None` where it sets nothing.
pub type Settings = (Option<f64>, Option<usize>, Option<usize>);

/// The settings from the file's text; an error names the line.
pub fn parse(text: &str) -> Result<Settings, String> {
    let (mut rate, mut k, mut queue_max) = (None, None, None);
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let bad = |m: &str| format!("line {}: {m}: {line:?}", n + 1);
        let (key, value) = line.split_once('=').ok_or_else(|| bad("not `key = value`"))?;
        let value = value.trim().trim_matches('"');
        match key.trim() {
            "rate" => rate = Some(parse_rate(value).ok_or_else(|| bad("a rate is bytes/s or N kbit/mbit/gbit"))?),
            "k" => k = Some(value.parse().map_err(|_| bad("k is a whole number"))?),
            "queue_max" => queue_max = Some(value.parse().map_err(|_| bad("queue_max is a whole number"))?),
            _ => return Err(bad("unknown key (rate, k, queue_max)")),
        }
    }
    Ok((rate, k, queue_max))
}

fn parse_rate(v: &str) -> Option<f64> {
    let v = v.to_ascii_lowercase();
    let (num, scale) = [("gbit", 1e9 / 8.0), ("mbit", 1e6 / 8.0), ("kbit", 1e3 / 8.0)]
        .iter()
        .find_map(|(s, f)| v.strip_suffix(s).map(|n| (n.trim().to_string(), *f)))
        .unwrap_or((v.clone(), 1.0));
    num.parse::<f64>().ok().map(|n| n * scale).filter(|r| r.is_finite() && *r > 0.0)
}

/// Applies the file to `tuning` when its text changed since `last` (a missing file is empty).
pub async fn apply(path: &std::path::Path, tuning: &QTuning, last: &mut Option<String>) {
    use tokio::io::AsyncReadExt as _;
    let text = match tokio::fs::File::open(path).await {
        Ok(f) => {
            let mut s = String::new();
            match f.take(MAX_BYTES).read_to_string(&mut s).await {
                Ok(_) => s,
                Err(e) => {
                    warn!(path = %path.display(), error = %e, "cannot read the rail tuning file");
                    return;
                }
            }
        }
        Err(_) => String::new(),
    };
    if last.as_deref() == Some(text.as_str()) {
        return;
    }
    match parse(&text).and_then(|(r, k, q)| tuning.set(r, k, q).map(|()| (r, k, q))) {
        Ok((rate, k, queue_max)) => info!(?rate, ?k, ?queue_max, "rail Q-learning parameters set"),
        Err(e) => warn!(path = %path.display(), error = %e, "the rail tuning file changes nothing"),
    }
    *last = Some(text);
}

/// Reads `path` every [`POLL`] until `stop`.
pub async fn watch(path: PathBuf, stop: CancellationToken) {
    let mut last = None;
    loop {
        apply(&path, QTuning::global(), &mut last).await;
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_sets_rate_k_and_queue_max_and_bad_lines_are_named() {
        assert_eq!(
            parse("rate = 2gbit\nk = 16 # more states\n\nqueue_max=32\n"),
            Ok((Some(250e6), Some(16), Some(32)))
        );
        assert_eq!(parse("rate = 125000000"), Ok((Some(125e6), None, None)));
        assert_eq!(parse(""), Ok((None, None, None)));
        assert!(parse("rate = fast").unwrap_err().contains("line 1"));
        assert!(parse("k = 16\nspeed = 3").unwrap_err().contains("line 2: unknown key"));
        assert!(parse("k 16").unwrap_err().contains("not `key = value`"));
    }

    #[tokio::test]
    async fn a_running_worker_takes_the_file_and_returns_to_defaults_without_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rail-tuning");
        let tuning = QTuning::new();
        let mut last = None;
        std::fs::write(&path, "rate = 500mbit\nk = 12\n").unwrap();
        apply(&path, &tuning, &mut last).await;
        assert_eq!(tuning.get(), (Some(62.5e6), Some(12), None));
        std::fs::write(&path, "k = 99\n").unwrap();
        apply(&path, &tuning, &mut last).await;
        assert_eq!(tuning.get(), (Some(62.5e6), Some(12), None), "a bad file changes nothing");
        std::fs::remove_file(&path).unwrap();
        apply(&path, &tuning, &mut last).await;
        assert_eq!(tuning.get(), (None, None, None));
    }
}
