//! End-to-end: a job's `working_dir` (issue 32 item 1) on real processes — code that exists only
//! in the submitter's directory runs on three workers, read-only, as each attempt's working
//! directory; the same directory submitted again uploads nothing; and bad working dirs and bad
//! uploads are refused, naming `working_dir` and what was wrong.

use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig, describe};
use plexus_proto::pb;

/// The coordinator's archive limit in these tests: small, so that "over the limit" is cheap.
const LIMIT: u64 = 64 << 10;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The bytes uploaded, as `plexus submit` reports them on stderr.
fn uploaded(o: &std::process::Output) -> u64 {
    let err = stderr(o);
    let at = err.find("uploaded ").unwrap_or_else(|| panic!("no upload line: {}", describe(o)));
    err[at + 9..].split_whitespace().next().unwrap().parse().unwrap()
}

fn write(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Bytes no compressor shrinks (a seeded xorshift), so an archive of them is as large as they are.
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

const SCRIPT: &str = "#!/bin/sh\n\
    # Runs from the unpacked working dir: its own files are here, and it cannot change them.\n\
    cat lib/data.txt > \"$PLEXUS_OUT/out\"\n\
    [ \"$(pwd)\" = \"$PLEXUS_WORKING_DIR\" ] && echo cwd-is-working-dir >> \"$PLEXUS_OUT/out\"\n\
    if touch new-file 2>/dev/null || echo x >> lib/data.txt 2>/dev/null; then echo writable; else echo read-only; fi >> \"$PLEXUS_OUT/out\"\n\
    [ -e secret.txt ] && echo leaked-gitignored >> \"$PLEXUS_OUT/out\"\n\
    [ -e big ] && echo leaked-excluded >> \"$PLEXUS_OUT/out\"\n\
    exit 0\n";

#[test]
fn code_from_the_submitters_directory_runs_on_three_workers_and_uploads_once() {
    let c = Cluster::start(ClusterConfig {
        workers: 3,
        coordinator_args: vec!["--working-dir-limit".into(), format!("{LIMIT}")],
        ..ClusterConfig::default()
    });
    let project = c.path("project");
    write(&project.join("main.sh"), SCRIPT);
    write(&project.join("lib/data.txt"), "shipped with the job\n");
    write(&project.join(".gitignore"), "secret.txt\n");
    write(&project.join("secret.txt"), "not for the cluster\n");
    std::fs::create_dir_all(project.join("big")).unwrap();
    std::fs::write(project.join("big/blob.bin"), noise(2 * LIMIT as usize)).unwrap();
    // Each replica asks for every core of a worker, so the three run on three workers.
    let job = "name = \"shipped\"\nworking_dir = \".\"\nexcludes = [\"big/\"]\n\
               [[task]]\nname = \"run\"\ncommand = [\"sh\", \"main.sh\"]\nreplicas = 3\ncpu = 2\noutputs = [\"out\"]\n";
    write(&project.join("job.toml"), job);
    let job_file = project.join("job.toml");

    let first = c.plexus(&["submit", job_file.to_str().unwrap()]);
    assert!(first.status.success(), "{}", describe(&first));
    assert!(uploaded(&first) > 0, "{}", describe(&first));
    let id = String::from_utf8_lossy(&first.stdout).trim().to_string();
    let status = c.wait_job(&id, Duration::from_secs(120));
    assert_eq!(status.state, pb::JobState::Succeeded as i32, "{status:?}\n{}", c.coordinator_log());
    let full = c.job(&id).expect("the job");
    let mut workers: Vec<&str> = full.subtasks.iter().map(|s| s.worker_id.as_str()).collect();
    workers.sort();
    workers.dedup();
    assert_eq!(workers.len(), 3, "three workers ran it: {:?}", full.subtasks);
    let out = c.path("out");
    let got = c.plexus(&["get", &id, "run", "-o", out.to_str().unwrap()]);
    assert!(got.status.success(), "{}", describe(&got));
    for rank in 0..3 {
        let text = std::fs::read_to_string(out.join(format!("run/{rank}/out"))).unwrap();
        assert_eq!(text, "shipped with the job\ncwd-is-working-dir\nread-only\n", "rank {rank}");
    }

    // The same directory again: nothing is uploaded, and it runs the same.
    let again = c.plexus(&["submit", job_file.to_str().unwrap()]);
    assert!(again.status.success(), "{}", describe(&again));
    assert_eq!(uploaded(&again), 0, "{}", describe(&again));
    let second = String::from_utf8_lossy(&again.stdout).trim().to_string();
    assert_eq!(c.wait_job(&second, Duration::from_secs(120)).state, pb::JobState::Succeeded as i32);
    // --working-dir names it from the command line, relative to where plexus runs.
    let plain = c.path("plain.toml");
    write(&plain, &job.replace("working_dir = \".\"\n", "").replace("excludes = [\"big/\"]\n", ""));
    let flag = c.plexus(&["submit", plain.to_str().unwrap(), "--working-dir", project.join("lib").to_str().unwrap()]);
    assert!(flag.status.success() && uploaded(&flag) > 0, "{}", describe(&flag));
    let resubmit = c.plexus(&["resubmit", &second]);
    assert!(resubmit.status.success(), "{}", describe(&resubmit));

    bad_working_dirs_are_refused(&c, &project);
    bad_uploads_are_refused(&c);
}

/// What the CLI refuses before it uploads anything, each naming `working_dir`.
fn bad_working_dirs_are_refused(c: &Cluster, project: &std::path::Path) {
    let refused = |job: &str, says: &[&str]| {
        let file = project.join("bad.toml");
        write(&file, job);
        let o = c.plexus(&["submit", file.to_str().unwrap()]);
        let err = stderr(&o);
        assert!(!o.status.success() && says.iter().all(|s| err.contains(s)), "{says:?}: {}", describe(&o));
    };
    let task = "[[task]]\nname = \"t\"\ncommand = \"true\"\n";
    refused(&format!("working_dir = \"main.sh\"\n{task}"), &["working_dir:", "main.sh is not a directory"]);
    refused(&format!("working_dir = \"missing\"\n{task}"), &["working_dir:", "is not a directory"]);
    refused(&format!("working_dir = \".\"\n{task}"), &["working_dir:", "over the coordinator's limit of 65536 bytes"]);
    std::fs::create_dir_all(project.join("escape")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", project.join("escape/passwd")).unwrap();
    refused(&format!("working_dir = \"escape\"\n{task}"), &["working_dir:", "symlink to /etc/passwd", "outside"]);
    refused(&format!("working_dir = \"\"\n{task}"), &["working_dir", "expected a directory path"]);
}

/// What the coordinator refuses of an upload or a submit from the network.
fn bad_uploads_are_refused(c: &Cluster) {
    let mut client = c.client_with(c.admin_token.as_deref());
    let mut upload = |chunks: Vec<pb::WorkingDirChunk>| {
        c.block_on(client.upload_working_dir(futures::stream::iter(chunks))).expect_err("refused")
    };
    let chunk = |digest: &[u8], size: u64, data: &[u8]| pb::WorkingDirChunk {
        digest: digest.to_vec(),
        size,
        data: data.to_vec(),
    };
    let data = noise(1000);
    let digest = *blake3::hash(&data).as_bytes();
    let cases = [
        (vec![chunk(&digest, LIMIT + 1, &data)], "over this coordinator's limit of 65536 bytes"),
        (vec![chunk(&digest, 2000, &data)], "truncated: 1000 of the 2000 bytes"),
        (vec![chunk(&digest, 500, &data)], "more bytes than the 500 it announced"),
        (vec![chunk(&[7; 32], 1000, &data)], "hash to"),
        (vec![chunk(&digest, 1000, &data)], "corrupt"),
        (vec![chunk(&[1; 5], 1000, &data)], "digest"),
        (vec![], "no chunk"),
    ];
    for (chunks, says) in cases {
        let s = upload(chunks);
        assert_eq!(s.code(), tonic::Code::InvalidArgument, "{says}: {s:?}");
        assert!(s.message().contains(says) && s.message().contains("working_dir"), "{says}: {}", s.message());
    }
    let task = "working_dir = \".\"\n[[task]]\nname = \"t\"\ncommand = \"true\"\n";
    let submit = |digest: Vec<u8>| {
        let req = pb::SubmitJobRequest {
            source: task.into(),
            filename: "j.toml".into(),
            working_dir: digest,
            ..Default::default()
        };
        c.block_on(c.client_with(c.admin_token.as_deref()).submit_job(req)).expect_err("refused")
    };
    let s = submit(vec![9; 32]);
    assert_eq!(s.code(), tonic::Code::NotFound, "{s:?}");
    assert!(s.message().contains("working_dir: this coordinator holds no archive"), "{}", s.message());
    let s = submit(Vec::new());
    assert!(s.message().contains("working_dir: the job file names one, but the request carries no archive"), "{s:?}");
}
