//! The crate's one error: what was wrong, with the path or archive entry it was wrong in.

/// A working dir that cannot be packed, or an archive that cannot be unpacked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("working_dir: {path} is not a directory")]
    NotADirectory { path: String },
    #[error("working_dir: reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("working_dir: {path} is a symlink to {target}, which leads outside the directory")]
    SymlinkEscapes { path: String, target: String },
    #[error("working_dir: {path} is not a file, directory or symlink (add it to `excludes`)")]
    Special { path: String },
    #[error("working_dir: excludes: {pattern:?}: {reason}")]
    BadExclude { pattern: String, reason: String },
    #[error("working_dir: {what} is over the limit of {limit} bytes")]
    TooLarge { what: String, limit: u64 },
    #[error("working_dir: more than {limit} files, directories and symlinks")]
    TooManyEntries { limit: u64 },
    #[error("working_dir archive is corrupt or truncated: {0}")]
    Corrupt(String),
    #[error("working_dir archive: entry {path:?}: {reason}")]
    BadEntry { path: String, reason: String },
    #[error("working_dir: writing {path}: {source}")]
    Write { path: String, source: std::io::Error },
}
