//! Where the Plexus programs are: next to the running one (how `cargo build` lays them out),
//! else on PATH.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::LaunchError;

/// The coordinator's program name.
pub const COORDINATOR: &str = "plexus-coordinator";
/// The worker's program name.
pub const WORKER: &str = "plexus-worker";

/// The program `name` next to the running executable, else the first on PATH.
pub fn find(name: &str) -> Result<PathBuf, LaunchError> {
    let exe = std::env::current_exe().ok();
    let exe_dir = exe.as_deref().and_then(Path::parent).map(Path::to_path_buf);
    let mut dirs: Vec<PathBuf> = exe_dir.iter().cloned().collect();
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    search(name, &dirs).ok_or_else(|| LaunchError::ProgramNotFound {
        name: name.to_string(),
        exe: exe
            .as_deref()
            .and_then(Path::file_name)
            .map_or_else(|| "this program".to_string(), |f| f.to_string_lossy().into_owned()),
        here: exe_dir.map_or_else(|| "?".to_string(), |d| d.display().to_string()),
    })
}

/// The first executable file `name` in `dirs`.
pub fn search(name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    dirs.iter().map(|d| d.join(name)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binaries_are_searched_in_order_and_must_be_executable() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let dirs = vec![a.path().to_path_buf(), b.path().to_path_buf()];
        assert_eq!(search("plexus-worker", &dirs), None);

        let not_exec = a.path().join("plexus-worker");
        std::fs::write(&not_exec, "").unwrap();
        std::fs::set_permissions(&not_exec, std::fs::Permissions::from_mode(0o644)).unwrap();
        let exec = b.path().join("plexus-worker");
        std::fs::write(&exec, "").unwrap();
        std::fs::set_permissions(&exec, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(search("plexus-worker", &dirs), Some(exec));

        std::fs::set_permissions(&not_exec, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(search("plexus-worker", &dirs), Some(not_exec), "the first directory wins");
        std::fs::create_dir(a.path().join("plexus-coordinator")).unwrap();
        assert_eq!(search("plexus-coordinator", &dirs), None, "a directory is not a program");
    }

    #[test]
    fn missing_binary_error_says_how_to_build_it() {
        let err = find("plexus-no-such-program").unwrap_err().to_string();
        assert!(err.contains("cannot find the plexus-no-such-program program"), "{err}");
        assert!(err.contains("cargo build -p plexus-no-such-program"), "{err}");
    }
}
