//! The architecture's rules as facts of the build, so a change that breaks one fails the tests
//! instead of only contradicting ARCHITECTURE.md (whose "Invariants" lines these tests mirror):
//! * what a crate may not depend on, on the real dependency tree (`cargo tree`): the scheduling
//!   core does no I/O, the simulator, the worker and the CLI link no libtorch;
//! * on the source text of every crate of the workspace (read from the root `Cargo.toml`'s
//!   `members`): no module cycle in any crate (`architecture/module_graph.rs`), no source file
//!   over 800 lines of non-test code, only `coordinator::etcd` names `etcd_client`, a `tonic::Status`
//!   is built in one module per crate, one error enum per library crate, the scheduling core
//!   reads no clock, and no function is over 100 lines.
//!
//! What counts as source: every `.rs` file under a member's `src/`, binaries (`src/main.rs`,
//! `src/bin/`) included — a binary is read like any other code. Not counted: `tests/`,
//! `benches/` and `examples/` folders, the part of a file from its first `#[cfg(test)]` on, and
//! whole files that are test modules (declared `#[cfg(test)] mod x;`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "architecture/module_graph.rs"]
mod module_graph;

use module_graph::{blank_non_code, crate_sources, cycles, name, references};

/// The names of every package `package` depends on (normal dependencies, transitively, with
/// the features the package alone turns on).
fn dependencies(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--manifest-path",
            manifest,
            "-p",
            package,
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .output()
        .expect("running cargo tree");
    assert!(out.status.success(), "cargo tree -p {package} failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("cargo tree prints UTF-8");
    let mut names: Vec<String> = text.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_string).collect();
    names.sort();
    names.dedup();
    assert!(names.iter().any(|n| n == package), "cargo tree did not list {package} itself: {text}");
    names
}

fn assert_free_of(package: &str, forbidden: &[&str]) {
    let deps = dependencies(package);
    let found: Vec<&String> = deps.iter().filter(|d| forbidden.contains(&d.as_str())).collect();
    assert!(found.is_empty(), "{package} must not depend on {found:?} (forbidden: {forbidden:?})");
}

#[test]
fn the_scheduling_core_does_no_io() {
    assert_free_of("plexus-scheduler", &["tokio", "tonic", "prost", "sled", "tch", "torch-sys"]);
}

#[test]
fn the_simulator_does_not_link_libtorch() {
    assert_free_of("plexus-sim", &["tch", "torch-sys", "tokio", "tonic", "sled"]);
}

#[test]
fn the_worker_and_cli_do_not_link_libtorch() {
    assert_free_of("plexus-worker", &["tch", "torch-sys", "plexus-policy"]);
    assert_free_of("plexus-cli", &["tch", "torch-sys", "plexus-policy"]);
}

#[test]
fn the_launcher_only_spawns_processes() {
    // `plexus up` links it, so it must stay as light as the CLI: no runtime, no gRPC, no libtorch.
    assert_free_of("plexus-launch", &["tokio", "tonic", "tch", "torch-sys", "plexus-policy"]);
}

#[test]
fn the_check_sees_what_a_crate_does_depend_on() {
    // Without this the checks above could pass on an empty or misparsed tree.
    let deps = dependencies("plexus-coordinator");
    for d in ["tokio", "tonic", "sled", "tch", "plexus-scheduler"] {
        assert!(deps.iter().any(|n| n == d), "plexus-coordinator should depend on {d}: {deps:?}");
    }
}

/// The workspace's root folder.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("the workspace root")
}

/// The member folders the root `Cargo.toml` lists (`members = ["proto", …]`).
fn members() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("reading the root Cargo.toml");
    let start = manifest.find("members").expect("the workspace lists its members");
    let list = &manifest[start..];
    let list = &list[list.find('[').expect("members = [")..=list.find(']').expect("members = [...]")];
    let names: Vec<String> = list.split('"').skip(1).step_by(2).map(str::to_string).collect();
    assert!(names.len() >= 10, "members misread from the root Cargo.toml: {names:?}");
    names
}

/// One source file of a member crate.
struct Source {
    /// The member folder (`coordinator`).
    member: String,
    /// Path from the workspace root (`coordinator/src/rpc.rs`).
    path: String,
    /// The file's code before its first `#[cfg(test)]`, comments and literals blanked.
    code: String,
    /// The lines of that part.
    lines: usize,
    /// The whole file, comments and literals blanked (test code included).
    all_code: String,
    /// Under `src/bin/`, or a `main.rs`: part of a binary, not of the library.
    binary: bool,
}

/// Every `.rs` file under `dir`, as paths relative to `src`.
fn rs_files(src: &Path, dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rs_files(src, &p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p.strip_prefix(src).expect("under src").to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The names of the modules `code` declares as test-only: `#[cfg(test)]` (other attributes may
/// follow) then `mod NAME;`.
fn test_modules(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("#[cfg(test)]") {
        let mut rest = code[at + "#[cfg(test)]".len()..].trim_start();
        while rest.starts_with("#[") {
            rest = rest[rest.find(']').map_or(rest.len(), |e| e + 1)..].trim_start();
        }
        for vis in ["pub(crate) ", "pub(super) ", "pub "] {
            rest = rest.strip_prefix(vis).unwrap_or(rest).trim_start();
        }
        if let Some(decl) = rest.strip_prefix("mod ") {
            let name: String = decl.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if decl.trim_start()[name.len()..].trim_start().starts_with(';') {
                out.push(name);
            }
        }
    }
    out
}

/// Every source file of every member, test-only files left out (see the header).
fn sources() -> Vec<Source> {
    let root = root();
    let mut out = Vec::new();
    for member in members() {
        let src = root.join(&member).join("src");
        let mut rels = Vec::new();
        rs_files(&src, &src, &mut rels);
        let blanked: BTreeMap<String, String> = rels
            .iter()
            .map(|rel| {
                let text =
                    std::fs::read_to_string(src.join(rel)).unwrap_or_else(|e| panic!("read {member}/src/{rel}: {e}"));
                (rel.clone(), blank_non_code(&text))
            })
            .collect();
        // The folder (relative to src/) whose files are a test module's: `a/b.rs` declares
        // `a/b/NAME.rs`, `a/mod.rs` (and lib.rs, main.rs) `a/NAME.rs`.
        let mut test_only: Vec<String> = Vec::new();
        for (rel, code) in &blanked {
            let stem = rel.strip_suffix(".rs").expect("a .rs file");
            let dir = match stem.rsplit_once('/') {
                Some((d, "mod" | "main" | "lib")) => format!("{d}/"),
                None if matches!(stem, "mod" | "main" | "lib") => String::new(),
                _ => format!("{stem}/"),
            };
            for m in test_modules(code) {
                test_only.push(format!("{dir}{m}.rs"));
                test_only.push(format!("{dir}{m}/"));
            }
        }
        for (rel, all_code) in blanked {
            if test_only.iter().any(|t| rel == *t || (t.ends_with('/') && rel.starts_with(t.as_str()))) {
                continue;
            }
            let cut = all_code.find("#[cfg(test)]").unwrap_or(all_code.len());
            let code = all_code[..cut].to_string();
            let lines = code.lines().count();
            let binary = rel.starts_with("bin/") || rel == "main.rs";
            out.push(Source {
                member: member.clone(),
                path: format!("{member}/src/{rel}"),
                code,
                lines,
                all_code,
                binary,
            });
        }
    }
    out
}

/// Whether `code` holds `word` with no identifier character right before it.
fn starts_word(code: &str, at: usize) -> bool {
    at == 0 || !code.as_bytes()[at - 1].is_ascii_alphanumeric() && code.as_bytes()[at - 1] != b'_'
}

/// The places where `code` builds a `tonic::Status`: `Status::name(` for any associated
/// function (`new`, `internal`, `not_found`, `from_error`, …), as `Status` or `tonic::Status`.
fn status_constructions(code: &str) -> Vec<String> {
    code.match_indices("Status::")
        .filter(|(at, _)| starts_word(code, *at))
        .filter_map(|(at, _)| {
            let rest = &code[at + "Status::".len()..];
            let f: String = rest.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
            (!f.is_empty() && rest[f.len()..].starts_with('(')).then(|| format!("Status::{f}("))
        })
        .collect()
}

/// The error enums `code` declares (`enum Error`, `pub enum ConvertError`).
fn error_enums(code: &str) -> Vec<String> {
    code.match_indices("enum ")
        .filter(|(at, _)| starts_word(code, *at))
        .filter_map(|(at, _)| {
            let name: String =
                code[at + 5..].trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            name.ends_with("Error").then_some(name)
        })
        .collect()
}

/// The functions with a body that `code` (comments and literals blanked) defines: (line of the
/// `fn`, lines from it to the closing brace, name). A signature ends at the first `{` (a body)
/// or `;` (a declaration without one) outside its parentheses and brackets (`[u8; 4]`); the
/// body ends at the brace that matches. Nested functions count on their own and in their
/// enclosing one.
fn functions(code: &str) -> Vec<(usize, usize, String)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    for (at, _) in code.match_indices("fn ").filter(|(at, _)| starts_word(code, *at)) {
        let name: String =
            code[at + 3..].trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            continue; // a fn pointer type, `fn(u32) -> u32`
        }
        let mut depth = 0i32;
        let mut i = at;
        let open = loop {
            match b.get(i) {
                None => break None,
                Some(b';') if depth == 0 => break None,
                Some(b'(' | b'[') => depth += 1,
                Some(b')' | b']') => depth -= 1,
                Some(b'{') if depth == 0 => break Some(i),
                _ => {}
            }
            i += 1;
        };
        let Some(open) = open else { continue };
        let mut braces = 0i32;
        let close = (open..b.len()).find(|&j| {
            match b[j] {
                b'{' => braces += 1,
                b'}' => braces -= 1,
                _ => {}
            }
            braces == 0
        });
        let end = close.unwrap_or(b.len().saturating_sub(1));
        let first = line_at(code, at);
        out.push((first, line_at(code, end) - first + 1, name));
    }
    out
}

/// 1-based line of byte offset `at`.
fn line_at(code: &str, at: usize) -> usize {
    code[..at].matches('\n').count() + 1
}

#[test]
fn no_crate_has_a_module_cycle() {
    let root = root();
    let mut problems = Vec::new();
    for member in members() {
        let src = root.join(&member).join("src");
        for p in cycles(&crate_sources(&src)) {
            problems.push(format!("{member}: {p}"));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n\n"));
}

/// Files are split by stage before they grow past what a reader takes in at once.
#[test]
fn no_source_file_is_over_800_lines_of_non_test_code() {
    const MAX: usize = 800;
    let mut over: Vec<(usize, String)> =
        sources().into_iter().filter(|s| s.lines > MAX).map(|s| (s.lines, s.path)).collect();
    over.sort_by(|a, b| b.cmp(a));
    assert!(over.is_empty(), "source files over {MAX} lines of non-test code (lines, file): {over:?}");
}

/// Functions stay short enough to read at once: none in non-test code is over 100 lines, from
/// its `fn` line to its closing brace. A longer one is split into named steps.
#[test]
fn no_function_is_over_100_lines() {
    const MAX: usize = 100;
    let mut over: Vec<(usize, String)> = sources()
        .iter()
        .flat_map(|s| {
            functions(&s.code)
                .into_iter()
                .filter(|(_, len, _)| *len > MAX)
                .map(move |(line, len, name)| (len, format!("{}:{line} fn {name}", s.path)))
        })
        .collect();
    over.sort_by(|a, b| b.cmp(a));
    assert!(over.is_empty(), "functions over {MAX} lines of non-test code (lines, file:line):\n{over:#?}");
}

#[test]
fn only_the_coordinators_etcd_module_knows_etcd() {
    let found: Vec<String> = sources()
        .iter()
        .filter(|s| !s.path.starts_with("coordinator/src/etcd"))
        .flat_map(|s| {
            s.all_code
                .match_indices("etcd_client")
                .map(move |(at, _)| format!("{}:{}", s.path, line_at(&s.all_code, at)))
        })
        .collect();
    assert!(found.is_empty(), "etcd_client used outside coordinator/src/etcd*: {found:?}");
}

#[test]
fn a_crate_builds_a_tonic_status_in_one_module() {
    let mut by_crate: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in sources() {
        if !status_constructions(&s.code).is_empty() {
            by_crate.entry(s.member.clone()).or_default().insert(s.path.clone());
        }
    }
    let many: Vec<String> = by_crate
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|(member, files)| format!("{member} builds a Status in {files:?}"))
        .collect();
    assert!(many.is_empty(), "errors become a Status in one module per crate:\n{}", many.join("\n"));
}

#[test]
fn a_library_crate_has_one_error_enum() {
    let mut by_crate: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in sources().iter().filter(|s| !s.binary) {
        for e in error_enums(&s.code) {
            by_crate.entry(s.member.clone()).or_default().push(format!("{e} ({})", s.path));
        }
    }
    let many: Vec<String> = by_crate
        .iter()
        .filter(|(_, enums)| enums.len() > 1)
        .map(|(member, enums)| format!("{member}: {}", enums.join(", ")))
        .collect();
    assert!(many.is_empty(), "library crates with more than one error enum:\n{}", many.join("\n"));
}

#[test]
fn the_scheduling_core_reads_no_clock() {
    let found: Vec<String> = sources()
        .iter()
        .filter(|s| s.member == "scheduler")
        .flat_map(|s| {
            ["Instant::now", "SystemTime::now", "now_ms()"].into_iter().flat_map(move |clock| {
                s.code.match_indices(clock).map(move |(at, _)| format!("{}:{} {clock}", s.path, line_at(&s.code, at)))
            })
        })
        .collect();
    assert!(found.is_empty(), "the scheduling core reads the clock (time is a parameter): {found:?}");
}

/// The source checks above see the code they judge, so they cannot pass by seeing nothing: the
/// files they read, the constructions, enums and uses they count where the code has them, and
/// none in comments, strings or test code.
#[test]
fn the_source_checks_see_the_code() {
    let all = sources();
    let file = |path: &str| all.iter().find(|s| s.path == path).unwrap_or_else(|| panic!("{path} not read"));
    for member in ["proto", "scheduler", "coordinator", "worker", "cli", "dataplane", "bench"] {
        assert!(all.iter().any(|s| s.member == member), "no source read for {member}");
    }
    assert!(file("coordinator/src/etcd/client.rs").all_code.contains("etcd_client"));
    assert!(file("scheduler/src/lib.rs").lines > 10);
    assert!(error_enums(&file("worker/src/error.rs").code) == ["Error"]);
    assert!(file("cli/src/main.rs").binary && file("bench/src/bin/rails.rs").binary);
    // Test-only files are not read: the core's tests are a `#[cfg(test)] mod tests;`.
    assert!(all.iter().all(|s| s.path != "scheduler/src/core/tests.rs"), "a test module was read as source");

    let code = blank_non_code(
        "// Status::new(\nfn f() -> tonic::Status { let s = \"Status::internal(\"; Status::not_found(\"x\") }\n\
         pub enum ParseError { A }\nenum Kind {}\n/// enum FakeError\n",
    );
    assert_eq!(status_constructions(&code), ["Status::not_found("]);
    assert_eq!(error_enums(&code), ["ParseError"]);
    assert!(status_constructions("pb::JobStatus::default()").is_empty());
    let code = blank_non_code(
        "type F = fn(u32) -> u32;\ntrait T {\n    fn declared(&self, k: [u8; 4]);\n}\n\
         pub fn outer(k: [u8; 4]) -> u32 {\n    let c = '{';\n    let s = \"}}\";\n    fn inner() {}\n    // }\n    1\n}\n",
    );
    let found = functions(&code);
    let found: Vec<(usize, usize, &str)> = found.iter().map(|(l, n, f)| (*l, *n, f.as_str())).collect();
    assert_eq!(found, [(5, 7, "outer"), (8, 1, "inner")]);
    assert!(functions(&file("worker/src/error.rs").code).iter().any(|(_, len, name)| name == "code" && *len > 40));
    assert_eq!(
        test_modules(
            "#[cfg(test)]\nmod tests;\n#[cfg(test)]\n#[path = \"x.rs\"]\npub(crate) mod hostile;\n#[cfg(test)]\nmod inline {}\n"
        ),
        ["tests", "hostile"]
    );
}

/// The module-graph scanner sees a crate's real dependencies (the data plane's, whose layout
/// ARCHITECTURE.md describes), so the cycle check cannot pass by seeing nothing.
#[test]
fn the_scanner_sees_the_crates_dependencies() {
    let edges = references(&crate_sources(&root().join("dataplane/src")));
    let has = |from: &str, to: &str| edges.keys().any(|(f, t)| name(f) == from && name(t) == to);
    for (from, to) in [
        ("collective::executor", "endpoint"),
        ("endpoint::receive", "elem"),
        ("endpoint::receive", "endpoint::state"),
        ("endpoint", "endpoint::state"),
        ("endpoint", "endpoint::config"),
        ("error", "peer_id"),
        ("wire", "peer_id"),
        ("collective::plan", "elem"),
        ("striping::qlearning", "striping::rail"),
    ] {
        assert!(
            has(from, to),
            "no edge {from} -> {to} among {:?}",
            edges.keys().map(|(f, t)| format!("{} -> {}", name(f), name(t))).collect::<Vec<_>>()
        );
    }
    // A file's own tests (`mod tests { use super::*; }`) do not import its parent, and doc
    // comments and strings are not references.
    assert!(!has("shared_buf", "reassembly"), "a doc link counted as an import");
    assert!(!has("endpoint::state", "endpoint"), "an inline test module's super:: counted as the parent");
    // The root's re-exports are its facade, not its dependencies.
    assert!(!has("crate", "collective"), "a `pub use` in lib.rs counted as the root using the module");
    // A binary-only crate's main.rs is its root.
    let cli = references(&crate_sources(&root().join("cli/src")));
    assert!(cli.keys().any(|(f, _)| name(f) == "crate"), "cli's main.rs read as the crate root");
}

fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(p, s)| (p.to_string(), s.to_string())).collect()
}

/// The checks fail on a cycle, and say which: two top-level modules importing each other.
#[test]
fn a_top_level_cycle_is_found_and_named() {
    let problems = cycles(&files(&[
        ("lib.rs", "pub mod error;\npub mod wire;\n"),
        ("error.rs", "use crate::wire::PeerId;\npub enum Error {}\n"),
        ("wire.rs", "use crate::error::{Error, Result};\npub struct PeerId;\n"),
    ]));
    let all = problems.join("\n");
    assert!(
        all.contains("top-level module cycle: error -> wire -> error")
            || all.contains("top-level module cycle: wire -> error -> wire"),
        "{all}"
    );
    assert!(all.contains("src/error.rs:1 `use crate::wire::PeerId;`"), "{all}");
}

/// A child using its parent's items through `super::` while the parent imports the child is
/// a cycle; the same child using a sibling is not, and neither is an inline test module's
/// `super::*`, a `mod` declaration, a comment or a string.
#[test]
fn a_parent_child_cycle_is_found_and_siblings_and_tests_are_not_cycles() {
    let parent = "mod health;\nmod send;\nmod state;\npub use send::go;\n";
    let bad = cycles(&files(&[
        ("lib.rs", "pub mod endpoint;\n"),
        ("endpoint/mod.rs", &format!("{parent}pub struct Inner;\n")),
        ("endpoint/send.rs", "use super::Inner;\npub fn go() {}\n"),
        ("endpoint/state.rs", "pub struct Inner;\n"),
    ]));
    let all = bad.join("\n");
    assert!(all.contains("file cycle: endpoint -> endpoint::send -> endpoint"), "{all}");
    assert!(all.contains("src/endpoint/send.rs:1 `use super::Inner;`"), "{all}");

    let good = cycles(&files(&[
        ("lib.rs", "pub mod endpoint;\n"),
        ("endpoint/mod.rs", parent),
        (
            "endpoint/send.rs",
            "use super::state::Inner;\n// use super::Inner;\nconst S: &str = \"super::Inner\";\npub fn go() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n    fn f<'a>(c: char) -> bool { c == '{' }\n}\n",
        ),
        ("endpoint/state.rs", "pub struct Inner;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n"),
        ("endpoint/health.rs", "#[cfg(test)]\nmod tests {\n    use super::super::state::Inner;\n}\n"),
    ]));
    assert!(good.is_empty(), "{}", good.join("\n"));
}

/// The crate root's re-exports are its facade: a child using `crate::Error` that `lib.rs`
/// re-exports from `error.rs` depends on `error`, not on the root. But a child using the root's
/// own items while the root's code uses the child is a cycle, and a module's inline tests are
/// no dependency of it.
#[test]
fn the_roots_reexports_are_a_facade_and_its_own_items_are_not() {
    let facade = cycles(&files(&[
        (
            "lib.rs",
            "pub mod error;\npub mod wire;\npub use error::Error;\npub use wire::{Frame, read as read_frame};\n",
        ),
        ("error.rs", "pub enum Error {}\n"),
        ("wire.rs", "use crate::Error;\npub struct Frame;\npub fn read() -> Result<Frame, Error> { todo!() }\n"),
    ]));
    assert!(facade.is_empty(), "{}", facade.join("\n"));
    let edges = references(&files(&[
        ("lib.rs", "pub mod error;\npub mod wire;\npub use error::Error;\n"),
        ("error.rs", "pub enum Error {}\n"),
        ("wire.rs", "use crate::Error;\n"),
    ]));
    let has = |from: &str, to: &str| edges.keys().any(|(f, t)| name(f) == from && name(t) == to);
    assert!(has("wire", "error") && !has("wire", "crate") && !has("crate", "error"), "{edges:?}");

    let own = cycles(&files(&[
        ("lib.rs", "pub mod wire;\npub fn limit() -> usize { wire::MAX }\n"),
        ("wire.rs", "pub const MAX: usize = 8;\npub fn check(n: usize) -> bool { n <= crate::limit() }\n"),
    ]));
    assert!(own.join("\n").contains("top-level module cycle: crate -> wire -> crate"), "{own:?}");

    let tests_only = cycles(&files(&[
        ("lib.rs", "pub mod engine;\npub mod estimates;\n"),
        ("engine.rs", "use crate::estimates::Measured;\npub fn simulate() {}\n"),
        ("estimates.rs", "pub struct Measured;\n#[cfg(test)]\nmod tests {\n    use crate::engine::simulate;\n}\n"),
    ]));
    assert!(tests_only.is_empty(), "{}", tests_only.join("\n"));
}

/// A longer cycle through three files is found too (not only a file and its importer).
#[test]
fn a_three_file_cycle_is_found() {
    let problems = cycles(&files(&[
        ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\npub mod segment;\n"),
        ("segment.rs", "pub fn cut() {}\n"),
        ("a.rs", "pub fn f() { crate::b::g() }\n"),
        ("b.rs", "pub fn g() { crate::c::h() }\n"),
        ("c.rs", "use crate::{a::f, segment};\npub fn h() {}\n"),
    ]));
    let all = problems.join("\n");
    assert!(all.contains("top-level module cycle: a -> b -> c -> a"), "{all}");
}
