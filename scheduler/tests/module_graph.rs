//! The scheduler crate's modules depend on each other in one direction only: a test over the
//! source text (the data plane's `dataplane/tests/module_graph.rs`, pointed at this crate).
//!
//! Every file under `src/` (but `src/bin/`, whose binaries are crates of their own) is read, its
//! comments and literals blanked, and its references to other modules of the crate collected:
//! `use` trees and paths that start with `crate::`, `super::`, `self::` or the name of a child
//! module the file declares. A `super::` inside an inline module (`mod tests { use super::*; }`)
//! first climbs out of the inline modules, so a file's own tests do not count as importing its
//! parent. Declaring a module (`mod x;`) is not a reference to it.
//!
//! Two graphs are checked, and a failure names the cycle with the line that makes each edge:
//! * the top-level modules (`crate::X`, and the crate root for `lib.rs`): no cycle;
//! * the files (`endpoint::send`, `endpoint` for `endpoint/mod.rs`, …): no cycle, so in
//!   particular no file imports a module that imports it back — the usual one being a child
//!   that takes its parent `mod.rs`'s items through `super::` while the parent imports the
//!   child. Shared types go in a sibling module both import, and `mod.rs` declares and
//!   re-exports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module path inside the crate: `[]` is the crate root, `["endpoint", "send"]` is
/// `endpoint/send.rs`.
type Module = Vec<String>;

/// Where an edge comes from: file and line of the first reference that makes it.
type Evidence = BTreeMap<(Module, Module), String>;

fn name(m: &Module) -> String {
    if m.is_empty() { "crate".to_string() } else { m.join("::") }
}

/// `src/endpoint/send.rs` → `endpoint::send`; `src/endpoint/mod.rs` → `endpoint`;
/// `src/lib.rs` → the root.
fn module_of(rel: &str) -> Module {
    let rel = rel.strip_suffix(".rs").expect("a .rs file");
    let mut parts: Vec<String> = rel.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The source with comments, string and char literals replaced by spaces (newlines kept, so
/// offsets and line numbers stay those of the file).
fn blank_non_code(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                let mut j = i;
                while j < b.len() {
                    if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                        depth += 1;
                        j += 2;
                    } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                        depth -= 1;
                        j += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        j += 1;
                    }
                }
                blank(&mut out, i, j);
                i = j;
            }
            b'r' if (i == 0 || !is_ident(b[i - 1])) && matches!(b.get(i + 1), Some(b'"') | Some(b'#')) => {
                // A raw string r"…" or r#"…"#.
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                let start = i + 2 + hashes;
                let end = b[start..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(b.len(), |p| start + p + close.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let end = (j + 1).min(b.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\''), or else a lifetime ('a), left alone.
                let end = if b.get(i + 1) == Some(&b'\\') {
                    // Skip the backslash and the escaped character, then find the closing quote.
                    b.get(i + 3..).and_then(|rest| rest.iter().position(|&c| c == b'\'')).map(|p| i + 3 + p + 1)
                } else {
                    let ch = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (b.get(i + 1 + ch) == Some(&b'\'')).then_some(i + 2 + ch)
                };
                match end {
                    Some(end) => {
                        blank(&mut out, i, end);
                        i = end;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8(out).expect("only ASCII bytes were replaced")
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// For every byte offset of `code`, how many inline modules (`mod x { … }`) enclose it.
fn inline_depths(code: &str) -> Vec<usize> {
    let b = code.as_bytes();
    let mut depths = vec![0; b.len() + 1];
    let mut braces = 0usize;
    // The brace depth just inside each open inline module.
    let mut open: Vec<usize> = Vec::new();
    let mut pending_mod = false;
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"mod")
            && (i == 0 || !is_ident(b[i - 1]))
            && b.get(i + 3).is_some_and(|c| c.is_ascii_whitespace())
        {
            // `mod name {` opens an inline module; `mod name;` declares a file.
            let rest = &code[i + 3..];
            let name_len = rest.trim_start().bytes().take_while(|&c| is_ident(c)).count();
            let after = rest.trim_start()[name_len..].trim_start();
            pending_mod = after.starts_with('{');
        }
        match b[i] {
            b'{' => {
                braces += 1;
                if pending_mod {
                    open.push(braces);
                    pending_mod = false;
                }
            }
            b'}' => {
                if open.last() == Some(&braces) {
                    open.pop();
                }
                braces = braces.saturating_sub(1);
            }
            _ => {}
        }
        depths[i] = open.len();
        i += 1;
    }
    depths[b.len()] = open.len();
    depths
}

/// The paths a `use` tree names: `a::{b, c::{self, d}}` → `a::b`, `a::c::self`, `a::c::d`.
fn expand_use_tree(tree: &str) -> Vec<Vec<String>> {
    fn go(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
        let tree = tree.trim();
        if tree.is_empty() {
            return;
        }
        if let Some(open) = tree.find('{') {
            let head: Vec<String> = segments(&tree[..open]);
            let close = tree.rfind('}').unwrap_or(tree.len());
            let inner = &tree[open + 1..close];
            let mut p = prefix.to_vec();
            p.extend(head);
            for part in split_top_level(inner) {
                go(&p, part, out);
            }
        } else {
            let tree = tree.split(" as ").next().unwrap_or(tree);
            let mut p = prefix.to_vec();
            p.extend(segments(tree));
            out.push(p);
        }
    }
    let mut out = Vec::new();
    go(&[], tree, &mut out);
    out
}

fn segments(path: &str) -> Vec<String> {
    path.split("::").map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

/// Splits `a, b::{c, d}, e` at the commas outside braces.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// The module a path written in `file` (with `inline` inline modules around it) refers to: the
/// longest known module its segments name, or `None` for a path outside the crate (`std::…`).
fn resolve(
    file: &Module,
    children: &BTreeSet<String>,
    inline: usize,
    path: &[String],
    known: &BTreeSet<Module>,
) -> Option<Module> {
    let (mut base, rest): (Module, &[String]) = match path.first().map(String::as_str) {
        Some("crate") => (vec![], &path[1..]),
        Some("self") => (file.clone(), &path[1..]),
        Some("super") => {
            let supers = path.iter().take_while(|s| *s == "super").count();
            let climb = supers.saturating_sub(inline);
            if climb > file.len() {
                return None;
            }
            (file[..file.len() - climb].to_vec(), &path[supers..])
        }
        Some(first) if children.contains(first) => {
            let mut m = file.clone();
            m.push(first.to_string());
            (m, &path[1..])
        }
        _ => return None,
    };
    for seg in rest {
        if seg == "self" {
            continue;
        }
        let mut next = base.clone();
        next.push(seg.clone());
        if known.contains(&next) {
            base = next;
        } else {
            break;
        }
    }
    Some(base)
}

/// Every edge (from file module, to module) of the crate whose files are `sources` (paths
/// relative to `src/`), with the line that makes it.
fn references(sources: &[(String, String)]) -> Evidence {
    let known: BTreeSet<Module> = sources.iter().map(|(p, _)| module_of(p)).collect();
    let mut edges = Evidence::new();
    for (rel, src) in sources {
        let file = module_of(rel);
        let code = blank_non_code(src);
        let depths = inline_depths(&code);
        // The file's child modules, which its paths may name directly (`use send::go;`).
        let children: BTreeSet<String> = known
            .iter()
            .filter(|m| m.len() == file.len() + 1 && m.starts_with(&file))
            .map(|m| m.last().expect("a child has a name").clone())
            .collect();
        let line_of = |at: usize| code[..at].matches('\n').count() + 1;
        let mut add = |at: usize, path: &[String], text: &str| {
            if let Some(to) = resolve(&file, &children, depths[at], path, &known)
                && to != file
            {
                edges
                    .entry((file.clone(), to))
                    .or_insert_with(|| format!("src/{rel}:{} `{}`", line_of(at), text.trim()));
            }
        };
        let b = code.as_bytes();
        // `use` trees.
        let mut i = 0;
        while let Some(p) = code[i..].find("use ") {
            let at = i + p;
            i = at + 4;
            if at > 0 && is_ident(b[at - 1]) {
                continue;
            }
            let Some(end) = code[at..].find(';') else {
                break;
            };
            let tree = &code[at + 4..at + end];
            for path in expand_use_tree(tree) {
                add(at, &path, &code[at..at + end + 1].split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
        // Paths in code: `crate::x`, `super::x`, `self::x`, `child::x`, not preceded by `::`
        // (a longer path) or an identifier character.
        let mut i = 0;
        while i < b.len() {
            if is_ident(b[i]) && (i == 0 || (!is_ident(b[i - 1]) && !code[..i].trim_end().ends_with("::"))) {
                let start = i;
                let mut segs = Vec::new();
                let mut j = i;
                loop {
                    let s = j;
                    while j < b.len() && is_ident(b[j]) {
                        j += 1;
                    }
                    segs.push(code[s..j].to_string());
                    let rest = &code[j..];
                    let trimmed = rest.trim_start();
                    if trimmed.starts_with("::") && !trimmed[2..].trim_start().starts_with(['{', '*', '<']) {
                        let skip = rest.len() - trimmed.len() + 2;
                        let after = &code[j + skip..];
                        j += skip + (after.len() - after.trim_start().len());
                        if j < b.len() && is_ident(b[j]) {
                            continue;
                        }
                    }
                    break;
                }
                if segs.len() > 1 {
                    add(start, &segs, &code[start..j]);
                }
                i = j.max(i + 1);
            } else {
                i += 1;
            }
        }
    }
    edges
}

/// A cycle in `graph`, as the nodes along it with the first repeated at the end.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut mark: BTreeMap<&str, Mark> = graph.keys().map(|k| (k.as_str(), Mark::New)).collect();
    for to in graph.values().flatten() {
        mark.entry(to.as_str()).or_insert(Mark::New);
    }
    let nodes: Vec<&str> = mark.keys().copied().collect();
    let empty = BTreeSet::new();
    // An explicit stack of (node, its successors still to visit), not recursion.
    for &root in &nodes {
        if mark[root] != Mark::New {
            continue;
        }
        let succ = |n: &str| graph.get(n).unwrap_or(&empty).iter().map(String::as_str).collect::<Vec<_>>();
        let mut stack: Vec<(&str, Vec<&str>)> = vec![(root, succ(root))];
        mark.insert(root, Mark::OnPath);
        while let Some((node, todo)) = stack.last_mut() {
            let node = *node;
            match todo.pop() {
                Some(next) => match mark[next] {
                    Mark::New => {
                        mark.insert(next, Mark::OnPath);
                        stack.push((next, succ(next)));
                    }
                    Mark::OnPath => {
                        let from = stack.iter().position(|(n, _)| *n == next).expect("on the path");
                        let mut cycle: Vec<String> = stack[from..].iter().map(|(n, _)| n.to_string()).collect();
                        cycle.push(next.to_string());
                        return Some(cycle);
                    }
                    Mark::Done => {}
                },
                None => {
                    mark.insert(node, Mark::Done);
                    stack.pop();
                }
            }
        }
    }
    None
}

/// The two graphs' cycles, each described with the line making every edge; empty if none.
fn cycles(sources: &[(String, String)]) -> Vec<String> {
    let edges = references(sources);
    // `endpoint::send` → `endpoint`; the root stays `crate`.
    let top = |m: &Module| m.first().cloned().unwrap_or_else(|| "crate".to_string());
    let mut problems = Vec::new();
    let mut report =
        |what: &str, graph: BTreeMap<String, BTreeSet<String>>, evidence: BTreeMap<(String, String), String>| {
            if let Some(cycle) = find_cycle(&graph) {
                let why: Vec<String> = cycle
                    .windows(2)
                    .map(|w| format!("  {} -> {}: {}", w[0], w[1], evidence[&(w[0].clone(), w[1].clone())]))
                    .collect();
                problems.push(format!("{what} cycle: {}\n{}", cycle.join(" -> "), why.join("\n")));
            }
        };

    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut evidence = BTreeMap::new();
    for ((from, to), line) in &edges {
        let (f, t) = (top(from), top(to));
        if f != t {
            graph.entry(f.clone()).or_default().insert(t.clone());
            evidence.entry((f, t)).or_insert_with(|| line.clone());
        }
    }
    report("top-level module", graph, evidence);

    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut evidence = BTreeMap::new();
    for ((from, to), line) in &edges {
        graph.entry(name(from)).or_default().insert(name(to));
        evidence.entry((name(from), name(to))).or_insert_with(|| line.clone());
    }
    report("file", graph, evidence);
    problems
}

/// Every `.rs` file under `dir`, as (path relative to `root`, text), in path order.
fn read_tree(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        let rel = p.strip_prefix(root).expect("under root").to_string_lossy().replace('\\', "/");
        if p.is_dir() {
            // Each binary under src/bin is a crate of its own, using this one by name.
            if rel != "bin" {
                read_tree(root, &p, out);
            }
        } else if rel.ends_with(".rs") {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
            out.push((rel, text));
        }
    }
}

fn crate_sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    read_tree(&src, &src, &mut out);
    out
}

#[test]
fn the_module_graph_has_no_cycle() {
    let sources = crate_sources();
    let problems = cycles(&sources);
    assert!(problems.is_empty(), "\n{}", problems.join("\n\n"));
}

/// The scanner sees the crate's real dependencies, so the test above cannot pass by seeing
/// nothing.
#[test]
fn the_scanner_sees_the_crates_dependencies() {
    let edges = references(&crate_sources());
    let has = |from: &str, to: &str| edges.keys().any(|(f, t)| name(f) == from && name(t) == to);
    for (from, to) in [
        ("core", "core::state"),
        ("core::state", "core::ledger"),
        ("core::state", "core::job_table"),
        ("core::placement", "core::state"),
        ("core::placement", "core::gang_book"),
        ("core::gang", "core::placement"),
        ("core::ledger", "core::records"),
        ("core::records", "hardware"),
        ("gpu::search", "gpu::objective"),
        ("gpu::topology", "hardware"),
        ("gpu::objective", "error"),
        ("spec", "error"),
        ("crate", "error"),
    ] {
        assert!(
            has(from, to),
            "no edge {from} -> {to} among {:?}",
            edges.keys().map(|(f, t)| format!("{} -> {}", name(f), name(t))).collect::<Vec<_>>()
        );
    }
    // A file's own tests (`mod tests { use super::*; }`) do not import its parent, and doc
    // comments and strings are not references.
    assert!(!has("error", "crate"), "a doc link counted as an import");
    assert!(!has("core::ready", "core"), "an inline test module's super:: counted as the parent");
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
