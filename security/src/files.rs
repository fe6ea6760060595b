//! Credential files: written owner-only and atomically (a temporary file, fsync, rename), so a
//! crash never leaves half a key and no other user can read one.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::Error;

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.display().to_string();
    move |source| Error::Io { what, path, source }
}

/// Writes `contents` to `path` with mode `mode` (0o600 for secrets, 0o644 for a CA certificate).
pub fn write(path: &Path, contents: &str, mode: u32) -> Result<(), Error> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io("writing", &tmp))?;
    // `mode` applies only when the file is created; a leftover temporary file gets it too.
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(mode))
        .map_err(io("setting the mode of", &tmp))?;
    f.write_all(contents.as_bytes()).map_err(io("writing", &tmp))?;
    f.sync_all().map_err(io("syncing", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("renaming into place", path))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io("syncing", dir))?;
    }
    Ok(())
}

/// Writes a secret: mode 0600.
pub fn write_secret(path: &Path, contents: &str) -> Result<(), Error> {
    write(path, contents, 0o600)
}

/// Reads a credential file, naming it in the error.
pub fn read(path: &Path, what: &'static str) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(io(what, path))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn secrets_are_owner_only_and_replace_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("admin.token");
        std::fs::write(&p, "old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        super::write_secret(&p, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left");
    }
}
