//! Reading an archive that came over the network: [`check`] walks it, [`unpack`] also writes
//! it. Entries are read raw (the GNU long-name and PAX records handled here, each bounded), so
//! no size an entry states is allocated before it is checked against what is left.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use flate2::read::GzDecoder;
use tar::EntryType;

use crate::{Error, Limits, link_stays_inside};

/// The longest name (path or link target) accepted, as Linux's `PATH_MAX`.
const MAX_NAME: u64 = 4096;
/// The largest PAX extended header accepted: a few names and times, never more.
const MAX_PAX: u64 = 64 << 10;

/// What an archive holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub entries: u64,
    pub unpacked: u64,
}

/// Walks `bytes` as [`unpack`] would, writing nothing.
pub fn check(bytes: &[u8], limits: &Limits) -> Result<Summary, Error> {
    walk(bytes, limits, None)
}

/// Unpacks `bytes` into `dest` (which must not exist), then makes every file and directory
/// read-only (files 0444, or 0555 when executable; directories 0555). On error `dest` is left
/// for the caller to remove.
pub fn unpack(bytes: &[u8], dest: &Path, limits: &Limits) -> Result<Summary, Error> {
    let write = |source| Error::Write { path: dest.display().to_string(), source };
    std::fs::create_dir(dest).map_err(write)?;
    let summary = walk(bytes, limits, Some(dest))?;
    seal(dest)?;
    Ok(summary)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File { exec: bool },
    Link,
}

/// The archive's decompressed bytes, failing once more than `left` were read: a gzip bomb ends
/// at the bound, not in memory.
struct Bounded<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Err(std::io::Error::other("more data than the limits allow"));
        }
        let max = buf.len().min(self.left.min(usize::MAX as u64) as usize);
        let n = self.inner.read(&mut buf[..max])?;
        self.left -= n as u64;
        Ok(n)
    }
}

struct Walk<'a> {
    limits: &'a Limits,
    dest: Option<&'a Path>,
    seen: HashMap<PathBuf, Kind>,
    summary: Summary,
}

fn walk(bytes: &[u8], limits: &Limits, dest: Option<&Path>) -> Result<Summary, Error> {
    // Every entry costs a 512-byte header and up to 511 bytes of padding, plus its records.
    let overhead = limits.entries.saturating_add(1).saturating_mul(2 * 512 + MAX_NAME + MAX_PAX);
    let left = limits.unpacked_bytes.saturating_add(overhead);
    let mut archive = tar::Archive::new(Bounded { inner: GzDecoder::new(bytes), left });
    let corrupt = |e: std::io::Error| Error::Corrupt(e.to_string());
    let mut w = Walk { limits, dest, seen: HashMap::new(), summary: Summary::default() };
    let (mut long_name, mut long_link): (Option<Vec<u8>>, Option<Vec<u8>>) = (None, None);
    for entry in archive.entries().map_err(corrupt)?.raw(true) {
        let mut entry = entry.map_err(corrupt)?;
        let kind = entry.header().entry_type();
        let size = entry.header().entry_size().map_err(corrupt)?;
        match kind {
            EntryType::GNULongName => long_name = Some(record(&mut entry, size, MAX_NAME, "long name")?),
            EntryType::GNULongLink => long_link = Some(record(&mut entry, size, MAX_NAME, "long link name")?),
            EntryType::XHeader => {
                let data = record(&mut entry, size, MAX_PAX, "PAX header")?;
                for ext in tar::PaxExtensions::new(&data) {
                    let ext = ext.map_err(corrupt)?;
                    match ext.key() {
                        Ok("path") => long_name = Some(ext.value_bytes().to_vec()),
                        Ok("linkpath") => long_link = Some(ext.value_bytes().to_vec()),
                        _ => {}
                    }
                }
            }
            EntryType::XGlobalHeader => drop(record(&mut entry, size, MAX_PAX, "PAX global header")?),
            _ => {
                let name = long_name.take().unwrap_or_else(|| entry.header().path_bytes().into_owned());
                let link = long_link.take().or_else(|| entry.header().link_name_bytes().map(|l| l.into_owned()));
                let mode = entry.header().mode().map_err(corrupt)?;
                w.entry(&mut entry, Member { kind, name, link, size, mode })?;
            }
        }
    }
    // Reading to the end checks the gzip trailer (its CRC and length), within the same bound.
    let mut rest = archive.into_inner();
    std::io::copy(&mut rest, &mut std::io::sink()).map_err(corrupt)?;
    Ok(w.summary)
}

/// One of the archive's GNU or PAX records, read whole once its stated size is within `max`.
fn record(entry: &mut impl Read, size: u64, max: u64, what: &str) -> Result<Vec<u8>, Error> {
    if size > max {
        return Err(Error::Corrupt(format!("a {what} of {size} bytes (at most {max})")));
    }
    let mut data = Vec::with_capacity(size as usize);
    entry.take(size).read_to_end(&mut data).map_err(|e| Error::Corrupt(e.to_string()))?;
    if data.len() as u64 != size {
        return Err(Error::Corrupt(format!("a {what} cut short")));
    }
    while data.last() == Some(&0) {
        data.pop();
    }
    Ok(data)
}

/// An entry as the archive states it.
struct Member {
    kind: EntryType,
    name: Vec<u8>,
    link: Option<Vec<u8>>,
    size: u64,
    mode: u32,
}

impl Walk<'_> {
    fn entry(&mut self, data: &mut impl Read, m: Member) -> Result<(), Error> {
        use std::os::unix::ffi::OsStrExt;
        let shown = String::from_utf8_lossy(&m.name).into_owned();
        let bad = |reason: &str| Error::BadEntry { path: shown.clone(), reason: reason.to_string() };
        let rel = relative(&m.name).map_err(&bad)?;
        if rel.as_os_str().is_empty() {
            // The root itself (`./`): nothing to make.
            return if m.kind == EntryType::Directory { Ok(()) } else { Err(bad("names the root as a non-directory")) };
        }
        self.summary.entries += 1;
        if self.summary.entries > self.limits.entries {
            return Err(Error::TooManyEntries { limit: self.limits.entries });
        }
        self.check_parents(&rel).map_err(|r| bad(&r))?;
        let kind = match m.kind {
            EntryType::Regular | EntryType::Continuous => Kind::File { exec: m.mode & 0o111 != 0 },
            EntryType::Directory => Kind::Dir,
            EntryType::Symlink => Kind::Link,
            other => return Err(bad(&format!("is a {other:?}: only files, directories and symlinks are accepted"))),
        };
        match (self.seen.get(&rel), kind) {
            (Some(Kind::Dir), Kind::Dir) => return Ok(()),
            (Some(_), _) => return Err(bad("appears twice")),
            (None, _) => {}
        }
        let target = match kind {
            Kind::Link => {
                let link = m.link.ok_or_else(|| bad("is a symlink without a target"))?;
                let target = PathBuf::from(std::ffi::OsStr::from_bytes(&link));
                if !link_stays_inside(&rel, &target) {
                    return Err(bad(&format!(
                        "is a symlink to {}, which leads outside the directory",
                        target.display()
                    )));
                }
                Some(target)
            }
            _ => None,
        };
        if let Kind::File { .. } = kind {
            self.summary.unpacked = self.summary.unpacked.saturating_add(m.size);
            if self.summary.unpacked > self.limits.unpacked_bytes {
                return Err(Error::TooLarge { what: "the unpacked files".into(), limit: self.limits.unpacked_bytes });
            }
        }
        self.seen.insert(rel.clone(), kind);
        match self.dest {
            Some(dest) => write(dest, &rel, kind, target.as_deref(), data, m.size),
            // Read to its end, so that a cut-short file is found now.
            None => read_exactly(data, &mut std::io::sink(), m.size).map_err(|e| bad(&e)),
        }
    }

    /// Every directory above `rel` is one the archive made (or will make implicitly), never a
    /// file or a symlink: nothing is written through a link.
    fn check_parents(&mut self, rel: &Path) -> Result<(), String> {
        let mut parent = PathBuf::new();
        let parts: Vec<_> = rel.components().collect();
        for c in &parts[..parts.len().saturating_sub(1)] {
            parent.push(c);
            match self.seen.get(&parent) {
                None => {
                    self.seen.insert(parent.clone(), Kind::Dir);
                }
                Some(Kind::Dir) => {}
                Some(_) => return Err(format!("is under {}, which is not a directory", parent.display())),
            }
        }
        Ok(())
    }
}

/// `name` as a path of normal components only (a leading `./` dropped).
fn relative(name: &[u8]) -> Result<PathBuf, &'static str> {
    use std::os::unix::ffi::OsStrExt;
    if name.contains(&0) {
        return Err("has a NUL in its name");
    }
    let mut rel = PathBuf::new();
    for c in Path::new(std::ffi::OsStr::from_bytes(name)).components() {
        match c {
            Component::Normal(p) => rel.push(p),
            Component::CurDir => {}
            Component::ParentDir => return Err("has a `..` in its path"),
            Component::RootDir | Component::Prefix(_) => return Err("has an absolute path"),
        }
    }
    Ok(rel)
}

fn read_exactly(data: &mut impl Read, out: &mut impl std::io::Write, size: u64) -> Result<(), String> {
    let copied = std::io::copy(&mut data.take(size), out).map_err(|e| e.to_string())?;
    if copied != size { Err(format!("cut short: {copied} of {size} bytes")) } else { Ok(()) }
}

fn write(
    dest: &Path,
    rel: &Path,
    kind: Kind,
    target: Option<&Path>,
    data: &mut impl Read,
    size: u64,
) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dest.join(rel);
    let failed = |source| Error::Write { path: rel.display().to_string(), source };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(failed)?;
    }
    match (kind, target) {
        (Kind::Dir, _) => std::fs::create_dir(&path).map_err(failed),
        (Kind::Link, Some(t)) => std::os::unix::fs::symlink(t, &path).map_err(failed),
        (Kind::File { exec }, _) => {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .mode(if exec { 0o755 } else { 0o644 })
                .open(&path)
                .map_err(failed)?;
            read_exactly(data, &mut f, size).map_err(|e| Error::Corrupt(format!("{}: {e}", rel.display())))
        }
        (Kind::Link, None) => Err(Error::BadEntry { path: rel.display().to_string(), reason: "no target".into() }),
    }
}

/// Makes the unpacked tree read-only, files before directories, deepest directories first. An
/// explicit list, not recursion: the tree is the archive's, and its depth is not ours to trust.
fn seal(dest: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let failed = |p: &Path, source| Error::Write { path: p.display().to_string(), source };
    let mut dirs = vec![dest.to_path_buf()];
    let mut i = 0;
    while i < dirs.len() {
        let dir = dirs[i].clone();
        i += 1;
        for entry in std::fs::read_dir(&dir).map_err(|e| failed(&dir, e))? {
            let entry = entry.map_err(|e| failed(&dir, e))?;
            let kind = entry.file_type().map_err(|e| failed(&entry.path(), e))?;
            if kind.is_dir() {
                dirs.push(entry.path());
            } else if kind.is_file() {
                let p = entry.path();
                let mode = std::fs::metadata(&p).map_err(|e| failed(&p, e))?.permissions().mode();
                let sealed = if mode & 0o111 != 0 { 0o555 } else { 0o444 };
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(sealed)).map_err(|e| failed(&p, e))?;
            }
        }
    }
    for dir in dirs.iter().rev() {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).map_err(|e| failed(dir, e))?;
    }
    Ok(())
}
