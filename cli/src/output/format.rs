//! The units and the layout every rendering shares: human sizes, durations and numbers, state
//! names, the plain text [`Table`], `key: value` fields, and short names for ids.

use plexus_proto::convert::{job_state, subtask_state};
use plexus_proto::{JobState, SubtaskState};

/// `512 B`, `1.5 KiB`, `12.0 MiB`, `3.2 GiB`, `1.0 TiB`: the one byte formatter, shared with the
/// worker's reports.
pub use plexus_proto::human_bytes;

/// `850ms`, `12.3s`, `4m05s`, `2h03m`, `3d04h`.
pub fn human_duration(ms: u64) -> String {
    const S: u64 = 1000;
    const M: u64 = 60 * S;
    const H: u64 = 60 * M;
    const D: u64 = 24 * H;
    match ms {
        _ if ms < S => format!("{ms}ms"),
        _ if ms < M => format!("{:.1}s", ms as f64 / S as f64),
        _ if ms < H => format!("{}m{:02}s", ms / M, ms % M / S),
        _ if ms < D => format!("{}h{:02}m", ms / H, ms % H / M),
        _ => format!("{}d{:02}h", ms / D, ms % D / H),
    }
}

/// How long ago `at_ms` was, `-` when it never happened (0 in the contract).
pub fn age(at_ms: u64, now_ms: u64) -> String {
    if at_ms == 0 { "-".to_string() } else { format!("{} ago", human_duration(now_ms.saturating_sub(at_ms))) }
}

/// A number without noise: `3`, `0.25`, `1.3333`, `-2`.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".to_string() } else { s.to_string() }
}

pub(super) fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// 0 means "not yet" in the contract; JSON says null instead.
pub(super) fn time(ms: u64) -> Option<u64> {
    (ms != 0).then_some(ms)
}

pub(super) fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

pub fn job_state_name(v: i32) -> &'static str {
    job_state("state", v).map(JobState::as_str).unwrap_or("unknown")
}

pub fn subtask_state_name(v: i32) -> &'static str {
    subtask_state("state", v).map(SubtaskState::as_str).unwrap_or("unknown")
}

// ---------------------------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------------------------

/// A plain text table: left-aligned columns two spaces apart, an upper-case header row, no
/// trailing spaces.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Table { header: header.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = row.get(i).map(String::as_str).unwrap_or("");
                if i > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', width - cell.chars().count()));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `key:   value` lines with the values aligned.
pub(super) fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0);
    pairs.iter().map(|(k, v)| format!("{:<width$} {v}\n", format!("{k}:"))).collect()
}

/// `-` for what is not known (yet).
pub(super) fn dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".to_string())
}

/// Short names for ids (`wkr-1a2b3c4d`): each id's shortest prefix, at least 8 hex digits, that
/// no other id in the list shares — what a person types to name one.
pub fn short_names<'a>(ids: impl Iterator<Item = &'a str> + Clone) -> Vec<String> {
    ids.clone()
        .map(|id| {
            let (prefix, hex) = id.split_at(id.find('-').map_or(0, |i| i + 1));
            let mut n = 8.min(hex.len());
            while n < hex.len()
                && ids.clone().any(|o| o != id && o.get(prefix.len()..prefix.len() + n) == Some(&hex[..n]))
            {
                n += 1;
            }
            format!("{prefix}{}", &hex[..n])
        })
        .collect()
}
