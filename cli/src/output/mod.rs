//! Everything `plexus` prints: human sizes and durations, hand-formatted tables, and the stable
//! JSON documents of `-o json`. All functions here are pure (the current time is a parameter), so
//! the formats are pinned by unit tests; the command modules only fetch data and call these.
//!
//! JSON conventions: snake_case field names, states as lowercase strings ("succeeded"), times as
//! milliseconds since the Unix epoch in fields ending `_ms` (null when not happened yet),
//! durations in fields ending `_ms`, sizes in bytes in fields ending `_bytes`.

//!
//! # Layout
//! - `format`: units, state names, the text [`Table`], fields, short ids — what every view uses.
//! - `jobs`: the jobs table, a job's detail, and their JSON views.
//! - `watch`: the progress lines of `plexus watch`.
//! - `workers`: the workers and rails tables and their JSON view.
//! - `explain`: a placement explanation as text and JSON.

use std::io::{self, Write};

use serde::Serialize;

mod explain;
mod format;
mod jobs;
mod plan;
mod watch;
mod workers;

pub use explain::*;
pub use format::*;
pub use jobs::*;
pub use plan::*;
pub use watch::*;
pub use workers::*;

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

/// Writes to stdout. A closed pipe (`plexus status | head`) is not an error: the reader has
/// what it wanted, and `println!` would panic there.
pub fn print(s: &str) -> anyhow::Result<()> {
    write_ignoring_closed_pipe(&mut io::stdout().lock(), s.as_bytes())
}

/// Writes raw bytes to stdout or stderr (task logs need not be UTF-8).
pub fn write_bytes(w: &mut dyn Write, bytes: &[u8]) -> anyhow::Result<()> {
    write_ignoring_closed_pipe(w, bytes)
}

fn write_ignoring_closed_pipe(w: &mut dyn Write, bytes: &[u8]) -> anyhow::Result<()> {
    match w.write_all(bytes).and_then(|()| w.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r.map_err(|e| anyhow::anyhow!("cannot write the output: {e}"))?),
    }
}

/// Pretty JSON with a trailing newline.
pub fn json<T: Serialize>(value: &T) -> String {
    // Serialising these plain structs cannot fail (string keys, no custom serialisers).
    let mut s = serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

#[cfg(test)]
mod tests;
