//! The architecture's rules as facts of the build: what a crate may not depend on is checked
//! here, on the real dependency tree (`cargo tree`), so a change that makes the scheduling core
//! do I/O or the simulator link libtorch fails the tests instead of only contradicting
//! ARCHITECTURE.md.

use std::process::Command;

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
fn the_check_sees_what_a_crate_does_depend_on() {
    // Without this the checks above could pass on an empty or misparsed tree.
    let deps = dependencies("plexus-coordinator");
    for d in ["tokio", "tonic", "sled", "tch", "plexus-scheduler"] {
        assert!(deps.iter().any(|n| n == d), "plexus-coordinator should depend on {d}: {deps:?}");
    }
}
