//! End-to-end: the web dashboard (issue 18) in a real headless browser (Debian's `chromium`,
//! installed by `make deps`), on a real secure cluster: every page loaded while a job runs,
//! checked as a person would — the DAG has one node per task and the right edges, progress
//! updates without a reload, a failed subtask's error is shown, filters work, and nothing is
//! shown without a token. With `PLEXUS_SCREENSHOTS=DIR` it also saves a screenshot of each
//! page there (how `docs/screenshots/` was made).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig};
use plexus_proto::pb;

#[path = "support/require.rs"]
mod require;

const DAG: &str = r#"
name = "dag"
[[task]]
name = "gen"
command = "sleep 3; head -c 100000 /dev/urandom > $PLEXUS_OUT/blob"
replicas = 3
outputs = ["blob"]
[[task]]
name = "mid"
command = "true"
after = ["gen"]
[[task]]
name = "sum"
command = "cat $PLEXUS_IN/gen/*/blob | wc -c"
inputs = ["gen/blob"]
after = ["mid"]
"#;

const BROKEN: &str = r#"
name = "broken"
[[task]]
name = "bad"
command = "echo about to fail >&2; exit 3"
max_retries = 1
retry_backoff = "0s"
"#;

/// The browser, or `None` (the test is skipped, and says so) where none is installed.
fn chromium() -> Option<PathBuf> {
    if !require::require(&[require::CHROMIUM]) {
        return None;
    }
    require::CHROMIUM.path()
}

/// A browser session (one profile, so the login cookie carries over).
struct Browser {
    bin: PathBuf,
    profile: tempfile::TempDir,
}

impl Browser {
    fn args(&self) -> Vec<String> {
        vec![
            "--headless".into(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--no-first-run".into(),
            format!("--user-data-dir={}", self.profile.path().display()),
        ]
    }

    /// The DOM after the page's script ran for `budget_ms` of virtual time (network waits,
    /// such as the job page's long polls, take real time).
    fn dom(&self, url: &str, budget_ms: u32) -> String {
        let o = Command::new(&self.bin)
            .args(self.args())
            .arg(format!("--virtual-time-budget={budget_ms}"))
            .args(["--dump-dom", url])
            .output()
            .expect("running chromium");
        assert!(o.status.success(), "chromium --dump-dom {url}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn screenshot(&self, url: &str, file: &Path) {
        let o = Command::new(&self.bin)
            .args(self.args())
            .args(["--virtual-time-budget=3000", "--hide-scrollbars", "--window-size=1280,860"])
            .arg(format!("--screenshot={}", file.display()))
            .arg(url)
            .output()
            .expect("running chromium");
        assert!(o.status.success() && file.is_file(), "screenshot of {url}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

/// Every match of `attr="…"` values on elements that carry `marker`.
fn attrs<'a>(dom: &'a str, marker: &str, attr: &str) -> Vec<&'a str> {
    dom.match_indices(marker)
        .filter_map(|(i, _)| {
            let tag_end = dom[i..].find('>')? + i;
            let tag_start = dom[..i].rfind('<')?;
            let tag = &dom[tag_start..tag_end];
            let at = tag.find(&format!("{attr}=\""))? + attr.len() + 2;
            Some(&tag[at..at + tag[at..].find('"')?])
        })
        .collect()
}

/// The body of a GET with a token (the raw page, as the server renders it).
fn get(base: &str, path: &str, token: &str) -> String {
    plexus_e2e::http_get(base, path, Some(token)).1
}

/// Cancel and resubmit: forms on a job's page for a submit (here admin) token, each carrying
/// the page's token; a POST without it, with another's, or from another origin is refused.
fn cancel_and_resubmit_from_the_dashboard(c: &Cluster, base: &str, token: &str, broken: &str) {
    let page = get(base, &format!("/jobs/{broken}"), token);
    assert!(page.contains("<form id=\"resubmit\" method=\"post\""), "{page}");
    assert!(!page.contains("id=\"cancel\""), "an ended job has nothing to cancel: {page}");
    let at = page.find("name=\"token\" value=\"").expect("the form's token") + 20;
    let form = &page[at..at + 32];
    let post = |path: &str, headers: &[(&str, &str)], body: &str| {
        plexus_e2e::http_post(base, path, Some(token), headers, body)
    };

    let (code, head, _) = post(&format!("/jobs/{broken}/resubmit"), &[], &format!("token={form}"));
    assert_eq!(code, 303, "{head}");
    let new = head.lines().find_map(|l| l.strip_prefix("location: /jobs/")).expect("a redirect to the new job");
    let again = c.wait_job(new.trim(), Duration::from_secs(60));
    assert_eq!((again.name.as_str(), again.state), ("broken", pb::JobState::Failed as i32), "the same file ran again");

    for (headers, body, says) in [
        (vec![], "token=0000".to_string(), "the form's token is not this page's"),
        (vec![], String::new(), "the form's token is not this page's"),
        (vec![("Origin", "http://evil.example")], format!("token={form}"), "another origin"),
        (vec![("Sec-Fetch-Site", "cross-site")], format!("token={form}"), "another site"),
    ] {
        let (code, _, body) = post(&format!("/jobs/{broken}/resubmit"), &headers, &body);
        assert!(code == 403 && body.contains(says), "{says}: {code} {body}");
    }
    let (code, _, _) =
        plexus_e2e::http_post(base, &format!("/jobs/{broken}/resubmit"), None, &[], &format!("token={form}"));
    assert_eq!(code, 401, "no token, no action");

    // A read token sees no forms.
    let o = c.plexus(&["token", "create", "--scope", "read"]);
    let read = String::from_utf8_lossy(&o.stdout).lines().find(|l| l.starts_with("plx_")).map(str::to_string);
    let read = read.unwrap_or_else(|| panic!("a read token: {}", plexus_e2e::describe(&o)));
    let page = get(base, &format!("/jobs/{broken}"), &read);
    assert!(page.contains("id=\"job-state\"") && !page.contains("<form"), "{page}");

    let long = c.submit("long.toml", "name = \"long\"\n[[task]]\nname = \"s\"\ncommand = \"sleep 30\"\ncpu = 0\n");
    let page = get(base, &format!("/jobs/{long}"), token);
    assert!(page.contains("<form id=\"cancel\""), "{page}");
    let (code, head, _) = post(&format!("/jobs/{long}/cancel"), &[], &format!("token={form}"));
    assert_eq!(code, 303, "{head}");
    assert_eq!(c.wait_job(&long, Duration::from_secs(30)).state, pb::JobState::Cancelled as i32);
}

#[test]
fn the_dashboard_in_a_real_browser() {
    let Some(bin) = chromium() else { return };
    let browser = Browser { bin, profile: tempfile::tempdir().unwrap() };
    let c = Cluster::start(ClusterConfig { workers: 2, ..ClusterConfig::default() });
    let base = c.http.clone().expect("the coordinator serves HTTP");
    let token = c.admin_token.clone().expect("a secure cluster");

    // Without a token: a sign-in form, no data.
    let dom = browser.dom(&format!("{base}/"), 1000);
    assert!(dom.contains("Sign in") && !dom.contains("id=\"jobs\""), "{dom}");

    let broken = c.submit("broken.toml", BROKEN);
    c.wait_job(&broken, Duration::from_secs(60));
    let dag = c.submit("dag.toml", DAG);
    // What the server renders once `gen` runs (it sleeps a while): running (before, pending).
    c.wait_for("the job to run", Duration::from_secs(30), |c| c.job(&dag).filter(|j| j.phase == "running"));
    let first = get(&base, &format!("/jobs/{dag}"), &token);
    assert!(first.contains("id=\"job-state\" class=\"state-running\""), "{first}");

    // The job page, loaded once (signing in on the way) while the job runs: the DAG, then the
    // script follows the job to its end without a reload.
    let dom = browser.dom(&format!("{base}/login?token={token}&next=/jobs/{dag}"), 20_000);
    let mut nodes = attrs(&dom, "class=\"node\"", "data-task");
    nodes.sort();
    assert_eq!(nodes, ["gen", "mid", "sum"], "one node per task:\n{dom}");
    let mut edges: Vec<(&str, &str)> =
        attrs(&dom, "class=\"edge\"", "data-from").into_iter().zip(attrs(&dom, "class=\"edge\"", "data-to")).collect();
    edges.sort();
    assert_eq!(edges, [("gen", "mid"), ("gen", "sum"), ("mid", "sum")], "an edge per dependency:\n{dom}");
    assert!(dom.contains("id=\"job-state\" class=\"state-succeeded\">succeeded<"), "updated without a reload:\n{dom}");
    assert_eq!(attrs(&dom, "class=\"node\"", "data-state"), ["succeeded"; 3], "{dom}");
    let updates: u32 = attrs(&dom, "<body", "data-updates")[0].parse().unwrap();
    assert!(updates >= 2, "the script updated the page {updates} times:\n{dom}");

    // The failed job shows its subtask's error.
    let dom = browser.dom(&format!("{base}/jobs/{broken}"), 2000);
    assert!(dom.contains("state-failed") && dom.contains("exit code 3"), "{dom}");
    assert!(dom.contains("<pre id=\"job-stderr\">about to fail</pre>"), "the failure's stderr on its page: {dom}");
    // Every attempt of the subtask, each with its error (it was retried once).
    assert!(dom.contains("attempt 1: exit code 3") && dom.contains("attempt 2: exit code 3"), "both attempts: {dom}");
    let logs = browser.dom(&format!("{base}/jobs/{broken}/logs/bad/0"), 1000);
    assert!(logs.contains("about to fail"), "{logs}");
    let explain = browser.dom(&format!("{base}/jobs/{dag}/explain/sum/0"), 1000);
    assert!(explain.contains("least-loaded") && attrs(&explain, "<tr class=", "class").len() >= 2, "{explain}");
    // Readable: the chosen worker first, said in words; the features folded away until asked for.
    assert_eq!(attrs(&explain, "<tr class=", "class")[0], "chosen", "{explain}");
    assert!(explain.contains("<td class=\"said\">chosen: the") && explain.contains("<summary>"), "{explain}");

    // Jobs: both listed; the state filter and the name search narrow it.
    let dom = browser.dom(&format!("{base}/"), 2000);
    let rows = attrs(&dom, "data-job=", "data-job");
    assert!(rows.contains(&dag.as_str()) && rows.contains(&broken.as_str()), "{dom}");
    // Each job's time queued and run, and its queue.
    assert!(dom.contains("<th>Queued</th><th>Ran</th><th>Queue</th>") && dom.contains("<td>default</td>"), "{dom}");
    let dom = browser.dom(&format!("{base}/?state=failed"), 2000);
    assert_eq!(attrs(&dom, "data-job=", "data-job"), [broken.as_str()], "{dom}");
    // The search matches names and ids: "ag" (g is no hex digit) can match no job id, where
    // "da" matched a broken job whose random id held "da" one run in eight.
    let dom = browser.dom(&format!("{base}/?q=ag"), 2000);
    assert_eq!(attrs(&dom, "data-job=", "data-job"), [dag.as_str()], "{dom}");

    cancel_and_resubmit_from_the_dashboard(&c, &base, &token, &broken);

    // The cluster's usage over time: a chart per resource, sampled since the coordinator began.
    let cluster = get(&base, "/cluster", &token);
    for id in ["cores", "memory", "gpus", "rails"] {
        assert!(cluster.contains(&format!("id=\"usage-{id}\"")), "{id}: {cluster}");
    }
    assert!(
        cluster.contains("cores held / offered: ") && cluster.contains(" / 4.0</h3>"),
        "2 workers of 2 cores: {cluster}"
    );

    // Workers, with their rails' traffic; the learned placer's page says it is not in use.
    let dom = browser.dom(&format!("{base}/workers"), 2000);
    assert_eq!(attrs(&dom, "data-worker=", "data-worker").len(), 2, "{dom}");
    assert!(dom.contains("class=\"rail\"") && dom.contains("alive"), "{dom}");
    let dom = browser.dom(&format!("{base}/policy"), 1000);
    assert!(dom.contains("id=\"not-learning\"") && dom.contains("--placer rl"), "{dom}");

    if let Some(dir) = std::env::var_os("PLEXUS_SCREENSHOTS") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, path) in [
            ("jobs", "/".to_string()),
            ("job", format!("/jobs/{dag}")),
            ("job-failed", format!("/jobs/{broken}")),
            ("placement", format!("/jobs/{dag}/explain/sum/0")),
            ("workers", "/workers".into()),
        ] {
            browser.screenshot(&format!("{base}{path}"), &dir.join(format!("{name}.png")));
        }
    }
}

#[test]
fn the_learned_placer_page_shows_its_counters() {
    let Some(bin) = chromium() else { return };
    let browser = Browser { bin, profile: tempfile::tempdir().unwrap() };
    let c =
        Cluster::start(ClusterConfig { workers: 2, placer: "rl".into(), insecure: true, ..ClusterConfig::default() });
    let base = c.http.clone().unwrap();
    let job = c.submit("dag.toml", DAG);
    c.wait_job(&job, Duration::from_secs(60));
    // The sampler reads the counters every 2 s: wait until it has (bounded), then load the page.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !get(&base, "/api/policy", "none").contains("\"decisions\":5") {
        assert!(
            std::time::Instant::now() < deadline,
            "the sampler never saw the 5 decisions: {}",
            get(&base, "/api/policy", "none")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let dom = browser.dom(&format!("{base}/policy"), 3000);
    let decisions = dom.split("id=\"decisions\">").nth(1).and_then(|r| r.split('<').next()).unwrap_or("");
    assert_eq!(decisions, "5", "5 subtasks placed by the learned placer:\n{dom}");
    assert!(dom.contains("id=\"curve\"") && dom.contains("one runs every 256 experiences"), "{dom}");
    // The anchored learner's record against fastest: untrained, it has not departed.
    let cell = |id: &str| {
        dom.split(&format!("id=\"{id}\">")).nth(1).and_then(|r| r.split('<').next()).unwrap_or("").to_string()
    };
    assert_eq!(cell("departures"), "0 of 5 decisions (0.0 %)", "{dom}");
    assert_eq!(cell("gain"), "none judged yet", "{dom}");
    assert_eq!(cell("guard"), "trusts the learner", "{dom}");
    assert!(cell("probes").parse::<u64>().is_ok_and(|p| p <= 5), "probes: {dom}");
    let api = get(&base, "/api/policy", "none");
    assert!(api.contains("\"anchor\":{") && api.contains("\"step_every\":256") && api.contains("\"probes\":"), "{api}");
    if let Some(dir) = std::env::var_os("PLEXUS_SCREENSHOTS") {
        browser.screenshot(&format!("{base}/policy"), &PathBuf::from(dir).join("policy.png"));
    }
}

/// The head of the response to one GET of `path` (status line and headers), over a fresh
/// connection: for the redirect `/login` answers.
fn response_head(base: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let addr = base.strip_prefix("http://").expect("an http:// URL");
    let mut s = std::net::TcpStream::connect(addr).expect("connecting to the coordinator's HTTP side");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("reading the response");
    raw.split("\r\n\r\n").next().unwrap_or_default().to_string()
}

/// `/login` sends the browser only to a plain path of this site: a `next` a browser would turn
/// into another site (TAB, CR and LF are stripped from URLs) is refused with 400, as is one
/// that cannot be a header (CR/LF), instead of answering 500 or redirecting off-site.
#[test]
fn login_redirects_only_to_plain_local_paths() {
    let c = Cluster::start(ClusterConfig { workers: 0, ..ClusterConfig::default() });
    let base = c.http.clone().expect("the coordinator serves HTTP");
    let token = c.admin_token.clone().expect("a secure cluster");
    let login = |next: &str| response_head(&base, &format!("/login?token={token}&next={next}"));
    let location = |head: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix("location: ").or_else(|| l.strip_prefix("Location: ")))
            .map(str::to_string)
    };
    let code = |head: &str| head.split_whitespace().nth(1).unwrap_or_default().to_string();

    let ok = login("%2Fjobs%3Fstate%3Dfailed");
    assert_eq!((code(&ok), location(&ok).as_deref()), ("303".into(), Some("/jobs?state=failed")), "{ok}");
    for off_site in ["%2F%09%2Fevil.example", "%2F%0A%2Fevil.example", "%2Fjobs%0D%0ASet-Cookie:%20x=1", "%2F%00"] {
        let head = login(off_site);
        assert_eq!(code(&head), "400", "next={off_site}: {head}");
        assert!(location(&head).is_none() && !head.contains("x=1"), "next={off_site}: {head}");
    }
    for elsewhere in ["%2F%2Fevil.example", "https:%2F%2Fevil.example", "%2F%5Cevil.example", "evil"] {
        let head = login(elsewhere);
        assert_eq!((code(&head), location(&head).as_deref()), ("303".into(), Some("/")), "next={elsewhere}: {head}");
    }
}
