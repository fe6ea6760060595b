//! A job's working dir as one archive: what `plexus submit` and the Python client upload, the
//! coordinator keeps, and each worker unpacks read-only as an attempt's working directory.
//!
//! # Layout
//! - [`pack`] (`pack.rs`): a directory → a deterministic gzip'd tar (entries sorted, uid/gid 0,
//!   mtime 0, modes 0644/0755), honouring `.gitignore` and the job's `excludes`, with its
//!   BLAKE3 digest. The same content always gives the same bytes, so the same digest.
//! - [`check`] and [`unpack`] (`unpack.rs`): an archive from the network, read within
//!   [`Limits`] (entries, unpacked bytes, name lengths) and refused, naming the entry, when it
//!   holds an absolute path, a `..`, a symlink leading outside, a hard link or a device, or
//!   anything under a symlink; `unpack` writes it and makes it read-only.
//! - [`Error`] (`error.rs`): the crate's one error, each variant naming the path or entry.
//!
//! Nothing here trusts an archive: every size it states is checked against what is left of the
//! bounds before anything is allocated or written.

mod error;
mod pack;
mod unpack;

pub use error::Error;
pub use pack::{Packed, pack};
pub use unpack::{Summary, check, unpack};

/// What one working dir may be. The coordinator states its own `archive_bytes`
/// (`--working-dir-limit`); the other two bound what a worker writes and walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The archive as uploaded (compressed).
    pub archive_bytes: u64,
    /// The files' bytes once unpacked.
    pub unpacked_bytes: u64,
    /// Files, directories and symlinks.
    pub entries: u64,
}

impl Limits {
    /// 100 MiB compressed is a large code tree (Ray's default working_dir limit is the same
    /// order); 1 GiB unpacked and 100,000 entries bound a worker's disk and the walk's time
    /// whatever the compression ratio.
    pub const DEFAULT: Limits = Limits { archive_bytes: 100 << 20, unpacked_bytes: 1 << 30, entries: 100_000 };
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::DEFAULT
    }
}

/// BLAKE3 of an archive's bytes, as 64 hex digits.
pub fn digest_hex(bytes: &[u8]) -> String {
    hex::encode(blake3::hash(bytes).as_bytes())
}

/// Whether a symlink at `link` (relative to the root) pointing at `target` stays inside the
/// root, judged on the text: a relative target whose `..` never climbs above the root.
pub(crate) fn link_stays_inside(link: &std::path::Path, target: &std::path::Path) -> bool {
    use std::path::Component;
    let mut depth = link.components().count() as i64 - 1;
    for c in target.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests;
