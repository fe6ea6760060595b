//! End-to-end: a job's Python environment (issue 32 item 2) on real processes — a
//! `requirements.txt` job gets its package from the package index in a virtual environment the
//! worker builds once (two replicas that need it at once wait for one build, and a second job
//! reuses it); the environment is readable and not writable by the task's uid; a requirement that
//! cannot be installed fails the attempt before its command runs, with pip's own message; and a
//! requirements file that is not one is refused at submit, naming its line.

#[path = "support/require.rs"]
mod require;

use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig, describe};
use plexus_proto::pb;

const PYTHON_NEED: require::Need =
    require::Need::Program { names: &["python3"], install: "`apt-get install python3 python3-venv`" };

/// The interpreter the workers build with, and their arguments for it: `/usr/bin/python3`, which
/// task uids can run (the `python3` on `PATH` may live under a `/root` they cannot search), else
/// the one on `PATH` with tasks as the worker's user.
fn python_args() -> Vec<String> {
    let system = std::path::Path::new("/usr/bin/python3");
    match system.exists() {
        true => vec!["--python".into(), system.display().to_string()],
        false => {
            let found = PYTHON_NEED.path().expect("required above");
            vec!["--python".into(), found.display().to_string(), "--task-user".into(), "worker".into()]
        }
    }
}

fn write(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// What each replica writes: the package's version, where Python runs from, and whether the
/// environment can be written by the task.
const PROBE: &str = "import os, sys, six\n\
    out = open(os.path.join(os.environ['PLEXUS_OUT'], 'out'), 'w')\n\
    print(six.__version__, sys.prefix == os.environ['VIRTUAL_ENV'], file=out)\n\
    try:\n    open(os.path.join(sys.prefix, 'planted'), 'w'); print('writable', file=out)\n\
    except OSError:\n    print('read-only', file=out)\n\
    print(sys.prefix, file=out)\n";

#[test]
fn a_requirements_job_gets_its_package_and_the_environment_is_built_once() {
    if !require::require(&[PYTHON_NEED]) {
        return;
    }
    let c = Cluster::start(ClusterConfig { workers: 1, worker_args: python_args(), ..ClusterConfig::default() });
    let project = c.path("project");
    write(&project.join("requirements.txt"), "# the one package\nsix==1.16.0  # pinned\n");
    write(&project.join("probe.py"), PROBE);
    let job = "name = \"py\"\nworking_dir = \".\"\npython = { requirements = \"requirements.txt\" }\n\
               [[task]]\nname = \"run\"\ncommand = [\"python\", \"probe.py\"]\nreplicas = 2\ncpu = 0.5\noutputs = [\"out\"]\n";
    write(&project.join("job.toml"), job);
    let job_file = project.join("job.toml");

    let first = c.plexus(&["submit", job_file.to_str().unwrap()]);
    assert!(first.status.success(), "{}", describe(&first));
    let id = String::from_utf8_lossy(&first.stdout).trim().to_string();
    let status = c.wait_job(&id, Duration::from_secs(600));
    assert_eq!(status.state, pb::JobState::Succeeded as i32, "{status:?}\n{}", c.worker_log(0));
    let out = c.path("out");
    let got = c.plexus(&["get", &id, "run", "-o", out.to_str().unwrap()]);
    assert!(got.status.success(), "{}", describe(&got));
    let mut prefixes = Vec::new();
    for rank in 0..2 {
        let text = std::fs::read_to_string(out.join(format!("run/{rank}/out"))).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(&lines[..2], ["1.16.0 True", "read-only"], "rank {rank}: {text}");
        prefixes.push(lines[2].to_string());
    }
    assert_eq!(prefixes[0], prefixes[1], "both replicas ran in one environment");
    let envs = c.worker_dir(0).join("envs");
    assert!(prefixes[0].starts_with(envs.to_str().unwrap()), "{} is under {}", prefixes[0], envs.display());

    // A second job with the same requirements reuses the environment.
    let again = c.plexus(&["resubmit", &id]);
    assert!(again.status.success(), "{}", describe(&again));
    let second = String::from_utf8_lossy(&again.stdout).trim().to_string();
    assert_eq!(c.wait_job(&second, Duration::from_secs(300)).state, pb::JobState::Succeeded as i32);
    let log = c.worker_log(0);
    assert_eq!(log.matches("python environment built").count(), 1, "built once for two replicas and two jobs:\n{log}");
    let dirs = std::fs::read_dir(&envs).unwrap().count();
    assert_eq!(dirs, 1, "one environment on the node");

    a_requirement_that_cannot_be_installed_fails_with_pips_message(&c, &project);
    a_file_that_is_not_a_requirements_file_is_refused(&c, &project);
}

fn a_requirement_that_cannot_be_installed_fails_with_pips_message(c: &Cluster, project: &std::path::Path) {
    let job = "name = \"nope\"\npython = { pip = [\"plexus-no-such-package-e2e==9.9.9\"] }\n\
               [[task]]\nname = \"run\"\ncommand = \"echo the command ran\"\n";
    let file = project.join("nope.toml");
    write(&file, job);
    let o = c.plexus(&["submit", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", describe(&o));
    let id = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert_eq!(c.wait_job(&id, Duration::from_secs(300)).state, pb::JobState::Failed as i32);
    let s = &c.job(&id).expect("the job").subtasks[0];
    assert!(
        s.error.contains("python environment: installing the requirements failed")
            && s.error.contains("plexus-no-such-package-e2e"),
        "{}",
        s.error
    );
    assert_ne!(s.exit_code, 1, "not the task's exit code: the command never ran");
    let logs = c.plexus(&["logs", &id, "run"]);
    assert!(!String::from_utf8_lossy(&logs.stdout).contains("the command ran"), "{}", describe(&logs));
    let left: Vec<_> = std::fs::read_dir(c.worker_dir(0).join("envs")).unwrap().flatten().collect();
    assert_eq!(left.len(), 1, "the failed build left nothing behind: {left:?}");
}

fn a_file_that_is_not_a_requirements_file_is_refused(c: &Cluster, project: &std::path::Path) {
    write(&project.join("notreq.txt"), "six\nimport os\n");
    let job = "python = { requirements = \"notreq.txt\" }\n[[task]]\nname = \"t\"\ncommand = \"true\"\n";
    let file = project.join("bad.toml");
    write(&file, job);
    let o = c.plexus(&["submit", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("python.requirements = \"notreq.txt\"")
            && err.contains("is not a requirements file: line 2: \"import os\""),
        "{}",
        describe(&o)
    );
    let job = "python = { pip = [\"--index-url=https://elsewhere\"] }\n[[task]]\nname = \"t\"\ncommand = \"true\"\n";
    write(&file, job);
    let o = c.plexus(&["submit", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("python: requirement [0]") && err.contains("options"),
        "{}",
        describe(&o)
    );
}
