//! End-to-end: the coordinator's `/metrics` (issue 18) on a real cluster, scraped over HTTP
//! while jobs run, parsed by a real parser of the Prometheus text format (`prometheus-parse`),
//! with security on: no token, a bad token and a worker's join token are refused.

use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig};

const JOB: &str = r#"
name = "metered"

[[task]]
name = "gen"
command = "head -c 65536 /dev/zero > $PLEXUS_OUT/blob"
replicas = 4
outputs = ["blob"]

[[task]]
name = "sum"
command = "cat $PLEXUS_IN/gen/*/blob | wc -c"
inputs = ["gen/blob"]
"#;

use plexus_e2e::http_get as get;

fn scrape(c: &Cluster) -> prometheus_parse::Scrape {
    let (code, body) =
        get(c.http.as_deref().expect("the coordinator serves HTTP"), "/metrics", c.admin_token.as_deref());
    assert_eq!(code, 200, "{body}");
    conventions(&body);
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("valid Prometheus text")
}

/// A worker's `/metrics` (its address from its log: "serving /metrics bound=ADDR").
fn scrape_worker(c: &Cluster, i: usize) -> prometheus_parse::Scrape {
    let log = c.worker_log(i);
    let addr = log
        .lines()
        .filter(|l| l.contains("serving /metrics"))
        .find_map(|l| l.split("bound=").nth(1))
        .map(|a| a.split_whitespace().next().unwrap_or(a).to_string())
        .unwrap_or_else(|| panic!("worker {i} logs where it serves /metrics:\n{log}"));
    let (code, body) = get(&format!("http://{addr}"), "/metrics", None);
    assert_eq!(code, 200, "{body}");
    conventions(&body);
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("valid Prometheus text")
}

/// Prometheus naming conventions on the raw text: every family `plexus_`-prefixed, every
/// counter's samples named `<family>_total`, base units in the names of what has them.
fn conventions(text: &str) {
    let mut counters = 0;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (family, kind) = rest.split_once(' ').expect("# TYPE name kind");
            assert!(family.starts_with("plexus_"), "{line}");
            if kind == "counter" {
                counters += 1;
                let samples: Vec<&str> =
                    text.lines().filter(|l| !l.starts_with('#') && l.starts_with(family)).collect();
                assert!(
                    !samples.is_empty() && samples.iter().all(|l| l.starts_with(&format!("{family}_total"))),
                    "{family}: {samples:?}"
                );
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            assert!(line.starts_with("plexus_"), "{line}");
        }
    }
    assert!(counters >= 3, "counters exported: {text}");
}

/// The value of `name` whose labels include every pair of `labels`; histograms give their count.
fn value(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    s.samples.iter().find(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v))).map(|x| {
        match &x.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(b) => b.last().map_or(0.0, |b| b.count),
            prometheus_parse::Value::Summary(_) => f64::NAN,
        }
    })
}

#[test]
fn coordinator_metrics_move_with_the_work_and_need_a_token() {
    let c = Cluster::start(ClusterConfig { workers: 2, ..ClusterConfig::default() });
    let base = c.http.clone().expect("the coordinator printed its HTTP address");
    // Security is on: refused without a token, with a malformed or unknown one, and with the
    // workers' join token.
    assert_eq!(get(&base, "/metrics", None).0, 401);
    assert_eq!(get(&base, "/metrics", Some("not-a-token")).0, 401);
    let join = std::fs::read_to_string(c.join_token_file()).unwrap();
    let (code, body) = get(&base, "/metrics", Some(join.trim()));
    assert_eq!(code, 401, "a join token reads nothing: {body}");
    assert_eq!(get(&base, "/nothing-here", c.admin_token.as_deref()).0, 404);

    let before = scrape(&c);
    let workers_before: Vec<prometheus_parse::Scrape> = (0..2).map(|i| scrape_worker(&c, i)).collect();
    assert_eq!(value(&before, "plexus_build_info", &[("version", env!("CARGO_PKG_VERSION"))]), Some(1.0));
    assert_eq!(value(&before, "plexus_workers", &[("state", "alive")]), Some(2.0));
    assert_eq!(value(&before, "plexus_placements_total", &[("placer", "least-loaded")]).unwrap_or(0.0), 0.0);

    let id = c.submit("metered.toml", JOB);
    let status = c.wait_job(&id, Duration::from_secs(60));
    assert_eq!(status.state, plexus_proto::pb::JobState::Succeeded as i32, "{status:?}");
    let after = scrape(&c);
    assert_eq!(
        value(&after, "plexus_placements_total", &[("placer", "least-loaded"), ("result", "assigned")]),
        Some(5.0),
        "4 gen + 1 sum placed"
    );
    assert_eq!(value(&after, "plexus_submit_to_placed_seconds", &[]), Some(5.0), "one latency per placement");
    assert!(value(&after, "plexus_placed_to_running_seconds", &[]).unwrap() >= 1.0, "starts observed");
    assert_eq!(value(&after, "plexus_jobs", &[("state", "succeeded")]), Some(1.0));
    assert_eq!(value(&after, "plexus_subtasks", &[("state", "succeeded")]), Some(5.0));
    assert_eq!(value(&after, "plexus_subtasks_pending", &[("reason", "no_room")]), Some(0.0));
    assert!(
        value(&after, "plexus_engine_round_seconds", &[]).unwrap()
            > value(&before, "plexus_engine_round_seconds", &[]).unwrap()
    );
    assert!(value(&after, "plexus_store_commit_seconds", &[]).unwrap() > 0.0);
    // The workers: the sum's inputs came from the other worker over the data plane, so rail
    // bytes grew on both; attempts counted; every input either a cache hit or a fetch.
    let workers_after: Vec<prometheus_parse::Scrape> = (0..2).map(|i| scrape_worker(&c, i)).collect();
    let total = |v: &[prometheus_parse::Scrape], name: &str, labels: &[(&str, &str)]| -> f64 {
        v.iter()
            .map(|s| {
                s.samples
                    .iter()
                    .filter(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
                    .map(|x| match x.value {
                        prometheus_parse::Value::Counter(v)
                        | prometheus_parse::Value::Gauge(v)
                        | prometheus_parse::Value::Untyped(v) => v,
                        _ => 0.0,
                    })
                    .sum::<f64>()
            })
            .sum()
    };
    assert_eq!(total(&workers_after, "plexus_attempts_total", &[("result", "succeeded")]), 5.0);
    assert_eq!(
        total(&workers_after, "plexus_cache_hits_total", &[]) + total(&workers_after, "plexus_fetches_total", &[]),
        4.0,
        "the sum read 4 inputs"
    );
    assert!(
        total(&workers_after, "plexus_fetches_total", &[]) >= 1.0,
        "least-loaded spread gen over both workers, so something was fetched"
    );
    assert!(total(&workers_after, "plexus_fetched_bytes_total", &[]) >= 65536.0);
    assert!(
        total(&workers_after, "plexus_rail_sent_bytes_total", &[])
            > total(&workers_before, "plexus_rail_sent_bytes_total", &[]),
        "rail bytes grow"
    );
    assert!(total(&workers_after, "plexus_rail_received_bytes_total", &[]) >= 65536.0);
    assert_eq!(total(&workers_after, "plexus_build_info", &[]), 2.0);
    // No job ids in labels (conventions are checked on every scrape).
    for s in &after.samples {
        assert!(!s.labels.values().any(|v| v.starts_with("job-")), "{s:?}");
    }
}

#[test]
fn the_learned_placer_reports_its_decisions_and_an_insecure_coordinator_needs_no_token() {
    let c =
        Cluster::start(ClusterConfig { workers: 2, placer: "rl".into(), insecure: true, ..ClusterConfig::default() });
    let base = c.http.clone().expect("the coordinator printed its HTTP address");
    let id = c.submit("metered.toml", JOB);
    let status = c.wait_job(&id, Duration::from_secs(60));
    assert_eq!(status.state, plexus_proto::pb::JobState::Succeeded as i32, "{status:?}");
    let (code, body) = get(&base, "/metrics", None);
    assert_eq!(code, 200, "{body}");
    conventions(&body);
    let s = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("valid Prometheus text");
    assert_eq!(value(&s, "plexus_policy_decisions_total", &[]), Some(5.0), "{body}");
    assert_eq!(value(&s, "plexus_policy_decision_seconds", &[]), Some(5.0), "one time per decision");
    assert_eq!(value(&s, "plexus_placements_total", &[("placer", "rl")]), Some(5.0));
    // Read once: a second scrape does not count the same decisions again.
    let again = get(&base, "/metrics", None).1;
    let s2 = prometheus_parse::Scrape::parse(again.lines().map(|l| Ok(l.to_string()))).unwrap();
    assert_eq!(value(&s2, "plexus_policy_decision_seconds", &[]), Some(5.0));
    assert_eq!(value(&s2, "plexus_policy_decisions_total", &[]), Some(5.0));
}
