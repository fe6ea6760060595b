//! End-to-end: the exchange kinds of seed 004, `alltoall` and `redistribute`, as built-in gangs
//! of real worker processes over the data plane (two loopback rails each), checked by a final
//! task against the answer computed from scratch; and inputs that do not fit what the job
//! declares fail every member with an error naming the field.

use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig, describe};
use plexus_proto::pb;

fn cluster(workers: usize) -> Cluster {
    Cluster::start(ClusterConfig {
        workers,
        cpus_per_worker: 1,
        worker_args: ["--rail", "127.0.0.1", "--rail", "127.0.0.2"].map(String::from).to_vec(),
        ..ClusterConfig::default()
    })
}

/// Every failed subtask's error of a failed job, for assertions on what they name.
fn errors(status: &pb::JobStatus) -> Vec<String> {
    status
        .subtasks
        .iter()
        .flat_map(|s| std::iter::once(s.error.clone()).chain(s.failed_attempts.iter().map(|f| f.error.clone())))
        .filter(|e| !e.is_empty())
        .collect()
}

#[test]
fn the_redistribute_example_moves_cyclic_3_over_4_to_cyclic_5_over_3() {
    let c = cluster(4);
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/redistribute.toml");
    let source = std::fs::read_to_string(file).expect("the example");
    // The example as written (auto: the cost model's choice), and overridden: css, the seed's
    // own schedule (Algorithm 1 does not apply to these parameters, so this is its Algorithm 2)
    // and MPICH's pairwise order.
    for schedule in ["auto", "css", "seed", "pairwise"] {
        let text = source.replace("schedule = \"auto\"", &format!("schedule = \"{schedule}\""));
        let job = c.submit("redistribute.toml", &text);
        let status = c.wait_job(&job, Duration::from_secs(120));
        assert_eq!(status.state, pb::JobState::Succeeded as i32, "{schedule}: {status:?}\n{}", c.coordinator_log());
        let logs = c.plexus(&["logs", &job, "check"]);
        assert!(logs.status.success(), "{}", describe(&logs));
        let out = String::from_utf8_lossy(&logs.stdout);
        assert!(
            out.starts_with("ok: 10007 elements moved from cyclic(3) over 4 to cyclic(5) over 3"),
            "{schedule}: {out}"
        );
        // The gang is max(P, Q) = 4 members on four workers; member 3 only sends.
        let members: Vec<&pb::SubtaskStatus> = status.subtasks.iter().filter(|s| s.task == "redist").collect();
        assert_eq!(members.len(), 4, "{members:?}");
        let mut workers: Vec<&str> = members.iter().map(|s| s.worker_id.as_str()).collect();
        workers.sort();
        workers.dedup();
        assert_eq!(workers.len(), 4, "one member per worker: {members:?}");
        let member_log = c.plexus(&["logs", &job, "redist", "--rank", "3"]);
        let text = String::from_utf8_lossy(&member_log.stdout);
        let ran = if schedule == "auto" {
            ["css", "pairwise", "shift", "direct"]
                .into_iter()
                .find(|s| text.contains(&format!("(4 members), schedule {s}, rank 3:")))
                .unwrap_or("none")
        } else {
            schedule
        };
        assert!(
            text.starts_with(&format!(
                "redistribute i64 cyclic(3) over 4 -> cyclic(5) over 3 (4 members), schedule {ran}, rank 3:"
            )) && text.contains("wrote 0 bytes"),
            "{text}"
        );
        // `plexus explain` of a member says what ran and why: the cost model's prediction of
        // every candidate, or the job file's override.
        let explain = c.plexus(&["explain", &job, "redist", "--rank", "1"]);
        assert!(explain.status.success(), "{}", describe(&explain));
        let text = String::from_utf8_lossy(&explain.stdout);
        let line = text.lines().find(|l| l.starts_with("collective:")).unwrap_or_default();
        if schedule == "auto" {
            assert!(line.contains(&format!("{ran} chosen by the cost model")), "{text}");
            assert!(["css", "pairwise", "shift", "direct"].iter().all(|s| line.contains(&format!("{s} "))), "{text}");
        } else {
            assert!(line.contains(schedule) && line.contains("set by the job file"), "{text}");
        }
    }

    // Inputs that are not cyclic(3) over 4: declared as cyclic(4), every member fails naming
    // `from_block`, and none waits for bytes that never come.
    let wrong = source.replace("from_block = 3 ", "from_block = 4 ").replace("max_retries = 1", "max_retries = 0");
    assert_ne!(wrong, source);
    let job = c.submit("redistribute.toml", &wrong);
    let status = c.wait_job(&job, Duration::from_secs(120));
    assert_eq!(status.state, pb::JobState::Failed as i32, "{status:?}");
    let errs = errors(&status);
    assert!(
        errs.iter().any(|e| e.contains("from_block = 4: the inputs are not one array distributed cyclic(4) over 4")),
        "{errs:?}"
    );
}

/// Three producers write awkward sizes (10, 17 and 24 i32 values: replica r's element k is
/// 1000·r + k) and a split file; the alltoall cuts them equally, by a `counts` table, or by the
/// split files, and a final task checks that member j holds part j of every input, in rank order.
fn alltoall_job(split: &str, counts: &str, check: &str) -> String {
    let inputs = if split == "file" { r#"["gen/data", "gen/split"]"# } else { r#"["gen/data"]"# };
    format!(
        r#"
name = "alltoall"

[[task]]
name = "gen"
command = '''
perl -e 'my $r = $ENV{{PLEXUS_RANK}}; print pack("l<*", map {{ $r * 1000 + $_ }} 0 .. 9 + 7 * $r)' > $PLEXUS_OUT/data
perl -e 'my $r = $ENV{{PLEXUS_RANK}}; print join(" ", $r + 1, 2 * $r, 10 + 7 * $r - 3 * $r - 1), "\n"' > $PLEXUS_OUT/split
'''
replicas = 3
outputs = ["data", "split"]
cpu = 0.5
timeout = "60s"

[[task]]
name = "x"
kind = "alltoall"
inputs = {inputs}
outputs = ["data"]
dtype = "i32"
split = "{split}"
{counts}
schedule = "css"
cpu = 0.5
timeout = "60s"

[[task]]
name = "check"
inputs = ["x/data"]
env = {{ SPLIT = "{check}" }}
command = '''
perl -e 'my $equal = $ENV{{SPLIT}} eq "equal";
  for my $j (0 .. 2) {{
    my @want;
    for my $i (0 .. 2) {{
      my $l = 10 + 7 * $i;
      my @c = $equal ? map {{ int($l / 3) + ($_ < $l % 3 ? 1 : 0) }} 0 .. 2 : ($i + 1, 2 * $i, $l - 3 * $i - 1);
      my $start = 0; $start += $c[$_] for 0 .. $j - 1;
      push @want, map {{ $i * 1000 + $_ }} $start .. $start + $c[$j] - 1;
    }}
    open(my $f, "<", "$ENV{{PLEXUS_IN}}/x/$j/data") or die "member $j: $!\n"; binmode $f;
    my @got = unpack("l<*", do {{ local $/; <$f> }});
    die "member $j: got @got, want @want\n" unless "@got" eq "@want";
  }}
  print "ok: every member holds its part of every input\n";'
'''
cpu = 0.5
timeout = "60s"
"#
    )
}

#[test]
fn alltoall_delivers_every_part_by_equal_split_counts_table_and_split_file() {
    let c = cluster(3);
    let table = "counts = [[1, 0, 9], [2, 2, 13], [3, 4, 17]]";
    for (split, counts, check) in [("equal", "", "equal"), ("counts", table, "table"), ("file", "", "table")] {
        let job = c.submit("alltoall.toml", &alltoall_job(split, counts, check));
        let status = c.wait_job(&job, Duration::from_secs(120));
        assert_eq!(status.state, pb::JobState::Succeeded as i32, "split {split}: {status:?}\n{}", c.coordinator_log());
        let logs = c.plexus(&["logs", &job, "check"]);
        assert!(logs.status.success(), "{}", describe(&logs));
        assert_eq!(
            String::from_utf8_lossy(&logs.stdout).trim(),
            "ok: every member holds its part of every input",
            "split {split}"
        );
    }

    // A table that does not match member 2's input (24 elements, the row adds up to 23): that
    // member says so naming `counts`, and the others pass its reason on.
    let bad = alltoall_job("counts", "counts = [[1, 0, 9], [2, 2, 13], [3, 4, 16]]", "table");
    let job = c.submit("alltoall.toml", &bad);
    let status = c.wait_job(&job, Duration::from_secs(120));
    assert_eq!(status.state, pb::JobState::Failed as i32, "{status:?}");
    let errs = errors(&status);
    // Whichever member's report fails the job, it names the cause.
    assert!(
        !errs.is_empty()
            && errs
                .iter()
                .all(|e| e.contains("counts[2] adds up to 23 elements, but member 2's input has 24 i32 elements")),
        "{errs:?}"
    );

    // A table of the wrong shape never reaches a worker.
    let e = c
        .try_submit("alltoall.toml", &alltoall_job("counts", "counts = [[1, 0, 9], [2, 2, 13]]", "table"))
        .expect_err("refused");
    assert!(e.message().contains("counts has 2 rows; it needs one per member (3"), "{e}");
}
