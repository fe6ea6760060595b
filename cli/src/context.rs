//! Contexts: named clusters the CLI (and the Python client) reach without flags, as kubeconfig's
//! contexts do. A context is a coordinator URL, the cluster CA's file, a token file and the
//! dashboard's URL; `plexus up` writes one for its cluster (named after its directory unless
//! `--context NAME`) and makes it current.
//!
//! They live in `$PLEXUS_CONFIG_DIR/contexts.toml`, else `$XDG_CONFIG_HOME/plexus/contexts.toml`,
//! else `~/.config/plexus/contexts.toml` (0600, its folder 0700):
//!
//! ```toml
//! current = "local"
//! [contexts.local]
//! coordinator = "https://127.0.0.1:50051"
//! ca = "/home/me/proj/.plexus/coordinator/ca.pem"
//! token_file = "/home/me/proj/.plexus/coordinator/admin.token"
//! dashboard = "http://127.0.0.1:8265"
//! ```
//!
//! What the CLI uses, first found: `--coordinator`/`PLEXUS_COORDINATOR` (with `--ca`,
//! `--token-file`, `PLEXUS_TOKEN`), else the context `--context`/`PLEXUS_CONTEXT` names, else the
//! `plexus up` cluster in `./.plexus` (its URL file), else the current context, else
//! `127.0.0.1:50051`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

/// The largest contexts file read.
const MAX_FILE: u64 = 1 << 20;

/// One cluster the CLI can reach.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Context {
    pub coordinator: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dashboard: Option<String>,
}

/// The contexts file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contexts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
    #[serde(default)]
    pub contexts: BTreeMap<String, Context>,
}

/// Where the contexts file is (see the module's documentation).
pub fn file() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let dir = var("PLEXUS_CONFIG_DIR")
        .or_else(|| var("XDG_CONFIG_HOME").map(|d| d.join("plexus")))
        .or_else(|| var("HOME").map(|h| h.join(".config").join("plexus")))?;
    Some(dir.join("contexts.toml"))
}

/// A context name: 1 to 63 letters, digits, '.', '_' and '-'.
pub fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !ok {
        bail!("{name:?} is not a context name (1-63 letters, digits, '.', '_', '-')");
    }
    Ok(())
}

impl Contexts {
    /// The file's contexts; none when it does not exist. A file that is not one is an error
    /// naming it.
    pub fn load(path: &Path) -> anyhow::Result<Contexts> {
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Contexts::default()),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        if meta.len() > MAX_FILE {
            bail!("{} is {} bytes, larger than a contexts file can be", path.display(), meta.len());
        }
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("{} is not a contexts file", path.display()))
    }

    /// Writes the file (0600, its folder 0700), through a temporary file renamed over it.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let dir = path.parent().context("the contexts file has no folder")?;
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        let text = toml::to_string(self)?;
        let tmp = dir.join(format!(".contexts.toml.{}", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::io::Write::write_all(&mut f, text.as_bytes())?;
        std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
    }

    /// The context `name`, or an error listing those there are.
    pub fn get(&self, name: &str) -> anyhow::Result<&Context> {
        self.contexts.get(name).with_context(|| {
            let known: Vec<&str> = self.contexts.keys().map(String::as_str).collect();
            format!(
                "no context {name:?} ({}; `plexus up` makes one)",
                if known.is_empty() {
                    "there are none".to_string()
                } else {
                    format!("there are: {}", known.join(", "))
                }
            )
        })
    }
}

/// Adds (or replaces) context `name` in the file and makes it current (`plexus up`).
pub fn remember(name: &str, ctx: Context) -> anyhow::Result<PathBuf> {
    check_name(name)?;
    let path = file().context("no folder for the contexts file: set HOME or PLEXUS_CONFIG_DIR")?;
    let mut all = Contexts::load(&path)?;
    all.contexts.insert(name.to_string(), ctx);
    all.current = Some(name.to_string());
    all.save(&path)?;
    Ok(path)
}

/// The URL file a `plexus up` cluster keeps in its directory: how the CLI, run from the folder
/// of `plexus up`, finds its coordinator on any port.
pub fn up_url_file(dir: &Path) -> PathBuf {
    dir.join("coordinator").join("url")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_round_trip_and_bad_files_are_named() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("cfg/contexts.toml");
        assert_eq!(Contexts::load(&path).unwrap(), Contexts::default(), "no file: no contexts");
        let ctx = Context {
            coordinator: "https://127.0.0.1:7070".into(),
            ca: Some("/x/ca.pem".into()),
            token_file: Some("/x/admin.token".into()),
            dashboard: Some("http://127.0.0.1:8265".into()),
        };
        let mut all = Contexts::default();
        all.contexts.insert("lab".into(), ctx.clone());
        all.current = Some("lab".into());
        all.save(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let back = Contexts::load(&path).unwrap();
        assert_eq!(back, all);
        assert_eq!(back.get("lab").unwrap(), &ctx);
        let e = back.get("prod").unwrap_err().to_string();
        assert!(e.contains("no context \"prod\" (there are: lab"), "{e}");
        std::fs::write(&path, "current = 3\n").unwrap();
        let e = format!("{:#}", Contexts::load(&path).unwrap_err());
        assert!(e.contains("is not a contexts file"), "{e}");
        assert!(check_name("a b").is_err() && check_name("").is_err() && check_name("lab-1.x").is_ok());
    }
}
