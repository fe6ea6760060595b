//! Packing a working dir: a sorted walk that honours `.gitignore` (in a git repository or not)
//! and the job's `excludes`, into a tar whose every header is fixed but for path, mode, size and
//! link, gzip'd with a fixed header, so equal content gives equal bytes.

use std::path::Path;

use flate2::Compression;
use flate2::write::GzEncoder;
use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;
use tar::{EntryType, Header};

use crate::{Error, Limits, link_stays_inside};

/// A packed working dir.
#[derive(Clone, Debug)]
pub struct Packed {
    /// The gzip'd tar, as uploaded.
    pub bytes: Vec<u8>,
    /// BLAKE3 of `bytes`.
    pub digest: [u8; 32],
    /// Files, directories and symlinks in it.
    pub entries: u64,
    /// The files' bytes.
    pub unpacked: u64,
}

impl Packed {
    pub fn digest_hex(&self) -> String {
        hex::encode(self.digest)
    }
}

/// Packs `dir` without what `.gitignore` files in it ignore, what `excludes` (gitignore-style
/// globs, relative to `dir`) names, and `.git`, within `limits`. Symlinks are kept as links and
/// must stay inside `dir`; sockets, FIFOs and devices are refused.
pub fn pack(dir: &Path, excludes: &[String], limits: &Limits) -> Result<Packed, Error> {
    let shown = dir.display().to_string();
    if !std::fs::metadata(dir).map(|m| m.is_dir()).unwrap_or(false) {
        return Err(Error::NotADirectory { path: shown });
    }
    let mut overrides = OverrideBuilder::new(dir);
    for pattern in excludes.iter().map(String::as_str).chain([".git"]) {
        let bad = |e: ignore::Error| Error::BadExclude { pattern: pattern.to_string(), reason: e.to_string() };
        overrides.add(&format!("!{pattern}")).map_err(bad)?;
    }
    let overrides =
        overrides.build().map_err(|e| Error::BadExclude { pattern: excludes.join(", "), reason: e.to_string() })?;
    let walk = WalkBuilder::new(dir)
        .hidden(false)
        .parents(false)
        .ignore(false)
        .git_global(false)
        .git_exclude(false)
        .require_git(false)
        .follow_links(false)
        .overrides(overrides)
        .sort_by_file_name(|a, b| a.cmp(b))
        .build();
    let mut out = Builder::new(limits);
    for entry in walk {
        let entry =
            entry.map_err(|e| Error::Read { path: shown.clone(), source: std::io::Error::other(e.to_string()) })?;
        if entry.depth() == 0 {
            continue;
        }
        let path = entry.path();
        let rel = path.strip_prefix(dir).unwrap_or(path);
        let read = |source| Error::Read { path: path.display().to_string(), source };
        let kind = entry.file_type().ok_or_else(|| Error::Special { path: path.display().to_string() })?;
        if kind.is_dir() {
            out.dir(rel)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(path).map_err(read)?;
            if !link_stays_inside(rel, &target) {
                return Err(Error::SymlinkEscapes {
                    path: path.display().to_string(),
                    target: target.display().to_string(),
                });
            }
            out.link(rel, &target)?;
        } else if kind.is_file() {
            out.file(rel, path)?;
        } else {
            return Err(Error::Special { path: path.display().to_string() });
        }
    }
    out.finish()
}

/// The tar being written, and what it holds so far against the limits.
struct Builder<'a> {
    tar: tar::Builder<GzEncoder<Vec<u8>>>,
    limits: &'a Limits,
    entries: u64,
    unpacked: u64,
}

impl Builder<'_> {
    fn new(limits: &Limits) -> Builder<'_> {
        // `GzEncoder::new` writes a header with mtime 0 and no name: nothing of the machine.
        let gz = GzEncoder::new(Vec::new(), Compression::default());
        Builder { tar: tar::Builder::new(gz), limits, entries: 0, unpacked: 0 }
    }

    fn header(kind: EntryType, mode: u32, size: u64) -> Header {
        let mut h = Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h
    }

    fn count(&mut self, size: u64, rel: &Path) -> Result<(), Error> {
        self.entries += 1;
        if self.entries > self.limits.entries {
            return Err(Error::TooManyEntries { limit: self.limits.entries });
        }
        self.unpacked += size;
        if self.unpacked > self.limits.unpacked_bytes {
            return Err(Error::TooLarge {
                what: format!("the directory's files (at {})", rel.display()),
                limit: self.limits.unpacked_bytes,
            });
        }
        Ok(())
    }

    fn written(&self, result: std::io::Result<()>, rel: &Path) -> Result<(), Error> {
        result.map_err(|source| Error::Write { path: rel.display().to_string(), source })?;
        let len = self.tar.get_ref().get_ref().len() as u64;
        if len > self.limits.archive_bytes {
            return Err(Error::TooLarge { what: "the packed directory".into(), limit: self.limits.archive_bytes });
        }
        Ok(())
    }

    fn dir(&mut self, rel: &Path) -> Result<(), Error> {
        self.count(0, rel)?;
        let mut h = Builder::header(EntryType::Directory, 0o755, 0);
        let r = self.tar.append_data(&mut h, rel, std::io::empty());
        self.written(r, rel)
    }

    fn link(&mut self, rel: &Path, target: &Path) -> Result<(), Error> {
        self.count(0, rel)?;
        let mut h = Builder::header(EntryType::Symlink, 0o777, 0);
        let r = self.tar.append_link(&mut h, rel, target);
        self.written(r, rel)
    }

    fn file(&mut self, rel: &Path, path: &Path) -> Result<(), Error> {
        use std::os::unix::fs::PermissionsExt;
        let read = |source| Error::Read { path: path.display().to_string(), source };
        let meta = std::fs::metadata(path).map_err(read)?;
        // Checked before reading, so a huge file costs nothing.
        self.count(meta.len(), rel)?;
        let data = std::fs::read(path).map_err(read)?;
        if data.len() as u64 != meta.len() {
            return Err(read(std::io::Error::other("the file changed while it was read")));
        }
        let mode = if meta.permissions().mode() & 0o111 != 0 { 0o755 } else { 0o644 };
        let mut h = Builder::header(EntryType::Regular, mode, data.len() as u64);
        let r = self.tar.append_data(&mut h, rel, data.as_slice());
        self.written(r, rel)
    }

    fn finish(self) -> Result<Packed, Error> {
        let (entries, unpacked, limit) = (self.entries, self.unpacked, self.limits.archive_bytes);
        let write = |source| Error::Write { path: "the archive".into(), source };
        let bytes = self.tar.into_inner().map_err(write)?.finish().map_err(write)?;
        if bytes.len() as u64 > limit {
            return Err(Error::TooLarge { what: "the packed directory".into(), limit });
        }
        let digest = *blake3::hash(&bytes).as_bytes();
        Ok(Packed { bytes, digest, entries, unpacked })
    }
}
