//! What a task runs with beyond its command, as every side checks it: the Python requirements of
//! `python = { pip = [...] }` (a `requirements` file is read by the client and its lines sent the
//! same way) and a container `image = "name:tag"`. The coordinator refuses a job whose values
//! fail these checks, naming the field; the worker checks again before it hands them to pip or
//! to a container runtime, so that nothing from the network reaches either as an option.

/// The label a worker with a container runtime carries (`container-runtime=docker` or
/// `=podman`), set by the worker itself: a task with an `image` is placed only where it is.
pub const RUNTIME_LABEL: &str = "container-runtime";

/// The most requirements one task's environment lists, and the longest one.
pub const MAX_REQUIREMENTS: usize = 256;
pub const MAX_REQUIREMENT_LEN: usize = 512;
/// The longest image reference (Docker's own limit on a name is 255 before the tag).
pub const MAX_IMAGE_LEN: usize = 512;

/// Checks one requirement: `NAME[extras] [VERSION-SPEC] [; MARKER]` or `NAME[extras] @ URL`
/// (PEP 508). Options (`-r`, `-e`, `--index-url`) and paths are refused: an option would let a
/// job file steer the worker's pip, and a path names a file on the worker, not the submitter's.
pub fn check_requirement(r: &str) -> Result<(), String> {
    if r.trim().is_empty() {
        return Err("an empty requirement".into());
    }
    if r.len() > MAX_REQUIREMENT_LEN {
        return Err(format!("longer than {MAX_REQUIREMENT_LEN} bytes"));
    }
    if r.chars().any(char::is_control) {
        return Err("holds a control character".into());
    }
    let r = r.trim();
    if r.starts_with('-') {
        return Err("options (-r, -e, --index-url, ...) are not taken: list requirements only".into());
    }
    let name_len = r.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))).unwrap_or(r.len());
    let name = &r[..name_len];
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if name.is_empty() || !alnum(name.chars().next()) || !alnum(name.chars().last()) {
        return Err("does not start with a package name (letters, digits, '.', '_', '-')".into());
    }
    let mut rest = r[name_len..].trim_start();
    if let Some(after) = rest.strip_prefix('[') {
        let end = after.find(']').ok_or("an extras list '[' without its ']'")?;
        let extras = &after[..end];
        if !extras
            .split(',')
            .map(str::trim)
            .all(|e| !e.is_empty() && e.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(format!("extras [{extras}] are not names separated by commas"));
        }
        rest = after[end + 1..].trim_start();
    }
    let spec_end = rest.find(';').unwrap_or(rest.len());
    let (spec, marker) = (rest[..spec_end].trim(), &rest[spec_end..]);
    if marker.len() == 1 {
        return Err("';' without a marker after it".into());
    }
    if let Some(url) = spec.strip_prefix('@') {
        let url = url.trim();
        if !(url.starts_with("https://") || url.starts_with("http://") || url.starts_with("git+")) || url.contains(' ')
        {
            return Err(format!("@ {url}: a direct reference must be an http(s):// or git+ URL"));
        }
        return Ok(());
    }
    let spec = spec.trim_start_matches('(').trim_end_matches(')');
    if spec.is_empty() {
        return Ok(());
    }
    for clause in spec.split(',').map(str::trim) {
        let op_len = clause.find(|c: char| !matches!(c, '<' | '>' | '=' | '!' | '~')).unwrap_or(clause.len());
        let (op, version) = (&clause[..op_len], clause[op_len..].trim());
        if !matches!(op, "==" | "!=" | "<=" | ">=" | "<" | ">" | "~=" | "===") {
            return Err(format!("{clause:?} is not a version clause (==, !=, <=, >=, <, >, ~= then a version)"));
        }
        if version.is_empty()
            || !version.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '*' | '+' | '!' | '-' | '_'))
        {
            return Err(format!("{clause:?}: {version:?} is not a version"));
        }
    }
    Ok(())
}

/// Checks a list of requirements, naming the first bad one by its index.
pub fn check_requirements(list: &[String]) -> Result<(), String> {
    if list.len() > MAX_REQUIREMENTS {
        return Err(format!("{} requirements: at most {MAX_REQUIREMENTS}", list.len()));
    }
    for (i, r) in list.iter().enumerate() {
        check_requirement(r).map_err(|why| format!("[{i}] = {:?}: {why}", shown(r)))?;
    }
    Ok(())
}

/// The requirements of a `requirements.txt`, in order: comments (`#` at a line's start or after
/// a blank) and blank lines dropped, `\` continuations joined. Any other content (an option, a
/// line that is not a requirement, bytes that are not text) is refused with its line number.
pub fn parse_requirements_file(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    let mut start_line = 0;
    for (i, raw) in text.lines().enumerate() {
        if pending.is_empty() {
            start_line = i + 1;
        }
        let line = match raw.find('#') {
            Some(0) => "",
            Some(p) if raw[..p].ends_with(char::is_whitespace) => &raw[..p],
            _ => raw,
        };
        if let Some(joined) = line.trim_end().strip_suffix('\\') {
            pending.push_str(joined);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let req = std::mem::take(&mut pending).trim().to_string();
        if req.is_empty() {
            continue;
        }
        check_requirement(&req).map_err(|why| format!("line {start_line}: {:?}: {why}", shown(&req)))?;
        out.push(req);
        if out.len() > MAX_REQUIREMENTS {
            return Err(format!("more than {MAX_REQUIREMENTS} requirements"));
        }
    }
    let req = pending.trim();
    if !req.is_empty() {
        check_requirement(req).map_err(|why| format!("line {start_line}: {:?}: {why}", shown(req)))?;
        out.push(req.to_string());
    }
    Ok(out)
}

/// Checks an image reference: `[registry[:port]/]path[:tag][@sha256:hex]`, lower-case path
/// components of letters, digits and `._-`, as Docker and Podman take it. Never starts with
/// `-`, so it cannot be read as an option of the runtime.
pub fn check_image(image: &str) -> Result<(), String> {
    if image.is_empty() {
        return Err("an empty image name".into());
    }
    if image.len() > MAX_IMAGE_LEN {
        return Err(format!("longer than {MAX_IMAGE_LEN} bytes"));
    }
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (image, None),
    };
    if let Some(d) = digest {
        let hex = d.strip_prefix("sha256:").ok_or("a digest must be sha256:<64 hex digits>")?;
        if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err("a digest must be sha256:<64 hex digits>".into());
        }
    }
    // A tag is after the last ':' that follows the last '/' (a ':' before it is a registry port).
    let slash = rest.rfind('/').map_or(0, |p| p + 1);
    let (path, tag) = match rest[slash..].rfind(':') {
        Some(p) => (&rest[..slash + p], Some(&rest[slash + p + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        let ok = !tag.is_empty()
            && tag.len() <= 128
            && tag.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && tag.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !ok {
            return Err(format!("tag {tag:?} is not one (letters, digits, '.', '_', '-', at most 128)"));
        }
    }
    let mut parts: Vec<&str> = path.split('/').collect();
    // The first component is a registry when it has a '.', a ':' or is localhost.
    if parts.len() > 1 && (parts[0].contains('.') || parts[0].contains(':') || parts[0] == "localhost") {
        let registry = parts.remove(0);
        let ok = registry.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'))
            && registry.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
        if !ok {
            return Err(format!("registry {registry:?} is not a host name[:port]"));
        }
    }
    for p in parts {
        let ok = !p.is_empty()
            && p.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && p.chars().last().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
        if !ok {
            return Err(format!(
                "{p:?} is not a name component (lower-case letters, digits, '.', '_', '-', starting and ending with a letter or digit)"
            ));
        }
    }
    Ok(())
}

/// At most 80 characters of `s`, for messages.
fn shown(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_of_pep_508_pass() {
        for r in [
            "six",
            "six==1.16.0",
            "requests>=2.31,<3",
            "requests [security,socks] >= 2.8.1, == 2.8.*",
            "name; python_version < \"3.12\"",
            "torch~=2.3",
            "pkg @ https://example.org/pkg-1.0.tar.gz",
            "zope.interface===5.0",
            "a_b-c.d!=1.0.post1",
        ] {
            assert_eq!(check_requirement(r), Ok(()), "{r}");
        }
    }

    #[test]
    fn what_is_not_a_requirement_is_named() {
        let cases = [
            ("", "empty"),
            ("-e .", "options"),
            ("--index-url https://evil", "options"),
            ("-r /etc/shadow", "options"),
            ("./local/path", "package name"),
            ("/abs/path.whl", "package name"),
            ("import torch", "version clause"),
            ("six==", "not a version"),
            ("six=>1", "version clause"),
            ("pkg[a b]", "extras"),
            ("pkg[a", "without its ']'"),
            ("pkg @ file:///etc/passwd", "http(s)://"),
            ("pkg;", "marker"),
            ("six\n--pre", "control character"),
        ];
        for (r, why) in cases {
            let e = check_requirement(r).unwrap_err();
            assert!(e.contains(why), "{r:?}: {e}");
        }
        assert!(check_requirement(&"a".repeat(MAX_REQUIREMENT_LEN + 1)).unwrap_err().contains("longer"));
        let many = vec!["six".to_string(); MAX_REQUIREMENTS + 1];
        assert!(check_requirements(&many).unwrap_err().contains("at most"));
        assert!(check_requirements(&["six".into(), "-e x".into()]).unwrap_err().starts_with("[1] = \"-e x\""));
    }

    #[test]
    fn a_requirements_file_is_read_line_by_line() {
        let text = "# deps\nsix==1.16.0  # pinned\n\nrequests \\\n  >=2.31\n  # indented comment\ntomli";
        assert_eq!(parse_requirements_file(text).unwrap(), ["six==1.16.0", "requests    >=2.31", "tomli"]);
        let e = parse_requirements_file("six\n-r other.txt\n").unwrap_err();
        assert!(e.starts_with("line 2: \"-r other.txt\": options"), "{e}");
        let e = parse_requirements_file("import os\nprint(os)\n").unwrap_err();
        assert!(e.starts_with("line 1:"), "{e}");
        assert_eq!(parse_requirements_file("").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn image_references_are_checked() {
        for i in [
            "python:3.11-slim",
            "plexus/worker:debug",
            "localhost:5000/team/img:v1",
            "ghcr.io/org/img",
            "busybox",
            "img@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(check_image(i), Ok(()), "{i}");
        }
        for (i, why) in [
            ("", "empty"),
            ("--privileged", "name component"),
            ("Upper/case", "name component"),
            ("img:", "tag"),
            ("img:-x", "tag"),
            ("img@sha256:abc", "digest"),
            ("a//b", "name component"),
            ("img name", "name component"),
        ] {
            let e = check_image(i).unwrap_err();
            assert!(e.contains(why), "{i:?}: {e}");
        }
    }
}
