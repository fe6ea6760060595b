//! End-to-end: contexts (issue 33 item 3) with a real `plexus up` on a port that is not the
//! default — the CLI reaches it with no exported variable from the folder of `plexus up` (its URL
//! file) and from anywhere else (the context `up` made current); `plexus context list|show|use`;
//! `--http` puts the dashboard where it is asked, and a restarted cluster keeps its dashboard URL.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use plexus_e2e::describe;

/// A `plexus up` in `dir` with contexts in `config`, its stdout in `dir/up.out`.
fn up(dir: &Path, config: &Path, extra: &[&str]) -> Child {
    let out = std::fs::File::create(dir.join("up.out")).unwrap();
    let err = std::fs::File::create(dir.join("up.err")).unwrap();
    let child = bare(dir, config)
        .args(["up", "--workers", "1", "--port", "0", "--cpus", "1"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("starting plexus up");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(dir.join("up.out")).unwrap_or_default().contains("export PLEXUS_TOKEN_FILE=") {
        let e = std::fs::read_to_string(dir.join("up.err")).unwrap_or_default();
        assert!(Instant::now() < deadline, "plexus up did not come up:\n{e}");
        std::thread::sleep(Duration::from_millis(100));
    }
    child
}

fn stop(mut child: Child) {
    // SAFETY: kill(2) with a pid we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}

/// `plexus` run in `cwd` with the contexts of `config` and none of the variables that name a
/// cluster: what it reaches, it finds by itself.
fn bare(cwd: &Path, config: &Path) -> Command {
    let mut cmd = Command::new(plexus_e2e::bin_dir().join("plexus"));
    cmd.current_dir(cwd).env("PLEXUS_CONFIG_DIR", config);
    for v in ["PLEXUS_COORDINATOR", "PLEXUS_TOKEN", "PLEXUS_TOKEN_FILE", "PLEXUS_CA", "PLEXUS_CONTEXT"] {
        cmd.env_remove(v);
    }
    cmd
}

/// `plexus ARGS` run in `cwd` with nothing but the contexts folder.
fn plexus(cwd: &Path, config: &Path, args: &[&str]) -> std::process::Output {
    bare(cwd, config).args(args).output().unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn a_cluster_on_any_port_is_reached_without_exports_and_keeps_its_dashboard_url() {
    let home = tempfile::tempdir().unwrap();
    let (project, elsewhere, config) =
        (home.path().join("lab"), home.path().join("elsewhere"), home.path().join("cfg"));
    for d in [&project, &elsewhere] {
        std::fs::create_dir_all(d).unwrap();
    }
    let http = free_port();
    let cluster = up(&project, &config, &["--http", &http.to_string()]);
    let job = project.join("j.toml");
    std::fs::write(&job, "name = \"ctx\"\n[[task]]\nname = \"t\"\ncommand = \"true\"\n").unwrap();

    // From the folder of `plexus up`: its URL file.
    let o = plexus(&project, &config, &["submit", job.to_str().unwrap(), "--watch"]);
    assert!(o.status.success(), "{}", describe(&o));
    // From elsewhere: the context `up` made current (named after the folder).
    let o = plexus(&elsewhere, &config, &["status", "ctx"]);
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("state:     succeeded"),
        "{}",
        describe(&o)
    );
    let list = plexus(&elsewhere, &config, &["context", "list"]);
    let text = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(text.contains("*        lab") && text.contains(&format!("http://127.0.0.1:{http}")), "{}", describe(&list));
    let show = String::from_utf8_lossy(&plexus(&elsewhere, &config, &["context", "show"]).stdout).into_owned();
    assert!(show.starts_with("name:        lab\ncoordinator: https://127.0.0.1:"), "{show}");
    assert!(show.contains(&format!("dashboard:   http://127.0.0.1:{http}\n")), "{show}");
    let bad = plexus(&elsewhere, &config, &["context", "use", "prod"]);
    assert!(
        !bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("no context \"prod\" (there are: lab"),
        "{}",
        describe(&bad)
    );
    let o = plexus(&elsewhere, &config, &["--context", "prod", "status"]);
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("no context \"prod\""),
        "{}",
        describe(&o)
    );
    stop(cluster);

    // Restarted without --http: the same dashboard URL as before.
    let again = up(&project, &config, &[]);
    let show = String::from_utf8_lossy(&plexus(&elsewhere, &config, &["context", "show", "lab"]).stdout).into_owned();
    assert!(show.contains(&format!("dashboard:   http://127.0.0.1:{http}\n")), "the same port after a restart: {show}");
    let o = plexus(&elsewhere, &config, &["status", "ctx"]);
    assert!(o.status.success(), "the context follows the restarted coordinator's port: {}", describe(&o));
    stop(again);
}
