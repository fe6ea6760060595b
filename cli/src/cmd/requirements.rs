//! A job's `python = { requirements = "requirements.txt" }` at submit: the file (relative to the
//! job file's folder, as `working_dir` is) is read here, on the submitter's machine, checked line
//! by line ([`plexus_proto::runtime_env::parse_requirements_file`]), and its requirements put in
//! the job in its place, so that the coordinator keeps them with the job (a `plexus resubmit`
//! builds the same environment) and workers never read the submitter's files.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::Value;

/// The largest requirements file read.
const MAX_FILE: u64 = 1 << 20;

/// `source` with every `python.requirements` that names a file (the job's and each task's)
/// replaced by the file's requirements; unchanged (byte for byte) when none names one. A file
/// that does not parse is left to the coordinator, which names the mistake with its line.
pub fn inline(source: &str, format: &str, job_file: &Path) -> anyhow::Result<String> {
    let parsed: Option<Value> = match format {
        "json" => serde_json::from_str(source).ok(),
        _ => toml::from_str(source).ok(),
    };
    let Some(mut root) = parsed else { return Ok(source.to_string()) };
    let base = job_file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
    let mut changed = inline_one(&mut root, &base, "python.requirements")?;
    for key in ["task", "tasks"] {
        if let Some(Value::Array(tasks)) = root.get_mut(key) {
            for t in tasks {
                let name = t.get("name").and_then(Value::as_str).unwrap_or("?").to_string();
                changed |= inline_one(t, &base, &format!("task {name:?}: python.requirements"))?;
            }
        }
    }
    if !changed {
        return Ok(source.to_string());
    }
    match format {
        "json" => Ok(serde_json::to_string_pretty(&root)?),
        _ => toml::to_string(&root).context("the job with its requirements cannot be written as TOML"),
    }
}

/// Inlines `at.python.requirements` if it is a file name; whether it did.
fn inline_one(at: &mut Value, base: &Path, what: &str) -> anyhow::Result<bool> {
    let Some(req) = at.get_mut("python").and_then(|p| p.get_mut("requirements")) else { return Ok(false) };
    let Value::String(file) = req else { return Ok(false) };
    let path = if Path::new(file.as_str()).is_absolute() { PathBuf::from(&*file) } else { base.join(&*file) };
    let list = read(&path).with_context(|| format!("{what} = {file:?}"))?;
    *req = Value::Array(list.into_iter().map(Value::String).collect());
    Ok(true)
}

/// The requirements in the file at `path`.
fn read(path: &Path) -> anyhow::Result<Vec<String>> {
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if !meta.is_file() {
        bail!("{} is not a file", path.display());
    }
    if meta.len() > MAX_FILE {
        bail!("{} is {} bytes, larger than a requirements file can be ({MAX_FILE})", path.display(), meta.len());
    }
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("{} is not a requirements file: it is not UTF-8 text", path.display()))?;
    let list = plexus_proto::runtime_env::parse_requirements_file(&text)
        .map_err(|e| anyhow::anyhow!("{} is not a requirements file: {e}", path.display()))?;
    if list.is_empty() {
        bail!("{} lists no requirement", path.display());
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requirements_file_is_put_in_the_job() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("jobs")).unwrap();
        std::fs::write(dir.path().join("jobs/req.txt"), "# pinned\nsix==1.16.0\ntomli  # any\n").unwrap();
        let job = dir.path().join("jobs/j.toml");
        let src =
            "python = { requirements = \"req.txt\", pip = [\"attrs\"] }\n[[task]]\nname = \"t\"\ncommand = \"x\"\n";
        let out = inline(src, "toml", &job).unwrap();
        let v: Value = toml::from_str(&out).unwrap();
        assert_eq!(v["python"]["requirements"], serde_json::json!(["six==1.16.0", "tomli"]));
        assert_eq!(v["python"]["pip"], serde_json::json!(["attrs"]));

        let per_task = "[[task]]\nname = \"t\"\ncommand = \"x\"\npython = { requirements = \"req.txt\" }\n";
        let v: Value = toml::from_str(&inline(per_task, "toml", &job).unwrap()).unwrap();
        assert_eq!(v["task"][0]["python"]["requirements"], serde_json::json!(["six==1.16.0", "tomli"]));

        let untouched = "# comment kept\npython = { pip = [\"six\"] }\n";
        assert_eq!(inline(untouched, "toml", &job).unwrap(), untouched, "nothing to inline: the text as it was");
        assert_eq!(inline("not = = toml", "toml", &job).unwrap(), "not = = toml", "left to the coordinator");
    }

    #[test]
    fn a_file_that_is_not_a_requirements_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let job = dir.path().join("j.toml");
        let src =
            |f: &str| format!("[[task]]\nname = \"train\"\ncommand = \"x\"\npython = {{ requirements = \"{f}\" }}\n");
        std::fs::write(dir.path().join("script.py"), "import torch\nprint(torch)\n").unwrap();
        std::fs::write(dir.path().join("opts.txt"), "six\n--index-url https://elsewhere\n").unwrap();
        std::fs::write(dir.path().join("bin.txt"), [0xffu8, 0xfe, 0]).unwrap();
        std::fs::write(dir.path().join("empty.txt"), "# nothing\n").unwrap();
        let err = |f: &str| format!("{:#}", inline(&src(f), "toml", &job).unwrap_err());
        let e = err("script.py");
        assert!(e.starts_with("task \"train\": python.requirements = \"script.py\": ") && e.contains("line 1"), "{e}");
        assert!(err("opts.txt").contains("line 2: \"--index-url https://elsewhere\": options"), "{}", err("opts.txt"));
        assert!(err("bin.txt").contains("not UTF-8 text"), "{}", err("bin.txt"));
        assert!(err("empty.txt").contains("lists no requirement"), "{}", err("empty.txt"));
        assert!(err("missing.txt").contains("cannot read"), "{}", err("missing.txt"));
    }
}
