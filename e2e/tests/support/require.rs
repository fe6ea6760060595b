//! `require`: the one gate of the tests that need something of the machine — a program (etcd,
//! chromium, iproute2) or root. A test that cannot have it is *skipped*, never passed: it says
//! `SKIPPED <test>: <what is missing>` straight to the process's stderr (not through `eprintln!`,
//! which the test harness captures and hides for a passing test), and returns. Only absence
//! skips: a program that is installed and then fails to start fails the test, because a start
//! error is a result, not a reason not to look. With `PLEXUS_REQUIRE_ALL=1` (set by `.ci/run`,
//! whose `make test` installs every program through `make deps`) nothing may be missing, and a
//! skip is a failure.
//!
//! Included by path (`#[path = ".../e2e/tests/support/require.rs"] mod require;`) in every test
//! crate that gates on a tool — the e2e tests, the coordinator's etcd store tests and the data
//! plane's rig test — so they share it without a dependency between those crates.

// Each including test crate uses only the needs it gates on.
#![allow(dead_code)]

use std::io::Write as _;
use std::path::PathBuf;

/// What a test needs of the machine.
pub enum Need {
    /// A program found on `PATH` under any of `names` (alternatives, first match wins), and
    /// what installs it.
    Program { names: &'static [&'static str], install: &'static str },
    /// The effective user is root (network namespaces and `tc` for the rail rig).
    Root,
}

pub const ETCD: Need =
    Need::Program { names: &["etcd"], install: "`make deps` (scripts/deps-etcd.sh) installs etcd-server" };
pub const ETCDCTL: Need =
    Need::Program { names: &["etcdctl"], install: "`make deps` (scripts/deps-etcd.sh) installs etcd-client" };
pub const CHROMIUM: Need = Need::Program {
    names: &["chromium", "chromium-browser", "google-chrome"],
    install: "`make deps` (scripts/deps-browser.sh) installs chromium",
};
pub const IP: Need = Need::Program { names: &["ip"], install: "`make deps` (scripts/deps-rails.sh) installs iproute2" };
pub const NSENTER: Need =
    Need::Program { names: &["nsenter"], install: "util-linux (`apt-get install util-linux`) installs nsenter" };
pub const TC: Need = Need::Program { names: &["tc"], install: "`make deps` (scripts/deps-rails.sh) installs iproute2" };
pub const ROOT: Need = Need::Root;

/// The first of `names` that is an executable file in a directory of `PATH`.
pub fn on_path(names: &[&str]) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|f| f.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
    })
}

impl Need {
    /// Where a program need is installed (`None` for a missing program, and for `Root`).
    pub fn path(&self) -> Option<PathBuf> {
        match self {
            Need::Program { names, .. } => on_path(names),
            Need::Root => None,
        }
    }

    /// Why this need is not met here, if it is not.
    fn missing(&self) -> Option<String> {
        match self {
            Need::Program { names, install } => match on_path(names) {
                Some(_) => None,
                None => Some(format!("{} is not on PATH; {install}", names.join(" / "))),
            },
            Need::Root => {
                use std::os::unix::fs::MetadataExt as _;
                // `/proc/self` belongs to the process's effective user (no libc needed here, so
                // every including crate can use this file as it is).
                match std::fs::metadata("/proc/self").map(|m| m.uid()) {
                    Ok(0) => None,
                    Ok(uid) => Some(format!("root is needed (network namespaces and tc), running as uid {uid}")),
                    Err(e) => Some(format!("root is needed, and /proc/self cannot be read to tell ({e})")),
                }
            }
        }
    }
}

/// Whether the calling test may run: `true` when every need is met. Otherwise the test is
/// skipped — `SKIPPED <test>: <why>` written unbuffered to stderr, `false` returned, and the
/// test returns at once — or, with `PLEXUS_REQUIRE_ALL=1`, fails here naming what is missing.
/// The test's name is its thread's, which the test harness sets.
pub fn require(needs: &[Need]) -> bool {
    let missing: Vec<String> = needs.iter().filter_map(Need::missing).collect();
    if missing.is_empty() {
        return true;
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<unnamed test>");
    let why = missing.join("; ");
    if std::env::var_os("PLEXUS_REQUIRE_ALL").is_some_and(|v| v == "1") {
        panic!("{test} cannot run and PLEXUS_REQUIRE_ALL=1 forbids skipping it: {why}");
    }
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "SKIPPED {test}: {why}");
    let _ = err.flush();
    false
}
