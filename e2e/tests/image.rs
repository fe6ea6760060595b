//! End-to-end: container images (issue 32 item 3) on real processes and a real Docker engine —
//! an `image` job runs in a container of the base image `make images` builds
//! (`scripts/docker-base.sh`, no registry needed) with its inputs read-only, its outputs
//! written, the same uid a process task of the job gets, its collective endpoint (socket and
//! secret) passed in, and its memory limit enforced (a task over it is killed as out of memory); `plexus workers` shows the runtime; an image that is not
//! there and cannot be pulled fails clearly; a cluster without a runtime refuses an `image` job
//! at submit; a bad image name is refused naming the field; nothing is left behind.

#[path = "support/require.rs"]
mod require;

use std::process::Command;
use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig, describe};
use plexus_proto::pb;

const DOCKER: require::Need =
    require::Need::Program { names: &["docker"], install: "a Docker engine (the compose tests need one too)" };

/// The image `scripts/docker-base.sh` provides (and `make images` builds on).
const IMAGE: &str = "debian:bookworm-slim";

fn write(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Makes sure the base image is there, as `make images` does (idempotent: nothing when it is).
fn base_image() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = Command::new("bash").arg(repo.join("scripts/docker-base.sh")).output().expect("bash");
    assert!(out.status.success(), "scripts/docker-base.sh failed: {}", describe(&out));
}

fn submit(c: &Cluster, file: &std::path::Path) -> String {
    let o = c.plexus(&["submit", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", describe(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

const JOB: &str = "name = \"boxed\"\n\
    [[task]]\nname = \"gen\"\ncommand = \"echo made-on-the-host > $PLEXUS_OUT/data; id -u > $PLEXUS_OUT/uid\"\noutputs = [\"data\", \"uid\"]\n\
    [[task]]\nname = \"use\"\nimage = \"debian:bookworm-slim\"\ninputs = [\"gen/data\", \"gen/uid\"]\nmemory = \"64MiB\"\noutputs = [\"r\"]\n\
    command = '''\n\
    r=$PLEXUS_OUT/r\n\
    [ -e /.dockerenv ] && echo in-a-container > $r\n\
    cat $PLEXUS_IN/gen/0/data >> $r\n\
    (echo x > $PLEXUS_IN/gen/0/data) 2>/dev/null && echo inputs-writable >> $r || echo inputs-read-only >> $r\n\
    [ \"$(id -u)\" = \"$(cat $PLEXUS_IN/gen/0/uid)\" ] && echo same-uid >> $r\n\
    [ \"$(pwd)\" = \"$(dirname $PLEXUS_OUT)\" ] && echo in-work-dir >> $r\n\
    '''\n";

#[test]
fn an_image_job_runs_in_a_container_with_its_inputs_identity_and_limits() {
    if !require::require(&[DOCKER]) {
        return;
    }
    base_image();
    let c = Cluster::start(ClusterConfig { workers: 1, ..ClusterConfig::default() });
    let workers = c.plexus(&["workers"]);
    assert!(String::from_utf8_lossy(&workers.stdout).contains(", docker"), "{}", describe(&workers));

    let job = c.path("job.toml");
    write(&job, JOB);
    let id = submit(&c, &job);
    let status = c.wait_job(&id, Duration::from_secs(180));
    assert_eq!(status.state, pb::JobState::Succeeded as i32, "{status:?}\n{}", c.worker_log(0));
    let out = c.path("out");
    let got = c.plexus(&["get", &id, "use", "-o", out.to_str().unwrap()]);
    assert!(got.status.success(), "{}", describe(&got));
    let text = std::fs::read_to_string(out.join("use/0/r")).unwrap();
    assert_eq!(text, "in-a-container\nmade-on-the-host\ninputs-read-only\nsame-uid\nin-work-dir\n");

    the_collective_endpoint_is_passed_in(&c);
    over_its_memory_it_is_killed(&c);
    a_missing_image_fails_clearly(&c);
    let left = Command::new("docker").args(["ps", "-aq", "--filter", "name=plexus-job-"]).output().unwrap();
    assert!(String::from_utf8_lossy(&left.stdout).trim().is_empty(), "containers left: {}", describe(&left));
    let devices = std::path::Path::new("/sys/fs/cgroup/devices/plexus");
    if devices.exists() {
        let worker = c.worker_id(0);
        let attempts: Vec<_> =
            std::fs::read_dir(devices.join(&worker)).map(|d| d.flatten().collect()).unwrap_or_default();
        let dirs: Vec<_> = attempts.iter().filter(|e| e.path().is_dir()).map(|e| e.path()).collect();
        assert!(dirs.is_empty(), "cgroups the runtime made are removed: {dirs:?}");
    }
}

/// A `communicator = true` member in a container finds its collective endpoint: the socket at
/// the path its variables name, and the secret.
fn the_collective_endpoint_is_passed_in(c: &Cluster) {
    let job = c.path("gang.toml");
    write(
        &job,
        "[[task]]\nname = \"m\"\nimage = \"debian:bookworm-slim\"\ncommunicator = true\noutputs = [\"e\"]\n\
         command = '[ -S \"$PLEXUS_COLLECTIVE_SOCKET\" ] && [ ${#PLEXUS_COLLECTIVE_SECRET} -ge 16 ] && echo endpoint > $PLEXUS_OUT/e'\n",
    );
    let id = submit(c, &job);
    let status = c.wait_job(&id, Duration::from_secs(120));
    assert_eq!(status.state, pb::JobState::Succeeded as i32, "{:?}", c.job(&id).map(|j| j.subtasks));
}

fn over_its_memory_it_is_killed(c: &Cluster) {
    let job = c.path("oom.toml");
    write(
        &job,
        "[[task]]\nname = \"hog\"\nimage = \"debian:bookworm-slim\"\nmemory = \"64MiB\"\n\
         command = 'x=$(head -c 300M /dev/zero | tr \"\\0\" a); echo survived ${#x}'\n",
    );
    let id = submit(c, &job);
    assert_eq!(c.wait_job(&id, Duration::from_secs(120)).state, pb::JobState::Failed as i32);
    let s = &c.job(&id).expect("the job").subtasks[0];
    assert!(
        s.error.contains("out of memory (limit 64.0 MiB)"),
        "the attempt's limit held the container: {s:?}\n{}",
        c.worker_log(0)
    );
}

fn a_missing_image_fails_clearly(c: &Cluster) {
    let job = c.path("missing.toml");
    write(&job, "[[task]]\nname = \"t\"\nimage = \"plexus-no-such-image:1\"\ncommand = \"echo ran\"\n");
    let id = submit(c, &job);
    assert_eq!(c.wait_job(&id, Duration::from_secs(120)).state, pb::JobState::Failed as i32);
    let s = &c.job(&id).expect("the job").subtasks[0];
    assert!(
        s.error.contains("image \"plexus-no-such-image:1\": not on this worker, and docker could not pull it"),
        "{}",
        s.error
    );
}

#[test]
fn without_a_runtime_an_image_job_is_refused_and_bad_names_are_named() {
    let c = Cluster::start(ClusterConfig {
        workers: 1,
        worker_args: vec!["--container-runtime".into(), "none".into()],
        ..ClusterConfig::default()
    });
    let job = c.path("job.toml");
    write(&job, &format!("[[task]]\nname = \"t\"\nimage = \"{IMAGE}\"\ncommand = \"true\"\n"));
    let o = c.plexus(&["submit", job.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("image \"debian:bookworm-slim\": no worker has a container runtime"),
        "{}",
        describe(&o)
    );
    write(&job, "[[task]]\nname = \"t\"\nimage = \"--privileged\"\ncommand = \"true\"\n");
    let o = c.plexus(&["submit", job.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("image \"--privileged\": "), "{}", describe(&o));
    let workers = c.plexus(&["workers"]);
    assert!(!String::from_utf8_lossy(&workers.stdout).contains("docker"), "{}", describe(&workers));
}
