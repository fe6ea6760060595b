//! A job's `working_dir` at submit: read from the job file (after `--set`, so `--working-dir`
//! is one more override), resolved against the job file's folder, packed
//! ([`plexus_archive::pack`]: `.gitignore` and `excludes` honoured), and uploaded unless the
//! coordinator holds that digest already: resubmitting unchanged code uploads nothing.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use plexus_proto::pb;

use crate::client::Client;

/// One chunk of an upload (the coordinator's `CHUNK`).
const CHUNK: usize = 1 << 20;

/// The working dir a job file names, resolved.
#[derive(Debug, PartialEq)]
pub struct Declared {
    pub dir: PathBuf,
    pub excludes: Vec<String>,
}

/// `--set working_dir=...` for `--working-dir DIR`: DIR made absolute (it is relative to where
/// `plexus` runs, not to the job file), quoted so that TOML reads it as text.
pub fn override_for(dir: &Path) -> anyhow::Result<String> {
    let abs = std::path::absolute(dir).with_context(|| format!("--working-dir {}", dir.display()))?;
    let text = abs.to_str().with_context(|| format!("--working-dir {}: not UTF-8", abs.display()))?;
    Ok(format!("working_dir={}", serde_json::to_string(text)?))
}

/// The `working_dir` and `excludes` of `source` (`toml` or `json`), the directory resolved
/// against `job_file`'s folder. A file that does not parse, or whose values have the wrong
/// type, is left to the coordinator, which names the mistake with its line.
pub fn declared(source: &str, format: &str, job_file: &Path) -> Option<Declared> {
    let root: serde_json::Value = match format {
        "json" => serde_json::from_str(source).ok()?,
        _ => toml::from_str(source).ok()?,
    };
    let wd = root.get("working_dir")?.as_str().filter(|w| !w.trim().is_empty())?;
    let excludes = root
        .get("excludes")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let base = job_file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let dir = if Path::new(wd).is_absolute() { PathBuf::from(wd) } else { base.join(wd) };
    Some(Declared { dir, excludes })
}

/// Packs `d` without uploading it (`submit --dry-run`): what it would ship, in words.
pub async fn pack_only(d: &Declared) -> anyhow::Result<String> {
    let (dir, excludes) = (d.dir.clone(), d.excludes.clone());
    let limits = plexus_archive::Limits::DEFAULT;
    let packed = tokio::task::spawn_blocking(move || plexus_archive::pack(&dir, &excludes, &limits))
        .await
        .context("packing the working dir")??;
    Ok(format!(
        "working_dir {}: {} entries, {} bytes packed, digest {} (not uploaded)",
        d.dir.display(),
        packed.entries,
        packed.bytes.len(),
        packed.digest_hex()
    ))
}

/// Packs `d` and uploads it unless the coordinator holds it; returns its digest for the submit.
/// Says on stderr what it packed and how many bytes it uploaded.
pub async fn upload(client: &mut Client, d: &Declared) -> anyhow::Result<Vec<u8>> {
    let (dir, excludes) = (d.dir.clone(), d.excludes.clone());
    let limits = plexus_archive::Limits::DEFAULT;
    let packed = tokio::task::spawn_blocking(move || plexus_archive::pack(&dir, &excludes, &limits))
        .await
        .context("packing the working dir")??;
    let size = packed.bytes.len() as u64;
    let stat = client
        .stat_working_dir(pb::StatWorkingDirRequest { digest: packed.digest.to_vec() })
        .await
        .context("asking the coordinator for the working dir")?
        .into_inner();
    let sent = if stat.present {
        0
    } else {
        if size > stat.limit_bytes {
            bail!(
                "working_dir: {} packs to {size} bytes, over the coordinator's limit of {} bytes; leave large \
                 files out with `excludes` or .gitignore",
                d.dir.display(),
                stat.limit_bytes
            );
        }
        let chunks: Vec<pb::WorkingDirChunk> = packed
            .bytes
            .chunks(CHUNK)
            .enumerate()
            .map(|(i, c)| pb::WorkingDirChunk {
                digest: if i == 0 { packed.digest.to_vec() } else { Vec::new() },
                size: if i == 0 { size } else { 0 },
                data: c.to_vec(),
            })
            .collect();
        client.upload_working_dir(futures::stream::iter(chunks)).await?.into_inner().received_bytes
    };
    eprintln!(
        "working_dir {}: {} entries, {size} bytes packed, digest {}; uploaded {sent} bytes",
        d.dir.display(),
        packed.entries,
        packed.digest_hex()
    );
    Ok(packed.digest.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_is_relative_to_the_job_file() {
        let src = "working_dir = \"code\"\nexcludes = [\"*.log\"]\n[[task]]\nname = \"t\"\ncommand = \"x\"\n";
        let d = declared(src, "toml", Path::new("jobs/j.toml")).unwrap();
        assert_eq!(d, Declared { dir: "jobs/code".into(), excludes: vec!["*.log".into()] });
        assert_eq!(declared(src, "toml", Path::new("j.toml")).unwrap().dir, PathBuf::from("./code"));
        let json = r#"{"working_dir": "/abs", "task": []}"#;
        assert_eq!(declared(json, "json", Path::new("a/j.json")).unwrap().dir, PathBuf::from("/abs"));
        assert_eq!(declared("[[task]]\nname = \"t\"\n", "toml", Path::new("j.toml")), None);
        assert_eq!(declared("working_dir = 3\n", "toml", Path::new("j.toml")), None, "left to the coordinator");
        assert_eq!(declared("working_dir = \" \"\n", "toml", Path::new("j.toml")), None, "left to the coordinator");
        let set = override_for(Path::new("true")).unwrap();
        assert!(set.starts_with("working_dir=\"/") && set.ends_with("/true\""), "{set}");
    }
}
